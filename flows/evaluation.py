"""Measure the rules against bundles that carry their expected diagnosis (expected.json).

expected.json: terminal_state, sub_domain, affected_nodes (the label), optionally `also_acceptable`
(other labels a careful SRE would accept for a judgment case) and `why`. A bundle matches exactly
when the diagnosis equals the label or one of the acceptable ones on all three fields. A node in
affected_nodes that no acceptable label names is a healthy node blamed: counted apart, because
it is the costly mistake (a drain of a good host)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workload_attribution.rules.pack import Pack


@dataclass
class Outcome:
    bundle: str
    cls: str
    expected: dict
    got: dict | None
    error: str | None = None

    @property
    def labels(self) -> list[dict]:
        return [self.expected] + [a for a in self.expected.get("also_acceptable") or [] if isinstance(a, dict)]

    def _fields(self, label: dict) -> dict[str, bool]:
        g = self.got or {}
        return {
            "terminal_state": g.get("terminal_state") == label["terminal_state"],
            "sub_domain": g.get("sub_domain") == label["sub_domain"],
            "affected_nodes": sorted(g.get("affected_nodes") or []) == sorted(label.get("affected_nodes") or []),
        }

    @property
    def fields(self) -> dict[str, bool]:
        """Field by field, against the acceptable label that matches best (the first on a tie)."""
        return max((self._fields(label) for label in self.labels), key=lambda f: sum(f.values()))

    @property
    def exact(self) -> bool:
        return self.got is not None and all(self.fields.values())

    @property
    def healthy_blamed(self) -> list[str]:
        """Nodes the diagnosis blames that no acceptable label blames."""
        named = {n for label in self.labels for n in label.get("affected_nodes") or []}
        return sorted(set((self.got or {}).get("affected_nodes") or []) - named)


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        by: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            by.setdefault(o.cls, []).append(o)
        head = f"{'class (terminal_state/sub_domain)':48} {'n':>5} {'exact':>7} {'state':>7} {'sub':>7} {'nodes':>7}"
        lines = [head, "-" * len(head)]

        def row(name: str, os_: list[Outcome]) -> str:
            n = len(os_)

            def pct(k: str) -> str:
                return f"{100 * sum(o.fields[k] for o in os_) / n:6.1f}%"

            return (
                f"{name:48} {n:5d} {100 * sum(o.exact for o in os_) / n:6.1f}% "
                f"{pct('terminal_state')} {pct('sub_domain')} {pct('affected_nodes')}"
            )

        for cls in sorted(by):
            lines.append(row(cls, by[cls]))
        lines.append("-" * len(head))
        lines.append(row("all", self.outcomes))
        blamed = [o for o in self.outcomes if o.healthy_blamed]
        lines.append(f"healthy nodes blamed: {sum(len(o.healthy_blamed) for o in blamed)} in {len(blamed)} bundle(s)")
        return "\n".join(lines)

    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.exact]


def find_bundles(root: Path) -> list[Path]:
    return sorted(p.parent for p in Path(root).rglob("expected.json") if (p.parent / "attempt.yaml").is_file())


def evaluate(
    root: Path, pack: Pack, progress: Callable[[int, int], None] | None = None, concurrency: int = 2
) -> Report:
    """Diagnose every bundle under root that carries expected.json, `concurrency` at a time
    (DuckDB works outside the GIL), outcomes in bundle order."""
    from concurrent.futures import ThreadPoolExecutor

    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import Options

    report = Report()
    started = time.monotonic()
    bundles = find_bundles(root)
    done = 0
    lock = threading.Lock()

    def one(b: Path) -> Outcome:
        nonlocal done
        exp = json.loads((b / "expected.json").read_text())
        cls = f"{exp['terminal_state']}/{exp['sub_domain']}"
        try:
            d = attribute_inline(Target(bundle=str(b)), Options(pack=pack))
            got = {
                "terminal_state": d.terminal_state,
                "sub_domain": d.sub_domain,
                "affected_nodes": d.affected_nodes,
                "root": d.root_cause.symptom if d.root_cause else None,
                "failed_rules": [f["rule"] for f in d.rules.failed],
            }
            out = Outcome(str(b), cls, exp, got)
        except Exception as exc:
            out = Outcome(str(b), cls, exp, None, f"{type(exc).__name__}: {exc}")
        with lock:
            done += 1
            if progress:
                progress(done, len(bundles))
        return out

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="eval") as pool:
        report.outcomes.extend(pool.map(one, bundles))
    report.seconds = time.monotonic() - started
    return report
