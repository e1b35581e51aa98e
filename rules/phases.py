"""The pack's phases (engine.py says what each does) in order over one attempt's staging database:
the database prepared, extract, events renumbered, early, final (verdicts, the verdict chosen by
the pack's precedence, roles, actions), report."""

from __future__ import annotations

import json
from collections.abc import Callable
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

import duckdb

from workload_attribution.rules.held import Held
from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.pack_data import (
    DATA_DIR,
    attach_pack_tables,
    load_catalog_table,
    load_concepts_table,
    load_pack_data,
)
from workload_attribution.rules.runner import RunResult, run_rule
from workload_attribution.rules.sandbox import Snapshots, lock_down
from workload_attribution.rules.settings import Settings
from workload_attribution.staging.database import choose_threads, observed, search_also

ENGINE_SQL = Path(__file__).resolve().parent / "engine.sql"


@lru_cache(maxsize=1)
def engine_sql() -> str:
    return ENGINE_SQL.read_text()


def prepare(
    con: duckdb.DuckDBPyConnection,
    pack: Pack,
    settings: Settings,
    observations: int | None = None,
    staging: str | None = None,
) -> None:
    """The engine's tables and views, the settings, the pack's data and symptom definitions; the
    first time on a database, also its sandbox. `observations`: how many the attempt holds, when
    the caller has counted them (else counted here, for the threads the rules run on). `staging`:
    the attempt's staging database (its path), whose connections then find the pack's tables in
    their file (attach_pack_tables) rather than loaded into it."""
    con.execute(engine_sql())
    _write_settings(con, settings)
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
    if not (locked and locked[0]):  # the first time: the pack's data, then lock the database
        if not _pack_tables_attached(con, pack, staging):
            load_pack_data(con, Path(pack.path) / "data" if pack.path else DATA_DIR)
            load_catalog_table(con, pack)  # catalogs: the message catalogs' rows
            load_concepts_table(con, pack)  # concepts: the failure meanings' vocabularies
        _choose_threads(con, observed(con) if observations is None else observations)
        lock_down(con)
    _write_symptom_defs(con, pack)


def _pack_tables_attached(con: duckdb.DuckDBPyConnection, pack: Pack, staging: str | None) -> bool:
    """The pack's tables found through the search path of every connection to `staging`, from the
    file attach_pack_tables keeps; False where there is none (no staging path given: a replay's
    database lends tables in schemas of its own and names its own tables in full)."""
    if staging is None:
        return False
    schema = attach_pack_tables(con, pack)
    if schema is None:
        return False
    search_also(con, staging, schema)
    return True


