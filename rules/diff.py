"""What two rules packs can decide differently, as far as the packs alone say: which rules differ,
whether the precedence or the fallback verdict differs, and whether what the rules stand on
differs (the data tables, the Python modules, the symptom definitions). A differing table or module
counts against the rules that read or run it, when those can be told (rules/reads.py), else
against every rule. A replay (tasks/replay.py) starts at the first phase where the packs part,
from the events as they stood then, when the archive kept them (`prefix_digest` says whether it
did, for this pack).

A rule's tests, description and labels decide nothing: a change to them changes no digest here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload_attribution.rules.pack import PHASES, Pack, Rule
from workload_attribution.rules.pack_data import DATA_DIR, PACK_DATA, table_of
from workload_attribution.rules.phases import RESUMABLE, resume_point
from workload_attribution.rules.reads import module_users, readers

# What a rule decides with; the rest of its file is documentation and tests.
_INERT = {"tests", "description", "labels", "path"}
# The pack's own folders of rules and tests; every other file below the pack (data, python, any
# table a later pack adds) is something the rules stand on, except documentation and what only the
# report reads (what would settle an undecided verdict: no verdict depends on it).
_NOT_FOUNDATIONS = {*PHASES, "tests", "__pycache__"}
_REPORT_ONLY = {"data/evidence_sources.csv"}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rule_digest(rule: Rule) -> str:
    return _digest(rule.model_dump(mode="json", exclude=_INERT))


def foundations(pack: Pack) -> dict[str, str]:
    """Digest of each file the rules stand on (data/..., python/...) and of the symptom definitions:
    read once a pack, for its path and version (the version covers every file of the pack)."""
    return pack.derived("foundations", (pack.path, pack.version), lambda: _read_foundations(pack))


def _read_foundations(pack: Pack) -> dict[str, str]:
    root = Path(pack.path) if pack.path else DATA_DIR.parent
    out: dict[str, str] = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in _NOT_FOUNDATIONS):
        for f in sorted(sub.rglob("*")):
            name = f.relative_to(root).as_posix()
            # what Python and the data tables' cache keep beside the files (__pycache__/) is not the pack
            if "__pycache__" in f.parts:
                continue
            if f.is_file() and f.suffix not in (".md", ".pyc") and name not in _REPORT_ONLY:
                out[name] = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
    for table, _ in PACK_DATA:  # a table the pack does not have is the shipped one (pack_data.py)
        name = f"data/{table}.csv"
        if name not in out and name not in _REPORT_ONLY:
            out[name] = hashlib.sha256((DATA_DIR / f"{table}.csv").read_bytes()).hexdigest()[:16]
    defs = {name: [rule_id, d.model_dump(mode="json")] for name, (rule_id, d) in pack.symptom_defs.items()}
    out["symptom definitions"] = _digest(defs)
    return out


def _choice(pack: Pack) -> str:
    return _digest([pack.precedence, pack.no_verdict.model_dump(mode="json")])


@dataclass
class PackDiff:
    rules: dict[str, str] = field(default_factory=dict)  # rule id -> added | removed | changed
    phases: dict[str, str] = field(default_factory=dict)  # rule id -> its phase (in either pack)
    points: dict[str, str] = field(default_factory=dict)  # rule id -> its resume point (phases.py)
    outputs: dict[str, str] = field(default_factory=dict)  # rule id -> its output kind (in either pack)
    foundations: list[str] = field(default_factory=list)  # data files, modules, definitions that differ
    # a differing foundation only some rules stand on (a table they read, a Python module they
    # run: rules/reads.py) -> those rules
    stood_on: dict[str, list[str]] = field(default_factory=dict)
    # when a catalogs/ file differs: the ids of the catalog rows that differ, None when the rest
    # are not in the same order (see catalog_rows)
    catalog_rows: list[str] | None = None
    choice: bool = False  # the precedence or the fallback verdict differs

    @property
    def loose(self) -> list[str]:
        """The differing foundations any rule may stand on (not a table with known readers)."""
        return [f for f in self.foundations if f not in self.stood_on]

    def reasons(self, rule_id: str) -> list[str]:
        """Why a rule can decide differently: `rule` (it differs) and the foundations it stands on
        that differ."""
        return (["rule"] if rule_id in self.rules else []) + [f for f, ids in self.stood_on.items() if rule_id in ids]

    @property
    def affected(self) -> dict[str, str]:
        """Every rule that can decide differently: the differing rules, and those reading a
        differing table or run a differing module (rule id -> added | removed | changed | reads <file>)."""
        out = {r: f"{_uses(f)} {f}" for f, ids in self.stood_on.items() for r in ids}
        return out | self.rules

    @property
    def first_point(self) -> str | None:
        """The first point of a run (phases.RESUMABLE) after which the two packs can part; None:
        they decide alike."""
        if self.loose:
            return "extract"
        points = [self.points[r] for r in self.affected] + (["final"] if self.choice else [])
        return min(points, key=RESUMABLE.index) if points else None

    def describe(self) -> list[str]:
        out = [f"rule {r} {how}" for r, how in sorted(self.rules.items())]
        out += [f"{f} changed" + _stood_on_by(f, self.stood_on.get(f)) for f in self.foundations]
        return out + (["the precedence or the no_verdict changed"] if self.choice else [])


def _uses(file: str) -> str:
    return "runs" if file.startswith("python/") else "reads"


def _stood_on_by(file: str, ids: list[str] | None) -> str:
    if ids is None:
        return ""
    verb = "run by" if _uses(file) == "runs" else "read by"
    return f" ({verb} {', '.join(ids)})" if ids else f" ({verb} no rule)"


def diff(shipped: Pack, candidate: Pack) -> PackDiff:
    old = {r.id: r for r in shipped.rules}
    new = {r.id: r for r in candidate.rules}
    d = PackDiff()
    for rid in sorted(old.keys() | new.keys()):
        a, b = old.get(rid), new.get(rid)
        if a is None or b is None or rule_digest(a) != rule_digest(b):
            d.rules[rid] = "added" if a is None else "removed" if b is None else "changed"
    fa, fb = foundations(shipped), foundations(candidate)
    d.foundations = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    for f in d.foundations:
        ids = _standing_on(shipped, candidate, f)
        if ids is not None:
            d.stood_on[f] = ids
    if any(f.startswith("catalogs/") for f in d.foundations):
        d.catalog_rows = catalog_rows(shipped, candidate)
    for rid in d.affected:
        a, b = old.get(rid), new.get(rid)
        d.phases[rid] = min((r.phase for r in (a, b) if r), key=PHASES.index)
        d.points[rid] = min((resume_point(r) for r in (a, b) if r), key=RESUMABLE.index)
        d.outputs[rid] = (b or a).output  # type: ignore[union-attr]  # one of them is a rule
    d.choice = _choice(shipped) != _choice(candidate)
    return d


def catalog_rows(shipped: Pack, candidate: Pack) -> list[str] | None:
    """The ids of the catalog rows that differ (added, removed or changed), when the other rows
    keep their order: a line's events come from the rows matching it, the first in catalog order
    for each symptom (python/catalog.py), so where no differing row matches, nothing differs.
    None when the other rows are reordered (a line's first match could then differ)."""
    a = {r.id: r.model_dump(mode="json") for r in shipped.catalog}
    b = {r.id: r.model_dump(mode="json") for r in candidate.catalog}
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    kept = [[r.id for r in p.catalog if r.id not in differ] for p in (shipped, candidate)]
    return differ if kept[0] == kept[1] else None


def _standing_on(shipped: Pack, candidate: Pack, file: str) -> list[str] | None:
    """The rules of either pack that stand on a differing file: read the table it makes, or run
    the Python module it is; None for any other file, or when that cannot be told."""
    table = table_of(file)
    folder, _, name = file.partition("/")
    if table is not None:
        found = [readers(p, table) for p in (shipped, candidate)]
    elif folder == "python" and name.endswith(".py") and "/" not in name:
        found = [module_users(p, name.removesuffix(".py")) for p in (shipped, candidate)]
    else:
        return None
    return None if None in found else sorted(set().union(*found))  # type: ignore[arg-type]


def prefix_digest(pack: Pack, point: str, settings: dict[str, Any]) -> str:
    """What the state at `point` (phases.RESUMABLE) depends on: the settings, the foundations, the
    rules that run before it and, once the verdict is chosen, the choice. Equal digests: equal
    state, on the same evidence."""
    before = RESUMABLE[: RESUMABLE.index(point)]
    rules = [[rule_id, digest] for rule_id, digest, at in _rule_digests(pack) if at in before]
    parts: list[Any] = [settings, foundations(pack), rules]
    if "final" in before:
        parts.append(_choice(pack))
    return _digest(parts)


def _rule_digests(pack: Pack) -> list[tuple[str, str, str]]:
    """Each rule's id, digest and resume point, in the order the phases run them: made once for
    the pack's rules (Pack.derived)."""
    return pack.derived(
        "rule_digests",
        (pack.rules,),
        lambda: [(r.id, rule_digest(r), resume_point(r)) for p in PHASES for r in pack.by_phase(p)],
    )


def warm_digests(pack: Pack) -> None:
    """What prefix_digest reads of a pack, made now (default_pack keeps them with the pack)."""
    _rule_digests(pack)
    foundations(pack)
