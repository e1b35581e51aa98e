"""`attribution rules coverage`: what of the pack no test reaches. A catalog row is reached when a
line of some rule's or the pack's tests (not only the row's own test line) gives it; a verdict
path (a verdicts rule) when a pack test's diagnosis takes its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from workload_attribution.rules.claims import Probe, claims
from workload_attribution.rules.pack import Pack
from workload_attribution.rules.testing import run_pack_case


@dataclass
class Coverage:
    rows_unreached: list[str] = field(default_factory=list)
    rows: int = 0
    verdicts_unreached: list[str] = field(default_factory=list)
    verdicts_taken: dict[str, int] = field(default_factory=dict)


def _probes(pack: Pack) -> list[Probe]:
    lines = [x for r in pack.rules for case in r.tests for x in case.lines]
    lines += [x for case in pack.tests for x in case.lines]
    return list(dict.fromkeys(Probe(x["source"], x["text"], x.get("node") or "n1") for x in lines))


def coverage(pack: Pack) -> Coverage:
    out = Coverage(rows=len(pack.catalog))
    probes = _probes(pack)
    got = claims(pack, probes, resolve=True)
    seen_rows = {e["attrs"].get("catalog") for events in got.events for e in events}
    out.rows_unreached = [row.id for row in pack.catalog if row.id not in seen_rows]
    for case in pack.tests:
        chosen = run_pack_case(pack, case).verdict
        out.verdicts_taken[chosen] = out.verdicts_taken.get(chosen, 0) + 1
    out.verdicts_unreached = [r for r in pack.precedence if r not in out.verdicts_taken]
    return out
