"""Measure the rules against bundles that carry their expected diagnosis (expected.json).

expected.json: terminal_state, sub_domain, affected_nodes (the label), optionally `also_acceptable`
(other labels a careful SRE would accept for a judgment case) and `why`. A bundle matches exactly
when the diagnosis equals the label or one of the acceptable ones on all three fields. A node in
affected_nodes that no acceptable label names is a healthy node blamed: counted apart, because
it is the costly mistake (a drain of a good host); so is a wrong answer given with high confidence
(nothing tells the reader to look twice), counted too.

`--leave-out` (flows/leave_out.py) diagnoses each bundle again with a pack variant without the
catalog rows that could have been written for it: its outcomes carry the full pack's beside them
and are grouped by the catalog family that read the bundle."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from workload_attribution.rules.pack import Pack

if TYPE_CHECKING:
    from workload_attribution.contracts.models import Diagnosis

T = TypeVar("T")


@dataclass
class Outcome:
    bundle: str
    cls: str
    expected: dict
    got: dict | None
    error: str | None = None
    family: str | None = None  # leave-out: the catalog family the bundle is reported under
    full: Outcome | None = None  # leave-out: the same bundle diagnosed with the full pack
    left_out: list[str] = field(default_factory=list)  # leave-out: the families or rows left out

    @property
    def group(self) -> str:
        """The table's row this outcome counts in: its class, or (leave-out) its family."""
        return self.family if self.family is not None else self.cls

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

    @property
    def wrong_with_high_confidence(self) -> bool:
        """Not exact, yet given with high confidence: nothing tells the reader to look twice."""
        return self.got is not None and self.got.get("confidence") == "high" and not self.exact


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        """Per class (leave-out: per family, the full pack's exact share beside), then all."""
        by: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            by.setdefault(o.group, []).append(o)
        beside = any(o.full is not None for o in self.outcomes)
        heading = "catalog family (the first row read)" if beside else "class (terminal_state/sub_domain)"
        head = f"{heading:48} {'n':>5} {'exact':>7} {'state':>7} {'sub':>7} {'nodes':>7}" + (
            f" {'full':>7}" if beside else ""
        )
        lines = [head, "-" * len(head)]

        def pct(hits: list[bool]) -> str:
            return f"{100 * sum(hits) / len(hits):6.1f}%"

        def row(name: str, os_: list[Outcome]) -> str:
            cells = [pct([o.exact for o in os_])]
            cells += [pct([o.fields[k] for o in os_]) for k in ("terminal_state", "sub_domain", "affected_nodes")]
            if beside:
                cells.append(pct([o.full is not None and o.full.exact for o in os_]))
            return f"{name:48} {len(os_):5d} " + " ".join(cells)

        for group in sorted(by):
            lines.append(row(group, by[group]))
        lines.append("-" * len(head))
        lines.append(row("all", self.outcomes))
        blamed = [o for o in self.outcomes if o.healthy_blamed]
        lines.append(f"healthy nodes blamed: {sum(len(o.healthy_blamed) for o in blamed)} in {len(blamed)} bundle(s)")
        lines.append(f"wrong with high confidence: {sum(o.wrong_with_high_confidence for o in self.outcomes)}")
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
    started = time.monotonic()
    report = Report(diagnose_each(find_bundles(root), lambda b: diagnose(b, pack), progress, concurrency))
    report.seconds = time.monotonic() - started
    return report


def diagnose_each(
    items: list[T],
    one: Callable[[T], Outcome],
    progress: Callable[[int, int], None] | None = None,
    concurrency: int = 2,
) -> list[Outcome]:
    """`one` of every item (a bundle, an outcome to diagnose again), `concurrency` at a time,
    outcomes in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    done = 0
    lock = threading.Lock()

    def counted(item: T) -> Outcome:
        nonlocal done
        out = one(item)
        with lock:
            done += 1
            if progress:
                progress(done, len(items))
        return out

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="eval") as pool:
        return list(pool.map(counted, items))


def expected_of(bundle: Path) -> dict:
    return json.loads((bundle / "expected.json").read_text())


def diagnose(bundle: Path, pack: Pack) -> Outcome:
    """The bundle diagnosed with the pack (in this process, nothing stored), against its label."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import Options

    exp = expected_of(bundle)
    cls = f"{exp['terminal_state']}/{exp['sub_domain']}"
    try:
        d = attribute_inline(Target(bundle=str(bundle)), Options(pack=pack))
    except Exception as exc:
        return Outcome(str(bundle), cls, exp, None, f"{type(exc).__name__}: {exc}")
    got = {
        "terminal_state": d.terminal_state,
        "sub_domain": d.sub_domain,
        "affected_nodes": d.affected_nodes,
        "confidence": d.confidence,
        "root": d.root_cause.symptom if d.root_cause else None,
        "catalog_families": catalog_families(d, pack),
        "failed_rules": [f["rule"] for f in d.rules.failed],
        "would_settle": [m.source for m in d.would_settle],
    }
    return Outcome(str(bundle), cls, exp, got)


def catalog_families(d: Diagnosis, pack: Pack) -> list[str]:
    """The families of the pack's catalog rows behind the diagnosis's events (attrs.catalog names
    the row), in the diagnosis's order: the root's first, then its symptoms' (cascades before
    context, each by time). Another rule's attrs.family is not a catalog row's."""
    family_of = {r.id: r.family for r in pack.catalog}
    found: list[str] = []
    details = [d.root_cause.details] if d.root_cause else []
    for attrs in details + [s.details for s in d.symptoms]:
        family = family_of.get(str(attrs.get("catalog"))) if isinstance(attrs, dict) else None
        if family is not None and family not in found:
            found.append(family)
    return found
