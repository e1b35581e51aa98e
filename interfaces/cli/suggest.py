"""`attribution rules suggest`: the fleet's insufficient_evidence attempts grouped by the messages
they logged that no completed attempt did, the largest groups drafted as catalog rows
(tasks/suggest.py); with --out, a candidate pack holding them for `rules validate`, `rules test` and
`rules impact --candidate`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput

SUGGEST_OPTIONS = ("top", "out")
DEFAULT_SINCE = "30d"
DEFAULT_TOP = 10
REVIEW = (
    "a row marked 'needs a meaning' has the placeholder symptom needs_a_meaning (a root of "
    "unknown/insufficient_evidence that blames nobody): a reviewer must set its meaning, family, reference "
    "and false positives before it ships"
)

# a drafted row whose lines `rules impact` cannot replay
UNSEEN = (
    "the first line of these rows' groups holds no literal of the pack in force, so the archive kept none of "
    "their lines and `rules impact` cannot show the attempts they change (attribution backfill diagnoses them "
    "again from their sources):"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("suggest")
    g.add_argument("--top", type=int, metavar="N", help=f"suggest: draft rows for the N largest groups ({DEFAULT_TOP})")
    g.add_argument("--out", metavar="DIR", help="suggest: write a candidate pack (the pack with the rows) to DIR")


def refuse_its_options(args: argparse.Namespace) -> None:
    given = [o for o in SUGGEST_OPTIONS if getattr(args, o, None) is not None]
    if given:
        raise BadInput(f"--{given[0]} is an option of `rules suggest` only")


def run(args: argparse.Namespace) -> int:
    from workload_attribution.contracts.times import parse_when
    from workload_attribution.flows.pipeline import load_rules
    from workload_attribution.rules.pack import RULES_DIR
    from workload_attribution.tasks.suggest import suggest, write_candidate
    from workload_attribution.warehouse.store import Warehouse

    for o in ("candidate", "cluster", "markdown", "max_changed", "max_changed_percent", "jobs"):
        if getattr(args, o, None) not in (None, False):
            raise BadInput(f"--{o.replace('_', '-')} is an option of `rules impact` only")
    top = DEFAULT_TOP if args.top is None else args.top
    if top < 1:
        raise BadInput(f"--top {top}: must be at least 1")
    since = parse_when(args.since or DEFAULT_SINCE)
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: exists and is not an empty directory")
    cfg = common.load_config(args, warehouse=args.warehouse)
    if not cfg.warehouse:
        raise BadInput("rules suggest: no warehouse configured (--warehouse): the attempts are read from it")
    wh = Warehouse(cfg.warehouse)
    if not wh.lake and not wh.path.exists():
        raise BadInput(f"rules suggest: no warehouse at {cfg.warehouse}")
    rules_dir = Path(common.rules_dir(args, cfg) or RULES_DIR)
    pack = load_rules(str(rules_dir))
    found = suggest(wh, pack, since, top)
    written = write_candidate(rules_dir, out, found.drafted) if out is not None else None
    if args.json:
        print(json.dumps(as_json(found, cfg.warehouse, written), indent=2, default=_iso))
    else:
        print(text(found, cfg.warehouse, written))
    return EXIT_OK


def _iso(value: Any) -> str:
    """Times as RFC 3339 in the JSON."""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _meaning(g: Any) -> str:
    if g.row is None:
        return f"no row: {g.why_not}" if g.why_not else "not drafted (past --top)"
    if g.needs_meaning:
        return "needs a meaning (placeholder needs_a_meaning)"
    verdict = f" -> {g.row['terminal_state']}/{g.row['sub_domain']}" if g.row["terminal_state"] else ""
    return f"{g.row['symptom']} ({g.row['role']}{verdict}), read by concept {g.concept.split(':')[0]}"


def text(found: Any, warehouse: str, written: Path | None) -> str:
    window = f"since {found.since:%Y-%m-%d %H:%M}" if found.since else "any time"
    lines = [
        f"rules suggest: {found.attempts} insufficient_evidence attempt(s) {window} in {warehouse}: "
        f"{len(found.groups)} message(s) logged by no completed attempt, {len(found.drafted)} drafted"
        + (f"; {found.without_novel} attempt(s) logged none" if found.without_novel else "")
    ]
    lines += [f"  note: {n}" for n in found.notes]
    if found.groups:
        lines.append(f"  {'#':>3}  {'attempts':>8}  {'hosts':>5}  first line / proposed meaning")
    pad = " " * 26
    for i, g in enumerate(found.groups[: max(len(found.drafted), 1) + 5], 1):
        first = g.first
        lines.append(f"  {i:>3}  {len(g.attempts):>8}  {g.hosts:>5}  {first.text[:160]}")
        lines.append(f"{pad}meaning: {_meaning(g)}")
        if g.row:
            lines.append(f"{pad}row    : {g.row['id']} {g.row['match']}: {g.row['pattern']}")
            lines.append(f"{pad}origin : {first.attempt.describe()} ({first.ref}:{first.line})")
    if len(found.groups) > len(found.drafted) + 5:
        lines.append(f"  ... {len(found.groups) - len(found.drafted) - 5} more (--json lists every group)")
    if found.known:
        lines.append(f"  already read by the pack (left out): {len(found.known)}, e.g. {found.known[0].read_by}")
    unseen = [g.row["id"] for g in found.drafted if g.row and not g.archived]
    if unseen:
        lines.append(f"  not archived: {UNSEEN} {', '.join(unseen)}")
    if any(g.needs_meaning for g in found.drafted):
        lines.append(f"  review: {REVIEW}")
    if written is not None:
        out = written.parent.parent
        lines.append(
            f"candidate pack {out}: {len(found.drafted)} row(s) in {written.relative_to(out)}; next: "
            f"attribution rules validate --rules-dir {out}; attribution rules test --rules-dir {out}; "
            f"attribution rules impact --candidate {out} --warehouse {warehouse}"
        )
    return "\n".join(lines)


def _attempt(a: Any) -> dict[str, Any]:
    return {
        "diagnosis_id": a.diagnosis_id,
        "cluster": a.cluster,
        "scheduler": a.scheduler,
        "job_id": a.job_id,
        "attempt": a.attempt,
        "end": a.end,
    }


def _group(i: int, g: Any) -> dict[str, Any]:
    first = g.first
    return {
        "rank": i,
        "message": g.key,
        "attempts": len(g.attempts),
        "hosts": g.hosts,
        "first_line": first.text,
        "source": first.source,
        "origin": {**_attempt(first.attempt), "ref": first.ref, "line": first.line, "time": first.time},
        "meaning": None if g.row is None else g.row["symptom"],
        "needs_meaning": g.needs_meaning,
        "archived": g.archived,
        "concept": g.concept.split(":")[0] if g.concept else None,
        "row": g.row,
        "why_not": g.why_not,
        "changes": [_attempt(a) for a in g.attempts],
    }


def as_json(found: Any, warehouse: str, written: Path | None) -> dict[str, Any]:
    return {
        "warehouse": str(warehouse),
        "since": found.since,
        "attempts": found.attempts,
        "without_novel": found.without_novel,
        "drafted": len(found.drafted),
        "candidate": str(written.parent.parent) if written else None,
        "review": REVIEW if any(g.needs_meaning for g in found.drafted) else None,
        "groups": [_group(i, g) for i, g in enumerate(found.groups, 1)],
        "known": [{"message": g.key, "attempts": len(g.attempts), "read_by": g.read_by} for g in found.known],
        "notes": found.notes,
    }
