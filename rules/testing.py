"""Run the test cases that live beside each rule (`tests:` in the rule file).

Each case builds a fresh staging database from its lines / records / events / coverage, runs the
rule under test (log lines go through the real prefix and timestamp parser first), and checks
that every `expect` row matches some output row (`a.b` keys look inside JSON attrs) and, when
given, that the rule produced exactly `expect_count` rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

import duckdb

from workload_attribution.contracts.models import AttemptScope, Observation
from workload_attribution.rules.engine import RunResult, Settings, prepare, run_rule
from workload_attribution.rules.graph import produces
from workload_attribution.rules.pack import Pack, PackTest, Rule, RuleTest
from workload_attribution.rules.phases import Present
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connected, release_staging, rows, scalar
from workload_attribution.staging.lines import Line, Stream, stage_streams
from workload_attribution.staging.normalize import normalize
from workload_attribution.staging.observations import insert_observations

DEFAULT_ATTEMPT = {
    "cluster": "test",
    "scheduler": "slurm",
    "job_id": "1",
    "attempt": 0,
    "start": "2026-01-01T00:00:00Z",
    "end": "2026-12-31T00:00:00Z",
    "state": "FAILED",
}


@dataclass
class CaseResult:
    rule: str
    case: str
    ok: bool
    message: str = ""
    verdict: str = ""  # a pack case: the verdicts rule whose verdict the diagnosis took (rules coverage)


def _scope(case: RuleTest | PackTest) -> AttemptScope:
    seen = case.lines + case.records + (case.events if isinstance(case, RuleTest) else [])
    nodes = sorted({x["node"] for x in seen if x.get("node")}) or ["n1"]
    return AttemptScope.model_validate({**DEFAULT_ATTEMPT, "nodes": nodes, **case.attempt})


def _load(
    con: duckdb.DuckDBPyConnection,
    case: RuleTest | PackTest,
    scope: AttemptScope,
    keep: Callable[[str, str], bool] | None = None,
) -> None:
    """Stage a case's lines (only those `keep(source, text)` lets through: what the scan would
    keep), records, samples, coverage and events."""
    _load_lines(con, case, scope, keep)
    if case.records:
        insert_observations(
            con,
            [
                Observation(
                    connector="test", kind=r.get("kind", "record"), **{k: v for k, v in r.items() if k != "kind"}
                )
                for r in case.records
            ],
        )
    for m in case.samples:
        labels = {k: str(v) for k, v in (m.get("labels") or {}).items()}
        con.execute(
            "INSERT INTO samples VALUES (nextval('obs_seq'), 'metrics', 'test', ?, ?, map(?::VARCHAR[], ?::VARCHAR[]), "
            "?, ?, ?::TIMESTAMP, 'metrics/test.prom', NULL, NULL)",
            [
                m.get("node"),
                m["metric"],
                list(labels),
                list(labels.values()),
                m.get("series", m["metric"]),
                m["value"],
                m["time"],
            ],
        )
    for c in case.coverage:
        con.execute(
            "INSERT INTO coverage VALUES (?, 'test', ?, 0, ?, 0, NULL)", [c["source"], c["status"], c.get("nodes", [])]
        )
    if isinstance(case, RuleTest):
        _load_events(con, case.events)


def _load_lines(
    con: duckdb.DuckDBPyConnection,
    case: RuleTest | PackTest,
    scope: AttemptScope,
    keep: Callable[[str, str], bool] | None,
) -> None:
    """A case's lines staged as files (one per source and node) and normalised as collected ones are."""
    by_file: dict[tuple[str, str | None], list[str]] = {}
    for x in case.lines:
        by_file.setdefault((x["source"], x.get("node")), [])
        if keep is None or keep(x["source"], x["text"]):
            by_file[(x["source"], x.get("node"))].append(x["text"])
    stage_streams(
        con,
        [
            Stream(
                source, "test", node, f"logs/{source}/{node or 'ctl'}.log", [Line(t, i) for i, t in enumerate(texts, 1)]
            )
            for (source, node), texts in by_file.items()
        ],
    )
    if case.lines:
        normalize(con, scope.timezone, scope.start.replace(tzinfo=None), {})


def _load_events(con: duckdb.DuckDBPyConnection, events: list[dict[str, Any]]) -> None:
    """Events a later phase's rule starts from, numbered from 1; new events are numbered after them."""
    for i, e in enumerate(events, 1):
        cols = {"event_id": i, "rule_id": "test", **e}
        if "attrs" in cols:
            cols["attrs"] = json.dumps(cols["attrs"])
        names = ", ".join(cols)
        con.execute(f"INSERT INTO events ({names}) VALUES ({', '.join('?' for _ in cols)})", list(cols.values()))
    if events:
        con.execute(f"DROP SEQUENCE event_seq; CREATE SEQUENCE event_seq START {len(events) + 1}")


