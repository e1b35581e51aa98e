"""`attribution diff`: what one attempt logged that another did not, by log template."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_OK, BadInput

if TYPE_CHECKING:
    from workload_attribution.tasks.templates import Changed, Diff, Template, Templates

# A template's first line is shown this long in the text output (--json has it whole).
SHOWN = 160
NOT_YET = "attempts in the warehouse and `last-good` are not yet supported: give two bundles"


def add(sub: Any) -> None:
    p = common.command(
        sub,
        "diff",
        help="what one attempt logged that another did not, by log template",
        description=(
            "Read every log line of two attempt bundles (app, syslog, fabricmanager, scheduler logs; compressed "
            "files and every bound as for a diagnosis, no pre-filter), reduce each line to a template "
            "(host names, numbers, hex, IPs, paths, UUIDs, times and rank labels masked) and print the templates "
            "ATTEMPT logged that --against never did: error-level first, then the earliest, each with its count "
            "and first line (file:line); then the templates both logged whose rate changed tenfold or more. "
            f"ATTEMPT and --against are bundles (directories with attempt.yaml); {NOT_YET}."
        ),
    )
    p.add_argument("attempt", metavar="ATTEMPT", help="a bundle")
    p.add_argument("--against", required=True, metavar="ATTEMPT", help="the bundle to compare with (a healthy one)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="show the first N templates (default 20)")
    p.add_argument("--json", action="store_true", help="the whole comparison as one JSON document")
    p.add_argument("--max-lines", type=int, default=None, metavar="N", help="lines read per bundle (default 4,000,000)")
    p.add_argument(
        "--max-templates", type=int, default=None, metavar="N", help="templates kept per bundle (default 20,000)"
    )
    p.set_defaults(func=run)


def _bundle(name: str) -> Path:
    path = Path(name)
    if name == "last-good" and not path.exists():
        raise BadInput(f"{name}: {NOT_YET}")
    if not path.is_dir() or not (path / "attempt.yaml").exists():
        raise BadInput(f"{name}: not a bundle (a directory with attempt.yaml); {NOT_YET}")
    return path


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise BadInput(f"{flag} {value}: must be at least 1")


def run(args: argparse.Namespace) -> int:
    from workload_attribution.tasks import templates as tpl

    a, b = _bundle(args.attempt), _bundle(args.against)
    for value, flag in (
        (args.limit, "--limit"),
        (args.max_lines, "--max-lines"),
        (args.max_templates, "--max-templates"),
    ):
        _positive(value, flag)
    bounds = {
        "max_lines": args.max_lines or tpl.MAX_LINES,
        "max_templates": args.max_templates or tpl.MAX_TEMPLATES,
    }
    progress = common.Progress(args)
    sides = []
    for path in (a, b):
        side = tpl.templates_of(path, progress=lambda m: progress(m, final=False), **bounds)
        progress(f"{path}: {side.lines:,} lines, {len(side.templates):,} templates")
        sides.append(side)
    ta, tb = sides
    result = tpl.diff(ta, tb)
    if args.json:
        print(json.dumps(_document(ta, tb, result, args.limit), indent=2))
    else:
        print("\n".join(_text(ta, tb, result, args.limit)))
    return EXIT_OK


def _caps(t: Templates) -> list[str]:
    notes = []
    if t.lines_cap_hit:
        notes.append(f"{t.bundle}: line cap hit, {t.lines:,} lines read, the rest not read")
    if t.templates_cap_hit:
        notes.append(
            f"{t.bundle}: template cap hit, {len(t.templates):,} templates kept, "
            f"{t.lines_over_template_cap:,} lines of later templates counted only"
        )
    notes += [f"{t.bundle}: not read: {why}" for why in t.not_read]
    return notes


def _template(t: Template) -> dict[str, Any]:
    return {
        "template": t.template,
        "level": t.level,
        "count": t.count,
        "source": t.source,
        "first": f"{t.ref}:{t.line}",
        "first_line": t.raw,
        "first_time": t.time.isoformat() if t.time else None,
    }


def _changed(c: Changed) -> dict[str, Any]:
    return {**_template(c.template), "against_count": c.other_count, "factor": round(c.factor, 2)}


def _document(a: Templates, b: Templates, d: Diff, limit: int) -> dict[str, Any]:
    def side(t: Templates) -> dict[str, Any]:
        return {
            "bundle": t.bundle,
            "lines": t.lines,
            "files": t.files,
            "templates": len(t.templates),
            "lines_cap_hit": t.lines_cap_hit,
            "templates_cap_hit": t.templates_cap_hit,
            "lines_over_template_cap": t.lines_over_template_cap,
            "not_read": t.not_read,
        }

    return {
        "attempt": side(a),
        "against": side(b),
        "new": [_template(t) for t in d.new[:limit]],
        "new_total": len(d.new),
        "changed": [_changed(c) for c in d.changed[:limit]],
        "changed_total": len(d.changed),
    }


def _text(a: Templates, b: Templates, d: Diff, limit: int) -> list[str]:
    out = [
        f"{a.bundle} against {b.bundle}: {len(d.new)} template(s) logged only by {a.bundle} "
        f"({len(a.templates):,} templates in {a.lines:,} lines; {len(b.templates):,} in {b.lines:,})"
    ]
    out += [f"  note: {n}" for n in _caps(a) + _caps(b)]
    for t in d.new[:limit]:
        out.append(f"  {t.level:<7} {f'{t.count}x':>5}  {t.template}")
        out.append(f"      {t.ref}:{t.line}: {t.raw[:SHOWN]}")
    if len(d.new) > limit:
        out.append(f"  ... {len(d.new) - limit} more (--limit)")
    if d.changed:
        from workload_attribution.tasks.templates import CHANGED_FACTOR

        out.append(f"changed {CHANGED_FACTOR:g}x or more (per line read): {len(d.changed)}")
        for c in d.changed[:limit]:
            counts = f"{c.template.count}x (against {c.other_count}x)"
            out.append(f"  {c.template.level:<7} {counts}  {c.template.template}")
        if len(d.changed) > limit:
            out.append(f"  ... {len(d.changed) - limit} more (--limit)")
    return out