def _write_settings(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    con.execute("DELETE FROM settings")
    con.execute(
        "INSERT INTO settings VALUES (?, ?, ?, ?)",
        [
            settings.skew_tolerance_s,
            settings.default_collective_timeout_s,
            settings.lookback_margin_s,
            settings.burst_window_s,
        ],
    )


def _choose_threads(con: duckdb.DuckDBPyConnection, observations: int) -> None:
    # An attempt whose observations fit in one row group (DuckDB's unit of parallel work) runs
    # its rules on one thread: a second has nothing to share and only adds the hand-over of
    # every pipeline (~15% of a tiny attempt's diagnosis), and what SQL leaves unordered (a
    # list(DISTINCT ...)) comes out the same at every run. A bigger attempt gets every core.
    choose_threads(con, observations)


_SYMPTOM_SHAPE = json.dumps(
    [
        {
            **dict.fromkeys(
                ("symptom", "rule_id", "title", "role", "terminal_state", "sub_domain", "action"), "VARCHAR"
            ),
            "interesting": "BOOLEAN",
            "blame": "VARCHAR",
            "failure_signal": "BOOLEAN",
        }
    ]
)


def _write_symptom_defs(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    defs = pack.symptom_defs
    con.execute("DELETE FROM symptom_defs")
    if not defs:
        return
    # one JSON document, parsed by DuckDB: lists of Python values cost a type probe each (~4 ms here)
    rows = [
        {
            "symptom": name,
            "rule_id": rule_id,
            "title": d.title,
            "role": d.role,
            "terminal_state": d.terminal_state and d.terminal_state.value,
            "sub_domain": d.sub_domain and d.sub_domain.value,
            "action": d.action and d.action.value,
            "interesting": d.interesting,
            "blame": d.blame,
            "failure_signal": d.failure_signal,
        }
        for name, (rule_id, d) in defs.items()
    ]
    con.execute(
        "INSERT INTO symptom_defs SELECT symptom, rule_id, title, role, terminal_state, sub_domain, action, "
        "interesting, blame, failure_signal FROM (SELECT unnest(from_json($p::JSON, $shape), recursive := true))",
        {"p": json.dumps(rows), "shape": _SYMPTOM_SHAPE},
    )


# Where a run may start: an archived attempt replayed from its state as it stood at one of these
# points (tasks/replay.py) runs only what comes after. "roles" is the final phase once its verdict
# is chosen: its roles, annotations and actions rules, then the report phase's.
RESUMABLE = ("extract", "early", "final", "roles")
Checkpoint = Callable[[str, duckdb.DuckDBPyConnection], None]


def resume_point(rule: Rule) -> str:
    """The last point a rule runs after: its phase, but "roles" for a final rule that gives no
    verdict and for a report rule (both run once the verdict is chosen)."""
    if rule.phase == "report" or (rule.phase == "final" and rule.output != "verdicts"):
        return "roles"
    return rule.phase


def run_phases(
    con: duckdb.DuckDBPyConnection,
    pack: Pack,
    settings: Settings | None = None,
    prepared: bool = False,
    start: str = "extract",
    checkpoint: Checkpoint | None = None,
) -> RunResult:
    """The phases from `start` (a point of RESUMABLE) on; `checkpoint(point, con)` is called at
    each point after extract (the state then is what a replay from that point starts with)."""
    settings = settings or Settings()
    result = RunResult(failed=list(pack.broken))
    if not prepared:
        prepare(con, pack, settings)
    snapshots = Snapshots()
    present = Present()
    held = Held(pack)

    def run(rules: list[Rule]) -> None:
        for rule in rules:
            # it would find nothing: none of what it requires is there (Rule.requires), or no line
            # holds one of its literals (rules/held.py)
            if not present.any_of(con, rule) or held.reads_nothing(con, rule):
                continue
            fired = len(result.fired)
            run_rule(con, pack, rule, settings, result, snapshots)
            if len(result.fired) > fired and present.changed_by(con, rule):
                present.forget()

    def begin(phase: str) -> bool:
        if RESUMABLE.index(phase) < RESUMABLE.index(start):
            return False
        if checkpoint is not None and phase != "extract":
            checkpoint(phase, con)
        return True

    try:
        if begin("extract"):
            run(pack.by_phase("extract"))
            snapshots.drop(con)
            drop_overridden(con, pack)  # catalogs: a specific reading of a line beats a generic one
            renumber_events(con)
            present.forget()
        if begin("early"):
            run(pack.by_phase("early"))
        final = pack.by_phase("final")
        if begin("final"):
            run([r for r in final if r.output == "verdicts"])
            choose_verdict(con, pack)
        begin("roles")
        run([r for r in final if r.output not in ("verdicts", "actions")])
        run([r for r in final if r.output == "actions"])
        run(pack.by_phase("report"))
    finally:  # what reads the views after the rules (the report, a test) reads them live
        snapshots.drop(con)
    return result


class Present:
    """The symptoms and role hints among the attempt's events, asked of the database when a rule
    with `requires:` is next (one statement) and forgotten when a rule may have changed the events:
    a tiny attempt has no XID, storage error or traceback for about ten of the pack's rules to read,
    and each skipped saves its planning (~1.5 ms) and what it would have held still."""

    def __init__(self) -> None:
        self.known: tuple[set[str], set[str]] | None = None

    def forget(self) -> None:
        self.known = None

    @staticmethod
    def changed_by(con: duckdb.DuckDBPyConnection, rule: Rule) -> bool:
        """Whether a rule that found something may have changed the symptoms or role hints there:
        new events do; annotations when they set a symptom or a role hint; verdicts, roles and
        actions never (a rule changes the events only through its output, rule_out)."""
        if rule.output == "events":
            return True
        return rule.output == "annotations" and bool({"symptom", "role_hint"} & set(con.table("rule_out").columns))

    def any_of(self, con: duckdb.DuckDBPyConnection, rule: Rule) -> bool:
        """Whether one of what the rule requires is there (True when it requires nothing). A
        `symptom:kind` entry asks for the symptom: any kind (more often true, never wrongly false)."""
        if not rule.requires:
            return True
        if self.known is None:  # a plain DISTINCT: lists of DISTINCT values cost twice its planning
            rows = con.execute("SELECT DISTINCT symptom, role_hint FROM events").fetchall()
            self.known = ({s for s, _ in rows if s is not None}, {h for _, h in rows if h is not None})
        symptoms, hints = self.known
        for entry in rule.requires:
            name, _, rest = entry.partition(":")
            if name == "role" and rest in hints:
                return True
            if name != "role" and any(fnmatchcase(s, name) for s in symptoms):
                return True
        return False


def drop_overridden(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    """An extract rule's `overrides:` — where it claims a line with a meaning (not a notice), the
    overridden rules' events on that line are dropped: the catalogs' reading of "RESOURCE_EXHAUSTED:
    Out of memory" is a GPU OOM, not python-exception's generic user-code exception."""
    extract = pack.by_phase("extract")
    yielding = [r.id for r in extract if r.yields]
    if yielding:
        _yield(con, yielding, [name for name, (_, d) in pack.symptom_defs.items() if d.generic])
    pairs = [(r.id, other) for r in extract for other in r.overrides]
    if not pairs:
        return
    con.execute(
        """
        DELETE FROM events WHERE event_id IN (
            SELECT e.event_id FROM events e
            JOIN (SELECT unnest($by) AS by_rule, unnest($over) AS over_rule) p ON p.over_rule = e.rule_id
            JOIN events o ON o.obs_id = e.obs_id AND o.rule_id = p.by_rule
            WHERE coalesce(o.role_hint, '') NOT IN ('context', 'benign', 'fact'))
        """,
        {"by": [a for a, _ in pairs], "over": [b for _, b in pairs]},
    )


def _yield(con: duckdb.DuckDBPyConnection, yielding: list[str], generic: list[str]) -> None:
    """A generic reading (a concept's: `yields`) gives way to any other rule's reading of the line
    but a reading of last resort (`generic`), a notice included (a row that calls "invoked
    oom-killer" a notice knows the line), except a notice whose match ends before the words it
    read: a wrapper ("Execution of replica 0 failed: Resource exhausted: Out of memory ...") embeds
    a message. Then where it stands, the reading of last resort of the line goes (the concept
    beats python-exception's user-code exception, not its CUDA OOM)."""
    con.execute(
        """
        DELETE FROM events WHERE event_id IN (
            SELECT e.event_id FROM events e JOIN events o ON o.obs_id = e.obs_id AND o.rule_id <> e.rule_id
            WHERE list_contains($yielding, e.rule_id) AND NOT list_contains($generic, o.symptom)
              AND NOT list_contains($yielding, o.rule_id)
              AND NOT coalesce(TRY_CAST(json_extract(o.attrs, '$.notice_end') AS INTEGER)
                               <= TRY_CAST(json_extract(e.attrs, '$.at') AS INTEGER), false))
        """,
        {"yielding": yielding, "generic": generic},
    )
    con.execute(
        """
        DELETE FROM events WHERE list_contains($generic, symptom) AND obs_id IN (
            SELECT obs_id FROM events WHERE list_contains($yielding, rule_id))
        """,
        {"yielding": yielding, "generic": generic},
    )


def choose_verdict(con: duckdb.DuckDBPyConnection, pack: Pack) -> None:
    """The verdict of the rule first in the pack's precedence (pack.yaml) among those that gave one;
    when none did, the pack's `no_verdict` (one statement: it is planned once either way)."""
    none = pack.no_verdict
    con.execute("DELETE FROM verdict")
    con.execute(
        """
        INSERT INTO verdict SELECT * EXCLUDE (place, last_resort) FROM (
            SELECT *, list_position($order, rule_id) AS place, false AS last_resort FROM verdicts
            UNION ALL BY NAME
            SELECT $terminal_state AS terminal_state, $sub_domain AS sub_domain, $confidence AS confidence,
                   []::VARCHAR[] AS blamed_nodes, $action AS action, $reason AS reason, true AS last_resort
        ) ORDER BY last_resort, place NULLS LAST LIMIT 1
    """,
        {
            "order": pack.precedence,
            "terminal_state": none.terminal_state.value,
            "sub_domain": none.sub_domain.value,
            "confidence": none.confidence.value,
            "action": none.action.value,
            "reason": none.reason,
        },
    )
    # a meaning read by a concept (rules/concepts.py), not a message a row or a rule knows, is
    # `medium` confidence at most, whichever rule made the verdict of it
    con.execute(
        """
        UPDATE verdict SET confidence = 'medium'
        WHERE confidence = 'high' AND root_event_id IN (
            SELECT event_id FROM events WHERE json_extract_string(attrs, '$.concept') IS NOT NULL)
        """
    )


def renumber_events(con: duckdb.DuckDBPyConnection) -> None:
    """Events numbered by what they are (time, observation, symptom), not by which rule found them
    first: a tie anywhere later falls the same way whatever the rules are called. The table made
    again in that order (its rows stored in id order, as statements that read it unordered saw
    them), in one statement where a copy, a DELETE, an INSERT and a DROP took four."""
    con.execute("""
        CREATE OR REPLACE TABLE events AS
        SELECT * REPLACE (row_number() OVER (ORDER BY time NULLS LAST, obs_id, symptom, node, component,
                                                      attrs::VARCHAR) AS event_id)
        FROM events
    """)
    n = con.execute("SELECT count(*) + 1 FROM events").fetchone()
    con.execute(f"CREATE OR REPLACE SEQUENCE event_seq START {n[0] if n else 1}")