def _lookup(row: dict[str, Any], key: str) -> Any:
    head, _, rest = key.partition(".")
    value = row.get(head)
    if rest:
        if isinstance(value, str):
            value = json.loads(value)
        for part in rest.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    return value


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, list):
        return isinstance(actual, list) and [str(a) for a in actual] == [str(e) for e in expected]
    if isinstance(actual, datetime):
        return str(actual) == str(expected) or actual.isoformat() == str(expected)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return bool(actual) == bool(expected) and actual is not None
    return str(actual) == str(expected)


def run_case(pack: Pack, rule: Rule, case: RuleTest, settings: Settings | None = None) -> CaseResult:
    settings = settings or Settings()
    scope = _scope(case)
    staging = create_staging(scope)
    try:
        with connected(staging) as con:
            return _run_case(con, pack, rule, case, scope, settings)
    finally:
        release_staging(staging)


def _run_case(  # noqa: C901 (one case's setups: events or lines, the scan, each phase's input; said in order)
    con: duckdb.DuckDBPyConnection, pack: Pack, rule: Rule, case: RuleTest, scope: AttemptScope, settings: Settings
) -> CaseResult:
    prepare(con, pack, settings)

    # the rule sees what the scan keeps: lines with one of its literals (a wrong prefilter fails here)
    # (a rule reading the catalogs keeps lines by their rows' literals)
    def keep(source: str, text: str) -> bool:
        return any(lit in text for lit in pack.rule_literals(rule, source))

    _load(con, case, scope, keep=keep if rule.phase == "extract" and (rule.prefilter or rule.catalog) else None)
    result = RunResult()
    before = scalar(con, "SELECT coalesce(max(event_id), 0) FROM events")
    if rule.output == "roles":
        con.execute(
            "INSERT INTO verdict (rule_id, terminal_state, sub_domain, root_event_id) VALUES ('test', 'unknown', "
            "'insufficient_evidence', ?)",
            [case.verdict_root or 1],
        )
    if rule.output == "actions":
        v = {"terminal_state": "unknown", "sub_domain": "insufficient_evidence", **case.verdict}
        cols = ", ".join(v)
        con.execute(
            f"INSERT INTO verdict (rule_id, {cols}) VALUES ('test', {', '.join('?' for _ in v)})", list(v.values())
        )
    # what the rule requires absent, the engine skips it: it must then find nothing (Rule.requires)
    skipped = not Present().any_of(con, rule)
    run_rule(con, pack, rule, settings, result)
    if result.failed:
        return CaseResult(rule.id, case.name, False, f"rule failed: {result.failed[0]['error']}")
    if skipped and result.fired:
        return CaseResult(
            rule.id, case.name, False, f"found something with none of what it requires {rule.requires} among the events"
        )
    if rule.output == "events":
        out = rows(con, f"SELECT * FROM events WHERE event_id > {before} ORDER BY event_id")
        declared = produces(pack, rule)
        undeclared = sorted(s for s in {r["symptom"] for r in out} if not any(fnmatchcase(s, d) for d in declared))
        if undeclared:
            return CaseResult(rule.id, case.name, False, f"emits {undeclared}, which its produces: does not declare")
    elif rule.output == "verdicts":
        out = rows(con, "SELECT * FROM verdicts")
    elif rule.output == "actions":
        out = (
            rows(con, "SELECT * FROM rule_out")
            if scalar(con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'rule_out'")
            else []
        )
    elif rule.output == "roles":
        out = rows(con, "SELECT * FROM events WHERE role IS NOT NULL ORDER BY event_id")
    else:
        out = rows(con, "SELECT * FROM events ORDER BY event_id")
    for exp in case.expect:
        if not any(all(_same(_lookup(row, k), v) for k, v in exp.items()) for row in out):
            shown = [{k: _lookup(r, k) for k in exp} for r in out][:5]
            return CaseResult(rule.id, case.name, False, f"expected {exp}, got {shown or 'no rows'}")
    if case.expect_count is not None and len(out) != case.expect_count:
        return CaseResult(rule.id, case.name, False, f"expected {case.expect_count} row(s), got {len(out)}")
    return CaseResult(rule.id, case.name, True)


def run_pack_case(pack: Pack, case: PackTest, settings: Settings | None = None) -> CaseResult:
    """The whole pack on a case's raw lines, kept by the pack's pre-filter as a scan would keep them."""
    from workload_attribution.contracts.models import Coverage
    from workload_attribution.rules import report
    from workload_attribution.rules.engine import run_phases

    settings = settings or Settings()
    scope = _scope(case)
    staging = create_staging(scope)
    literals = {s: pack.prefilter(s) for s in {x["source"] for x in case.lines}}
    try:
        with connected(staging) as con:
            prepare(con, pack, settings)
            _load(con, case, scope, keep=lambda source, text: any(lit in text for lit in literals[source]))
            statuses = {s: "ok" for s in literals} | {c["source"]: c["status"] for c in case.coverage}
            coverage = [Coverage(source=s, connector="test", status=st) for s, st in sorted(statuses.items())]
            con.execute("DELETE FROM coverage")
            for c in coverage:
                con.execute(
                    "INSERT INTO coverage VALUES (?, 'test', ?, 0, ?, 0, NULL)",
                    [c.source, c.status.value, scope.nodes if c.status.value == "ok" else []],
                )
            result = run_phases(con, pack, settings, prepared=True)
            chosen = con.execute("SELECT rule_id FROM verdict").fetchone()
            d = report.build(con, scope, coverage, result, pack.version, [])
    finally:
        release_staging(staging)
    got = {
        "terminal_state": d.terminal_state.value,
        "sub_domain": d.sub_domain.value,
        "affected_nodes": d.affected_nodes,
        "root_symptom": d.root_cause.symptom if d.root_cause else None,
        "recommended_action": d.recommended_action.value,
        "confidence": d.confidence.value,
    }
    wrong = {k: (v, got.get(k)) for k, v in case.expect.items() if k not in got or _norm(got[k]) != _norm(v)}
    if wrong:
        why = "; ".join(f"{k}: expected {e!r}, got {g!r}" for k, (e, g) in wrong.items())
        return CaseResult("pack", case.name, False, why, verdict=chosen[0] if chosen else "")
    return CaseResult("pack", case.name, True, verdict=chosen[0] if chosen else "")


def _norm(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value


def run_catalog_cases(pack: Pack) -> list[CaseResult]:
    """Each catalog row's test line, through the prefix grammar and the rules reading the
    catalogs: it must give the row's symptom (a failing row is a case of its own)."""
    from workload_attribution.rules.claims import Probe, claims

    readers = [r for r in pack.rules if r.catalog]
    if not readers or not pack.catalog:
        return []
    probes = [Probe(row.sources[0], row.test_line) for row in pack.catalog]
    got = claims(pack, probes, readers)
    out = [CaseResult(f["rule"], "catalog", False, f"rule failed: {f['error']}") for f in got.failed]
    for row, events in zip(pack.catalog, got.events, strict=True):
        if not any(e["symptom"] == row.symptom for e in events):
            seen = sorted({e["symptom"] for e in events}) or "nothing"
            out.append(CaseResult("catalog", row.id, False, f"its test_line gives {seen}, not {row.symptom}"))
    if not out:
        out.append(CaseResult("catalog", f"{len(pack.catalog)} rows' test lines", True))
    return out


def run_concept_cases(pack: Pack) -> list[CaseResult]:
    """Each concept's examples, through the prefix grammar and the rules reading the concepts alone:
    each must give the concept; none of its look-alikes may (a failing line is a case of its own)."""
    from workload_attribution.rules.claims import Probe, claims

    readers = [r for r in pack.rules if r.concepts]
    if not readers or not pack.concepts:
        return []
    cases = [(c, ex, True) for c in pack.concepts for ex in c.examples]
    cases += [(c, ex, False) for c in pack.concepts for ex in c.looks_alike]
    # a record's reason text is tried as a Kubernetes record (the records a probe can be)
    probes = [Probe("kueue" if ex.source == "records" else ex.source, ex.line) for _, ex, _ in cases]
    got = claims(pack, probes, readers)
    out = [CaseResult(f["rule"], "concepts", False, f"rule failed: {f['error']}") for f in got.failed]
    for (c, ex, should), events in zip(cases, got.events, strict=True):
        said = sorted({str(e["attrs"].get("concept")) for e in events})
        if (c.id in said) != should:
            why = f"gives {said or 'nothing'}" if should else f"looks like {c.id} but lands in it"
            out.append(CaseResult("concepts", c.id, False, f"{why}: {ex.line[:100]}"))
    if not out:
        out.append(CaseResult("concepts", f"{len(pack.concepts)} concepts' {len(cases)} lines", True))
    return out


def run_tests(pack: Pack, only: str | None = None) -> list[CaseResult]:
    """Every rule's own test cases, then each catalog row's test line, each concept's examples and
    look-alikes, then the pack's (`only` a rule id: that rule's; "catalog": the rows'; "concepts":
    the concepts'; "pack": the pack's)."""
    results = []
    for rule in pack.rules:
        if only and rule.id != only:
            continue
        for case in rule.tests:
            try:
                results.append(run_case(pack, rule, case))
            except Exception as exc:
                results.append(CaseResult(rule.id, case.name, False, f"{type(exc).__name__}: {exc}"))
    if only in (None, "catalog"):
        results += run_catalog_cases(pack)
    if only in (None, "concepts"):
        results += run_concept_cases(pack)
    if only in (None, "pack"):
        for pcase in pack.tests:
            try:
                results.append(run_pack_case(pack, pcase))
            except Exception as exc:
                results.append(CaseResult("pack", pcase.name, False, f"{type(exc).__name__}: {exc}"))
    return results
