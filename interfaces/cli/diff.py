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
    from workload_attribution.warehouse.templates import StoredAttempt

# A template's first line is shown this long in the text output (--json has it whole).
SHOWN = 160
LAST_GOOD = "last-good"
NAMED = (
    "a bundle (a directory with attempt.yaml), or an attempt the warehouse keeps templates of (its diagnosis id, "
    "or [CLUSTER/]JOB_ID[#ATTEMPT]: the job's latest attempt without #)"
)


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
            f"ATTEMPT and --against are each {NAMED}. --against last-good: the job's last attempt that ended well "
            "(completed) in the warehouse, the same job id first, else the same job name in the cluster."
        ),
    )
    p.add_argument("attempt", metavar="ATTEMPT", help="a bundle, or an attempt in the warehouse")
    p.add_argument(
        "--against",
        required=True,
        metavar="ATTEMPT",
        help="the attempt to compare with (a healthy one): a bundle, an attempt in the warehouse, or last-good",
    )
    p.add_argument("--warehouse", metavar="PATH", help="warehouse file or DuckLake URL (default from config)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="show the first N templates (default 20)")
    p.add_argument("--json", action="store_true", help="the whole comparison as one JSON document")
    p.add_argument("--max-lines", type=int, default=None, metavar="N", help="lines read per bundle (default 4,000,000)")
    p.add_argument(
        "--max-templates", type=int, default=None, metavar="N", help="templates kept per bundle (default 20,000)"
    )
    p.set_defaults(func=run)


def _is_bundle(name: str) -> bool:
    path = Path(name)
    return path.is_dir() and (path / "attempt.yaml").exists()


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise BadInput(f"{flag} {value}: must be at least 1")


class _Sides:
    """Reads each side: a bundle whole, an attempt from the warehouse's kept templates."""

    def __init__(self, args: argparse.Namespace, bounds: dict[str, int], progress: common.Progress):
        self.args, self.bounds, self.progress = args, bounds, progress
        self._warehouse: Any = None

    def warehouse(self) -> Any:
        from workload_attribution.warehouse.store import Warehouse

        if self._warehouse is None:
            cfg = common.load_config(self.args, warehouse=self.args.warehouse)
            if not cfg.warehouse:
                raise BadInput("no warehouse configured (--warehouse): only bundles can be compared")
            self._warehouse = Warehouse(cfg.warehouse)
        return self._warehouse

    def read(self, name: str) -> Templates:
        from workload_attribution.tasks import templates as tpl

        if _is_bundle(name):
            path = Path(name)
            side = tpl.templates_of(path, progress=lambda m: self.progress(m, final=False), **self.bounds)
            self.progress(f"{path}: {side.lines:,} lines, {len(side.templates):,} templates")
            return side
        from workload_attribution.warehouse.templates import find_attempt

        wh = self.warehouse()
        found = wh.read_templates(lambda con: find_attempt(con, name), None)
        if found is None:
            raise BadInput(
                f"{name}: not a bundle, and no attempt of that name has log templates in the warehouse {wh} "
                f"(they are kept for doubtful and completed diagnoses); give {NAMED}"
            )
        return self.stored(found, name)

    def stored(self, found: StoredAttempt, label: str) -> Templates:
        from workload_attribution.contracts.models import AttemptScope
        from workload_attribution.tasks.novelty import from_warehouse
        from workload_attribution.warehouse.templates import rows_of

        wh = self.warehouse()
        kept = wh.read_templates(lambda con: rows_of(con, found.diagnosis_id), None)
        doc = wh.get(found.cluster, found.scheduler, found.job_id, found.attempt) or {}
        scope = AttemptScope.model_validate(doc["attempt"]) if "attempt" in doc else None
        if kept is None or scope is None:
            raise BadInput(f"{label}: the warehouse {wh} no longer holds {found.describe()}")
        return from_warehouse(label, scope, kept)

    def last_good(self, of: Templates) -> Templates:
        from workload_attribution.warehouse.templates import last_good

        wh = self.warehouse()
        scope = of.scope
        found = wh.read_templates(lambda con: last_good(con, scope), None)
        if found is None:
            raise BadInput(
                f"{LAST_GOOD}: no attempt of {scope.cluster}/{scope.scheduler} job {scope.job_id}"
                + (f" (or named {scope.name})" if scope.name else "")
                + f" that ended well (completed), no later than {of.bundle}, has log templates in the warehouse {wh}: "
                "diagnose a good attempt of the job first, or give --against BUNDLE"
            )
        return self.stored(found, f"{found.describe()} ({LAST_GOOD})")


def run(args: argparse.Namespace) -> int:
    from workload_attribution.tasks import templates as tpl

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
    sides = _Sides(args, bounds, common.Progress(args))
    if args.against == LAST_GOOD and not _is_bundle(args.against):
        ta = sides.read(args.attempt)
        tb = sides.last_good(ta)
    else:
        ta, tb = sides.read(args.attempt), sides.read(args.against)
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
    return notes + t.notes


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
