"""What a doubtful diagnosis' attempt logged that is new: the log templates its job's last good
attempt never logged, or that few attempts of the fleet did, for a person to read first.

When the rules cannot decide (sub_domain `insufficient_evidence` or `ambiguous`, or confidence
`low`), the answer is often in a line no catalog row, rule or concept knows. Publishing such a
diagnosis reads its bundle a second time, every line (tasks/templates.py: what varies masked, each
template counted with its first line), and compares the templates with the warehouse's:

- the job's last good attempt (the last one of the same job, else of the same job name in the same
  cluster, that ended `completed` no later than this one, with its templates kept): every template
  it never logged is new (`why`: "not in the job's last good attempt ...");
- without one, the fleet: the other attempts whose templates the warehouse keeps, ended in the 30
  days before this one; a template at most RARE_SHARE of them logged is rare (`why`: "rare in the
  fleet: N of M attempts in 30 days").

What the rules explained (the root cause's lines, and those of its `cascade` symptoms) is left
out; the rest is ranked error-level first, then the earliest, and the first LISTED are
`novel_templates` (`novelty` says what they were compared with and what could not be). Attempts
that ended well keep their templates too (the baselines); so do the doubtful ones (the fleet's
record). A confident failure diagnosis reads nothing more: `keeps_templates` is False for it, and
no bundle is read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from workload_attribution.contracts.models import AttemptScope, Diagnosis, NovelTemplate, Novelty
from workload_attribution.contracts.vocabulary import Confidence, Role, SubDomain, TerminalState
from workload_attribution.staging.database import ONE_THREAD

# The templates (their reader and the warehouse's rows of them) are imported when a diagnosis is
# stored: one with no warehouse only says it had nothing to compare with (without_warehouse).
if TYPE_CHECKING:
    from workload_attribution.tasks.templates import Template, Templates
    from workload_attribution.warehouse.store import Warehouse
    from workload_attribution.warehouse.templates import AttemptTemplates, StoredAttempt

# Templates kept per attempt in the warehouse: the most frequent, then the earliest. A busy attempt
# has a few dozen to a few hundred; a row is ~300 bytes as logged (at most ~1.5 KB: a 400-character
# template and its 1,000-character first line), so the cap bounds an attempt at ~0.6 MB typical,
# 3 MB at worst, before compression. A baseline's template past the cap may show as new in a later
# attempt (the note says so).
STORED_TEMPLATES = 2_000
# novel_templates lists this many (Novelty.novel counts them all).
LISTED = 10
# The fleet window, and the share of its attempts under which a template is rare.
FLEET_DAYS = 30
RARE_SHARE = 0.05
DOUBTFUL = (SubDomain.insufficient_evidence, SubDomain.ambiguous)


def doubtful(d: Diagnosis) -> bool:
    """A verdict the rules could not settle: insufficient_evidence, ambiguous, or low confidence."""
    return d.sub_domain in DOUBTFUL or d.confidence == Confidence.low


def keeps_templates(d: Diagnosis) -> bool:
    """Whether publishing the diagnosis reads the bundle's templates: a doubtful verdict (to find
    what is new) or an attempt that ended well (a baseline for the job's later attempts)."""
    return doubtful(d) or d.terminal_state == TerminalState.completed


def bundle_of(sources: dict[str, tuple[str, Any]]) -> Path | None:
    """The bundle an attempt was read from (its sources' `bundle` connector), if it was."""
    for connector, config in sources.values():
        path = getattr(config, "path", None)
        if connector == "bundle" and path:
            return Path(path)
    return None


def stored(t: Templates, cap: int = STORED_TEMPLATES) -> AttemptTemplates:
    """The rows an attempt keeps: its `cap` most frequent templates, then the earliest."""
    from workload_attribution.tasks.templates import order_of
    from workload_attribution.warehouse.templates import AttemptTemplates, TemplateRow

    kept = sorted(t.templates.values(), key=lambda x: (-x.count, order_of(x), x.template))[:cap]
    return AttemptTemplates(
        rows=[
            TemplateRow(
                template=x.template,
                level=x.level,
                count=x.count,
                source=x.source,
                node=x.node,
                first_ref=x.ref,
                first_line=x.line,
                first_time=x.time,
                first_text=x.raw,
            )
            for x in kept
        ],
        lines_read=t.lines,
        templates_total=len(t.templates),
    )


def from_warehouse(label: str, scope: AttemptScope, kept: AttemptTemplates) -> Templates:
    """An attempt's templates as the warehouse keeps them, in the shape a bundle's read has (for
    `attribution diff`): its rows, the lines they were read from, and a note when it kept fewer."""
    from workload_attribution.tasks.templates import Template, Templates

    out = Templates(bundle=label, scope=scope, lines=kept.lines_read)
    for r in kept.rows:
        out.templates[r.template] = Template(
            template=r.template,
            level=r.level,
            count=r.count,
            source=r.source or "",
            ref=r.first_ref,
            line=r.first_line,
            raw=r.first_text,
            time=r.first_time.astimezone(timezone.utc) if r.first_time else None,
            node=r.node,
        )
    if kept.templates_total > len(kept.rows):
        out.notes.append(
            f"{label}: the warehouse keeps {len(kept.rows):,} of its {kept.templates_total:,} templates "
            "(the most frequent): a rarer one of it may show as new on the other side"
        )
    return out


def without_warehouse(d: Diagnosis) -> Diagnosis:
    """A doubtful diagnosis not stored: nothing to compare with, said so."""
    if not doubtful(d):
        return d
    d = d.model_copy(deep=True)
    d.novelty = Novelty(note="no warehouse: no earlier attempt to compare this attempt's log templates with")
    return d


def read_templates(
    d: Diagnosis,
    wh: Warehouse,
    sources: dict[str, tuple[str, Any]],
    read: Callable[[Path], Templates] | None = None,
) -> tuple[Diagnosis, AttemptTemplates | None]:
    """The diagnosis (with `novel_templates` when doubtful) and the template rows its attempt keeps;
    (d, None) for a confident failure, which costs nothing: no bundle is read. Never raises: a
    bundle or warehouse that cannot be read is the novelty's note, and the diagnosis is stored."""
    from workload_attribution.tasks import templates

    if not keeps_templates(d):
        return d, None
    d = d.model_copy(deep=True)
    bundle = bundle_of(sources)
    if bundle is None:
        if doubtful(d):
            d.novelty = Novelty(note="no bundle: log templates are read from a bundle's logs, not from live sources")
        return d, None
    try:
        t = (read or templates.templates_of)(bundle)
    except Exception as exc:  # a bundle gone since it was diagnosed: the diagnosis still stands
        if doubtful(d):
            d.novelty = Novelty(note=f"the bundle's logs could not be read again: {type(exc).__name__}: {exc}"[:500])
        return d, None
    if doubtful(d):
        try:
            d = novel(d, t, wh)
        except (duckdb.Error, OSError) as exc:
            note = f"the warehouse could not be read: {exc}"[:500]
            d.novelty = Novelty(lines=t.lines, templates=len(t.templates), note=note)
    return d, stored(t)


def novel(d: Diagnosis, t: Templates, wh: Warehouse) -> Diagnosis:
    """`novel_templates` and `novelty` of a doubtful diagnosis, against the warehouse."""
    from workload_attribution.tasks.templates import order_of
    from workload_attribution.warehouse.templates import fleet_counts, last_good, rows_of

    a = d.attempt
    key = [a.cluster, a.scheduler, a.job_id, a.attempt]

    def lookup(con: duckdb.DuckDBPyConnection) -> tuple[StoredAttempt | None, AttemptTemplates | None, int, dict]:
        base = last_good(con, a, d.diagnosis_id)
        base_rows = rows_of(con, base.diagnosis_id) if base else None
        known = {r.template for r in base_rows.rows} if base_rows else set()
        candidates = sorted(k for k in t.templates if k not in known)
        total, counts = fleet_counts(con, candidates, a.end, FLEET_DAYS, key)
        return base, base_rows, total, counts

    base, base_rows, total, counts = wh.on_writer(lookup)
    known = {r.template for r in base_rows.rows} if base_rows else set()
    left_out = explained(d)
    found: list[tuple[Template, str, int]] = []
    for x in t.templates.values():
        if x.template in known or x.template in left_out or f"{x.ref}:{x.line}" in left_out:
            continue
        n = counts.get(x.template, 0)
        if base is not None:
            why = f"not in the job's last good attempt ({base.describe()})"
            if total:
                why += f"; fleet: {n} of {total} attempts in {FLEET_DAYS} days"
        elif total and (n == 0 or n / total <= RARE_SHARE):
            why = f"rare in the fleet: {n} of {total} attempts in {FLEET_DAYS} days"
        else:
            continue
        found.append((x, why, n))
    found.sort(key=lambda f: (order_of(f[0]), f[0].template))
    d.novel_templates = [
        NovelTemplate(
            template=x.template,
            level=x.level,
            count=x.count,
            first=f"{x.ref}:{x.line}",
            line=x.raw,
            time=x.time,
            node=x.node,
            why=why,
            fleet_attempts=n if total else None,
            fleet_total=total or None,
        )
        for x, why, n in found[:LISTED]
    ]
    d.novelty = Novelty(
        baseline=base.describe() if base else None,
        baseline_diagnosis_id=base.diagnosis_id if base else None,
        fleet_days=FLEET_DAYS,
        fleet_total=total,
        lines=t.lines,
        templates=len(t.templates),
        novel=len(found),
        note=_note(base, base_rows, total, t),
    )
    return d


def _note(base: StoredAttempt | None, base_rows: AttemptTemplates | None, total: int, t: Templates) -> str | None:
    notes = []
    if base is None and not total:
        notes.append(
            "no attempt of this job ended well in the warehouse, and no other attempt's templates are kept "
            f"from the {FLEET_DAYS} days before it: nothing to compare with"
        )
    elif base is None:
        notes.append("no attempt of this job ended well in the warehouse: new is rare in the fleet")
    if base_rows is not None and base_rows.templates_total > len(base_rows.rows):
        notes.append(
            f"the baseline keeps {len(base_rows.rows):,} of its {base_rows.templates_total:,} templates "
            "(the most frequent): a rarer one of it may show as new"
        )
    if t.lines_cap_hit:
        notes.append(f"line cap hit: {t.lines:,} lines read, the rest not")
    if t.templates_cap_hit:
        notes.append(f"template cap hit: {t.lines_over_template_cap:,} lines of later templates counted only")
    return "; ".join(notes) or None


def explained(d: Diagnosis) -> set[str]:
    """What the rules already explained, the root cause's lines and its cascade's: their templates
    (masked as templates_of masks them, with the attempt's hosts) and their `path:line`."""
    ids = {e for s in d.symptoms if s.role == Role.cascade for e in s.evidence}
    ids |= set(d.root_cause.evidence) if d.root_cause else set()
    lines = [e for e in d.evidence if e.id in ids]
    if not lines:
        return set()
    from workload_attribution.tasks.templates import mask_expression

    con = duckdb.connect(config=ONE_THREAD)  # a few lines: no worker thread started and stopped
    try:
        texts = [e.text for e in lines]
        masked = con.execute(
            f"SELECT {mask_expression('x', list(d.attempt.nodes))} FROM (SELECT unnest($t) AS x)", {"t": texts}
        ).fetchall()
    finally:
        con.close()
    return {m[0] for m in masked} | {e.ref for e in lines}
