"""`attribution rules impact --candidate DIR`: what a rules change would do to the archived attempts'
verdicts (flows/impact.py), as text, JSON or markdown for a review comment; exit 4 past a threshold
(CI gating of rule changes)."""

from __future__ import annotations

import argparse
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_CHECKS_FAILED, EXIT_OK, BadInput

IMPACT_OPTIONS = (
    "candidate",
    "since",
    "cluster",
    "warehouse",
    "markdown",
    "max_changed",
    "max_changed_percent",
    "jobs",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("impact")
    g.add_argument("--candidate", metavar="DIR", help="impact: the rules pack to compare with the one in force")
    g.add_argument(
        "--since",
        metavar="TIME",
        help="impact, suggest: attempts that ended since (RFC 3339, or 30d, 12h; suggest: 30d)",
    )
    g.add_argument("--cluster", metavar="NAME", help="impact: this cluster's attempts only")
    g.add_argument(
        "--warehouse",
        metavar="PATH",
        help="impact: the warehouse whose archive is replayed; suggest: whose attempts are grouped",
    )
    g.add_argument("--markdown", action="store_true", help="impact: the report as markdown (a review comment)")
    g.add_argument("--max-changed", type=int, metavar="N", help="impact: exit 4 when more than N attempts change")
    g.add_argument(
        "--max-changed-percent", type=float, metavar="P", help="impact: exit 4 when more than P%% of them change"
    )
    g.add_argument("--jobs", type=int, metavar="N", help="impact: replaying processes (default: one a core)")


def refuse_its_options(args: argparse.Namespace) -> None:
    given = [o for o in IMPACT_OPTIONS if getattr(args, o, None) not in (None, False)]
    if given:
        raise BadInput(f"--{given[0].replace('_', '-')} is an option of `rules impact` only")


def run(args: argparse.Namespace) -> int:
    from workload_attribution.contracts.times import parse_when
    from workload_attribution.flows.impact import impact
    from workload_attribution.warehouse.archive import Archive, location_for

    if not args.candidate:
        raise BadInput("rules impact: --candidate DIR (the rules pack to compare) is required")
    if args.jobs is not None and not 1 <= args.jobs <= 64:
        raise BadInput("--jobs: 1 to 64")
    cfg = common.load_config(args, warehouse=args.warehouse)
    location = location_for(cfg.warehouse, cfg.archive)
    if location is None:
        raise BadInput("rules impact: no evidence archive (configure a warehouse, and archive.enabled)")
    since = parse_when(args.since) if args.since else None
    progress = common.Progress(args)
    report = impact(
        Archive(location),
        common.rules_dir(args, cfg),
        args.candidate,
        cfg.rules,
        since=since,
        cluster=args.cluster,
        jobs=args.jobs,
        progress=lambda i, n: progress(f"[{i}/{n}] replayed", final=i == n),
    )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print(markdown(report) if args.markdown else text(report))
    return EXIT_CHECKS_FAILED if over_threshold(report, args) else EXIT_OK


# what a replay cannot see: lines holding a literal only the candidate looks for were never archived
UNSEEN = (
    "the archive keeps only the lines the shipped pack's prefilters kept, so attempts whose logs hold "
    "lines only the candidate looks for do not show as changed here (attribution backfill diagnoses them "
    "again from their sources):"
)


def over_threshold(report: Any, args: argparse.Namespace) -> bool:
    if args.max_changed is not None and len(report.changed) > args.max_changed:
        return True
    return args.max_changed_percent is not None and report.changed_percent > args.max_changed_percent


def _side(o: Any) -> str:
    root = f"{o.root_symptom} on {o.root_node or '-'}" if o.root_symptom else "no root"
    nodes = ",".join(o.affected_nodes) or "-"
    return f"{o.verdict}, root {root}, blamed {nodes}, action {o.action}"


def _window(report: Any) -> str:
    parts = [f"since {report.since:%Y-%m-%d %H:%M}"] if report.since else []
    parts += [f"cluster {report.cluster}"] if report.cluster else []
    return ", ".join(parts) or "every archived attempt"


def text(report: Any) -> str:
    lines = [
        f"rules impact: candidate {report.candidate} against {report.shipped}",
        f"  differs in : {'; '.join(report.differences) or 'nothing that decides'}",
        f"  attempts   : {report.attempts} replayed ({_window(report)}): {len(report.changed)} changed "
        f"({report.changed_percent:.1f}%)",
    ]
    if report.unseen:
        lines.append(f"  not seen   : {UNSEEN} {', '.join(repr(u) for u in report.unseen)}")
    if report.failed:
        lines.append(f"  not replayed: {len(report.failed)}, e.g. {next(iter(report.failed.values()))}")
    if report.transitions:
        lines.append("verdict transitions:")
        width = max(len(t.old) for t in report.transitions)
        lines += [f"  {t.old:<{width}} -> {t.new}: {t.attempts} ({', '.join(t.changes)})" for t in report.transitions]
    if report.changed:
        lines.append("changed attempts:")
    for c in report.changed:
        lines.append(f"  {c.cluster} job {c.job_id} attempt {c.attempt} (ended {c.end:%Y-%m-%d %H:%M})")
        lines.append(f"    old: {_side(c.old)}")
        lines.append(f"    new: {_side(c.new)}")
    return "\n".join(lines)


def _md_side(o: Any) -> str:
    root = f"`{o.root_symptom}` on {o.root_node or '-'}" if o.root_symptom else "no root"
    return f"{o.verdict}: {root}, {o.action}"


def markdown(report: Any) -> str:
    n, total = len(report.changed), report.attempts
    lines = [
        f"### Rules impact: {n} of {total} archived attempts change ({report.changed_percent:.1f}%)",
        "",
        f"Candidate `{report.candidate}` against `{report.shipped}` ({_window(report)}): "
        + ("; ".join(report.differences) or "nothing that decides differs")
        + ".",
    ]
    if report.transitions:
        lines += ["", "| from | to | attempts | what changed |", "| --- | --- | ---: | --- |"]
        lines += [f"| {t.old} | {t.new} | {t.attempts} | {', '.join(t.changes)} |" for t in report.transitions]
    if report.changed:
        lines += ["", "| attempt | ended | old | new |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {c.cluster} job {c.job_id} #{c.attempt} | {c.end:%Y-%m-%d %H:%M} | {_md_side(c.old)} | "
            f"{_md_side(c.new)} |"
            for c in report.changed
        ]
    if report.unseen:
        lines += ["", f"**Not seen**: {UNSEEN} " + ", ".join(f"`{u}`" for u in report.unseen) + "."]
    if report.failed:
        lines += ["", f"{len(report.failed)} archived attempt(s) could not be replayed."]
    return "\n".join(lines)
