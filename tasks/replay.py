"""Archived attempts replayed under two rules packs, the shipped one and a candidate: no collection,
no writes (in-memory staging databases only), the verdict of each pack compared.

A replay does only the work the two packs can differ in (rules/diff.py):

- it starts at the last point where the packs still agree (rules/phases.py RESUMABLE: as a
  phase begins, or in the final phase once the verdict is chosen), from the state the archive kept
  there for the pack that diagnosed the attempt (used when that pack agrees with the shipped one up
  to there), else from the evidence;
- the rules that can decide differently are the differing rules and those standing on a differing
  table or Python module (rules/reads.py: a catalog row is judged by the catalog rule, a row of
  xid_catalog.csv by the two early rules reading it); the candidate's tables are lent to the
  shipped pack's database, in front of its own while a candidate's rule runs;
- those rules are screened stage by stage (screen_stages): an extract or verdicts rule's old and
  new versions run side by side on the state as its phase began (they do not see each other's
  output), early rules in turn as the shipped pack's early phase runs up to the last of them.
  The same output at every stage means the same diagnosis, and nothing more runs; where a stage
  differs, the candidate runs from there (each stage that agreed left the shipped pack's state);
- a change of the precedence (alone, or where the screened stages agreed) chooses again from the
  verdicts the archive kept, with the differing verdicts rules' own rows where they differed;
- the shipped pack's verdict is the archived one when the archive was made by the same pack with
  the same settings (the rules are deterministic); else it is replayed too.

Each pack has one staging database, prepared once and reused attempt after attempt (cleared,
loaded, run): a new database and its preparation cost more than most replays.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload_attribution.contracts.errors import first_line
from workload_attribution.rules import report
from workload_attribution.rules.diff import PackDiff, diff, prefix_digest
from workload_attribution.rules.engine import RunResult, Settings, choose_verdict, prepare, run_phases, run_rule
from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.pack_data import CATALOG_TABLE, load_lent_tables, table_of
from workload_attribution.rules.phases import RESUMABLE
from workload_attribution.rules.runner import rule_rows
from workload_attribution.rules.sandbox import Snapshots
from workload_attribution.staging.database import connect, new_staging_path, open_staging, release_staging
from workload_attribution.staging.snapshot import EVIDENCE_TABLES, load
from workload_attribution.tasks.steps import record_coverage
from workload_attribution.warehouse.archive import Manifest, Outcome, settings_dict

# What a replay clears between attempts: the evidence and what the rules made of it.
ATTEMPT_TABLES = (*EVIDENCE_TABLES, "raw_lines", "events", "verdicts", "verdict", "coverage")
LENT = "lent"  # the schema of a shipped pack's database that holds the candidate's differing tables


class PackDatabase:
    """A staging database prepared for one pack (its data, settings and symptom definitions),
    reused for attempt after attempt. It may also hold another pack's versions of some tables
    (`lent`: that pack and the tables), put in front of its own while that pack's rules run here."""

    def __init__(self, pack: Pack, settings: Settings, lent: tuple[Pack, list[str]] | None = None):
        self.pack, self.settings, self.lent = pack, settings, lent
        self.path = new_staging_path()
        open_staging(self.path)
        self.con = connect(self.path)
        self.con.execute("SET threads = 1")  # replays run side by side in processes, one core each
        if lent:  # before prepare() locks the database: it reads the other pack's files
            load_lent_tables(self.con, lent[0], LENT)
        prepare(self.con, pack, settings)
        name = self.con.execute("SELECT current_database()").fetchone()
        # its own tables by their full name: `main.<table>` would also name a temp view in front
        self.own = '"' + str(name[0] if name else "memory").replace('"', '""') + '".main'
        # the engine's views as the loaded events make them, for the differing rules compared
        # side by side (each would plan them anew): dropped before the events change
        self.snapshots = Snapshots()

    def close(self) -> None:
        self.con.close()
        release_staging(self.path)

    def load(self, manifest: Manifest, evidence: list[bytes], start: str) -> None:
        """Clear the last attempt; load this one's evidence and coverage, and its events as
        `start` began (from the archive) unless it starts at extract."""
        self.snapshots.drop(self.con)
        for table in ATTEMPT_TABLES:
            self.con.execute(f"DELETE FROM {table}")
        load(self.con, evidence)
        record_coverage(self.con, manifest.coverage)
        if start != "extract":
            kept = manifest.checkpoints[start]
            load(self.con, kept.events.encode().splitlines(), into="events")
            for table, text in kept.tables.items():
                load(self.con, text.encode().splitlines(), into=table)
        last = self.con.execute("SELECT coalesce(max(event_id), 0) + 1 FROM events").fetchone()
        self.con.execute(f"DROP SEQUENCE IF EXISTS event_seq; CREATE SEQUENCE event_seq START {last[0] if last else 1}")

    @contextmanager
    def tables_of(self, pack: Pack, catalog_rows: list[str] | None = None) -> Iterator[None]:
        """While `pack`'s rules run here: its own tables in front of this database's, when it lent
        some (temp comes first in DuckDB's search path); with `catalog_rows`, only those rows of
        its catalog."""
        lent = self.lent[1] if self.lent and pack is self.lent[0] else []
        views = {t: f"SELECT * FROM {LENT}.{t}" for t in lent}
        if catalog_rows is not None:
            ids = ", ".join("'" + i.replace("'", "''") + "'" for i in catalog_rows)
            rows = views.get(CATALOG_TABLE, f"SELECT * FROM {self.own}.{CATALOG_TABLE}")
            views[CATALOG_TABLE] = f"{rows} WHERE id IN ({ids})" if ids else f"{rows} WHERE false"
        if not views:
            yield
            return
        self.con.execute("; ".join(f"CREATE TEMP VIEW {t} AS {q}" for t, q in views.items()))
        try:
            yield
        finally:
            self.con.execute("; ".join(f"DROP VIEW IF EXISTS temp.main.{t}" for t in views))

    def diagnose(self, manifest: Manifest, start: str, pack: Pack | None = None) -> Outcome:
        """The phases of `pack` (this database's own, or one prepared alike but for the tables it
        lent) from `start` on, over what `load` left: the verdict."""
        pack = pack or self.pack
        self.snapshots.drop(self.con)
        with self.tables_of(pack):
            result = run_phases(self.con, pack, self.settings, prepared=True, start=start)
        d = report.build(self.con, manifest.attempt, manifest.coverage, result, pack.version, [])
        return Outcome.of(d)

    def output_of(self, rule: Rule | None, pack: Pack) -> list[tuple[Any, ...]]:
        """What one rule (of `pack`: its Python modules) adds over the loaded state, events or
        verdicts, removed again after."""
        if rule is None:
            return []
        table = "events" if rule.output == "events" else "verdicts"
        with self.tables_of(pack):
            run_rule(self.con, pack, rule, self.settings, RunResult(), self.snapshots)
        cols = "* EXCLUDE (event_id)" if table == "events" else "*"
        rows = self.con.execute(f"SELECT {cols} FROM {table} WHERE rule_id = ?", [rule.id]).fetchall()
        self.con.execute(f"DELETE FROM {table} WHERE rule_id = ?", [rule.id])
        return sorted(rows, key=repr)


@dataclass
class Replayed:
    old: Outcome | None = None
    new: Outcome | None = None
    how: str = ""  # what it took: alike, screened, replayed from <phase>
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.old is not None and self.new is not None and not self.old.decides_as(self.new)


class Replayer:
    """Replays attempts under the shipped pack and a candidate."""

    def __init__(self, shipped: Pack, candidate: Pack, settings: Settings):
        self.shipped, self.candidate, self.settings = shipped, candidate, settings
        self.diff: PackDiff = diff(shipped, candidate)
        self.affected = self.diff.affected  # the rules a screen compares
        self.given = settings_dict(settings)
        self.prefixes = {p: prefix_digest(shipped, p, self.given) for p in RESUMABLE[1:]}
        self.stages = screen_stages(self.diff, shipped, candidate)
        # the rules each stage compares: those of the affected whose phase it is
        self.stage_rules = {
            stage: [r for r in self.affected if self.diff.phases[r] == stage] for stage in self.stages or []
        }
        # Where the verdicts stage differs, the candidate runs where the screen ran, in the shipped
        # pack's database: the screen leaves it as loaded (the rows it added removed again),
        # and packs that share everything a database is prepared with (modules, definitions; the
        # candidate's differing tables are lent to it) would prepare the candidate's alike; one
        # load of the attempt saved.
        self.candidate_where_screened = not self.diff.loose
        tables = sorted({t for f in self.diff.stood_on if (t := table_of(f))})
        self.old_db = PackDatabase(shipped, settings, lent=(candidate, tables) if tables else None)
        self.new_db = PackDatabase(candidate, settings)
        self._new_at: str | None = None  # where the candidate's database has this attempt loaded
        # the rows each candidate's rule gave in this attempt's side-by-side screen, for the
        # candidate's run that follows where it differed (the rule need not run a third time)
        self._screened_rows: dict[str, list[tuple[Any, ...]]] = {}
        self.old_rules = {r.id: r for r in shipped.rules}
        self.new_rules = {r.id: r for r in candidate.rules}
        self.redefined = {r for r in self.affected if _definitions(shipped, r) != _definitions(candidate, r)}

    def close(self) -> None:
        self.old_db.close()
        self.new_db.close()

    def start_of(self, manifest: Manifest) -> str:
        """Where this attempt's replay starts: the last point (phases.RESUMABLE) up to which the
        packs agree and whose state the archive kept, for a pack that agrees with the shipped one
        up to there (an archive made before a point was kept starts at the one before)."""
        first = self.diff.first_point or "extract"
        for point in reversed(RESUMABLE[1 : RESUMABLE.index(first) + 1]):
            kept = manifest.checkpoints.get(point)
            if kept is not None and kept.prefix == self.prefixes[point]:
                return point
        return "extract"

    def replay(self, manifest: Manifest, evidence: bytes) -> Replayed:
        try:
            return self._replay(manifest, evidence.splitlines())
        except Exception as exc:  # one attempt that cannot be replayed never stops the others
            return Replayed(error=f"{type(exc).__name__}: {first_line(exc)[:300]}")

    def _replay(self, manifest: Manifest, lines: list[bytes]) -> Replayed:
        archived = manifest.outcome if self._archived_is_shipped(manifest) else None
        if self.diff.first_point is None:  # nothing that differs is read by any rule
            return Replayed(old=archived, new=archived, how="alike")
        if self.stages == ["choice"] and archived is not None:
            rechosen = self._choose_again(manifest, lines, archived)
            if rechosen is not None:
                return rechosen
        start = self.start_of(manifest)
        stages = self._stages_here(manifest, start, archived)
        self._new_at = None
        failed = None  # the stage whose rules differ on this attempt
        for stage in (
            s for s in stages if s != "choice"
        ):  # all earlier stages agreed: the state here is the shipped pack's
            self.old_db.load(manifest, lines, stage)
            if not self._outputs_agree(manifest, lines, stage):
                failed = start = stage
                break
        if stages and failed is None:
            if "choice" not in stages:
                return Replayed(old=archived, new=archived, how="screened")
            # the rules gave what the shipped pack's gave: the candidate's precedence chooses from it
            rechosen = self._choose_again(manifest, lines, archived) if archived is not None else None
            if rechosen is not None:
                return rechosen
        if failed is None and archived is None:  # the shipped pack's verdict is replayed too
            self.old_db.load(manifest, lines, start)
        if failed == "final" and archived is not None and self.candidate_where_screened:
            new = self._from_kept_verdicts(manifest) or self.old_db.diagnose(manifest, start, self.candidate)
        else:
            new = self._new(manifest, lines, start).diagnose(manifest, start)
        return Replayed(old=archived or self.old_db.diagnose(manifest, start), new=new, how=f"from {start}")

    def _stages_here(self, manifest: Manifest, start: str, archived: Outcome | None) -> list[str]:
        """The stages to screen this attempt by: the pack pair's (screen_stages), when the replay
        starts at the first of them and the archive kept the state where each later one begins
        (for choosing again, once the verdict was chosen). An early screen runs the shipped pack's
        rules on in its database, and a second stage needs the first's outcome known: neither when
        the shipped pack's verdict must be replayed too."""
        stages = self.stages or []
        screens = [s for s in stages if s != "choice"]
        if not screens or screens[0] != start:
            return []
        later = screens[1:] + (["roles"] if "choice" in stages else [])
        if not all(self._kept(manifest, point) for point in later):
            return []
        if archived is None and (len(stages) > 1 or start == "early"):
            return []
        return stages

    def _kept(self, manifest: Manifest, point: str) -> bool:
        kept = manifest.checkpoints.get(point)
        return kept is not None and kept.prefix == self.prefixes[point]

    def _choose_again(self, manifest: Manifest, lines: list[bytes], archived: Outcome) -> Replayed | None:
        """Only the precedence or the fallback verdict differs: the verdicts rules' rows as the
        archive kept them once the verdict was chosen, chosen from again by the candidate. The
        same verdict chosen: nothing after it differs. None when the archive kept no such state
        for a pack like the shipped one."""
        kept = manifest.checkpoints.get("roles")
        if kept is None or kept.prefix != self.prefixes["roles"] or "verdict" not in kept.tables:
            return None
        db = self.old_db
        db.load(manifest, lines, "roles")
        chosen = sorted(db.con.execute("SELECT * FROM verdict").fetchall(), key=repr)
        choose_verdict(db.con, self.candidate)
        if sorted(db.con.execute("SELECT * FROM verdict").fetchall(), key=repr) == chosen:
            return Replayed(old=archived, new=archived, how="screened")
        return Replayed(old=archived, new=db.diagnose(manifest, "roles", self.candidate), how="from roles")

    def _from_kept_verdicts(self, manifest: Manifest) -> Outcome | None:
        """After a verdicts screen that differs, the candidate's verdict without its other verdicts
        rules: they gave what the shipped pack's gave (they do not see each other's output), which
        the archive kept once the verdict was chosen. Those rows, the differing rules' own made
        anew (as the screen gave them, where it ran them), the verdict chosen, and the candidate's
        run goes on from there. None when the archive kept no such state for a pack like the
        shipped one."""
        kept = manifest.checkpoints.get("roles")
        if kept is None or kept.prefix != self.prefixes["roles"] or "verdicts" not in kept.tables:
            return None
        db, differing = self.old_db, self.stage_rules["final"]
        db.snapshots.drop(db.con)
        db.con.execute("DELETE FROM verdicts")
        load(db.con, kept.tables["verdicts"].encode().splitlines(), into="verdicts")
        db.con.execute("DELETE FROM verdicts WHERE rule_id IN (SELECT unnest($r))", {"r": differing})
        made = [row for r in differing for row in self._screened_rows.get(r, [])]
        if made:
            marks = ", ".join("?" * len(made[0]))
            db.con.executemany(f"INSERT INTO verdicts VALUES ({marks})", made)
        with db.tables_of(self.candidate):
            for rule in (self.new_rules[r] for r in differing if r in self.new_rules and r not in self._screened_rows):
                run_rule(db.con, self.candidate, rule, self.settings, RunResult(), db.snapshots)
        choose_verdict(db.con, self.candidate)
        return db.diagnose(manifest, "roles", self.candidate)

    def _new(self, manifest: Manifest, lines: list[bytes], start: str) -> PackDatabase:
        """The candidate's database, this attempt loaded in it."""
        if self._new_at != start:
            self.new_db.load(manifest, lines, start)
            self._new_at = start
        return self.new_db

    def _archived_is_shipped(self, manifest: Manifest) -> bool:
        return manifest.rules_version == self.shipped.version and manifest.settings == self.given

    def _outputs_agree(self, manifest: Manifest, lines: list[bytes], start: str) -> bool:
        """Old and new versions of each differing rule, on the same state, add the same rows."""
        if start == "early":
            return self._early_rules_agree()
        return self._side_by_side_agree(manifest, lines, start)

    def _early_rules_agree(self) -> bool:
        """Early rules read what the ones before them made: the shipped pack's early rules run in
        order, and before each differing one runs, its old and new versions give their rows on the
        state as it stands. The same rows at every differing rule leave the same state after the
        last one, hence the same verdict: nothing after it needs to run."""
        db, rules = self.old_db, self.shipped.by_phase("early")
        last = max(i for i, r in enumerate(rules) if r.id in self.affected)
        for rule in rules[:last]:
            if rule.id in self.affected and not self._same_rows(rule, self.new_rules[rule.id]):
                return False
            run_rule(db.con, self.shipped, rule, self.settings, RunResult(), db.snapshots)
        return self._same_rows(rules[last], self.new_rules[rules[last].id])

    def _same_rows(self, old: Rule, new: Rule) -> bool:
        """Whether two versions of a rule give the same rows on the shipped database's state. A
        version that fails is not judged here: the replay runs the candidate through (a failed rule
        is recorded and changes nothing, as in a diagnosis)."""
        db, settings = self.old_db, self.settings
        try:
            old_rows = rule_rows(db.con, self.shipped, old, settings)
            with db.tables_of(self.candidate):
                return old_rows == rule_rows(db.con, self.candidate, new, settings)
        except Exception:  # any failure: replayed in full instead
            return False

    def _side_by_side_agree(self, manifest: Manifest, lines: list[bytes], start: str) -> bool:
        """Extract rules, and verdicts rules, do not see each other's output: each differing rule's
        old and new versions run side by side on the state as the phase began. A new
        version whose symptoms mean the same as the old's runs beside it, in the shipped pack's
        database; else in the candidate's (its definitions)."""
        self._screened_rows = {}
        for rid in self.stage_rules[start]:
            if self._differing_rows_silent(rid):
                continue
            old, new = self.old_rules.get(rid), self.new_rules.get(rid)
            where = self.old_db if rid not in self.redefined else self._new(manifest, lines, start)
            rows = self._screened_rows[rid] = where.output_of(new, self.candidate)
            if self.old_db.output_of(old, self.shipped) != rows:
                return False
        return True

    def _differing_rows_silent(self, rule_id: str) -> bool:
        """Whether a catalog rule (unchanged itself, and its module) finds nothing with only the catalog rows that
        differ, in either pack: then no line matches a differing row, and it gives what it gave
        (diff.catalog_rows). Far cheaper than matching every row twice."""
        rows, rule = self.diff.catalog_rows, self.old_rules.get(rule_id)
        only_rows = all(why.startswith("catalogs/") for why in self.diff.reasons(rule_id))
        if rows is None or rule is None or not rule.catalog or not only_rows:
            return False
        db, settings = self.old_db, self.settings
        try:
            for pack in (self.shipped, self.candidate):
                with db.tables_of(pack, rows):
                    if rule_rows(db.con, pack, rule, settings):
                        return False
        except Exception:  # any failure: compared in full instead
            return False
        return True


def screen_stages(d: PackDiff, shipped: Pack, candidate: Pack) -> list[str] | None:
    """The stages, in the order a run reaches them, whose differing rules alone can show whether
    an attempt changes, or None. A stage is a phase's rules compared old against new on the
    state as it began: "extract" and "final" when their output is added beside their peers'
    (extract rules' events, verdicts rules' verdicts: neither phase's rules see each other's),
    "early" when the packs run the same early rules in the same order, compared in turn as the
    shipped pack's early phase runs up to the last of them (Replayer._early_rules_agree). Each
    stage that agrees leaves the next the shipped pack's state. "choice" last when the precedence
    or the fallback verdict differs: the verdicts rules' rows (the archive's where they agreed)
    chosen from again by the candidate (Replayer._choose_again); a new verdicts rule and its place
    in the precedence are screened so. A rule that reads a differing table counts as changed: its
    two versions are the same rule over the two tables. No stage when what differs may be read by
    any rule (a symptom's definition that rules other than its own name)."""
    choice = ["choice"] if d.choice else []
    if not d.affected and not d.loose:
        return choice or None
    if not d.affected or [f for f in d.loose if f != "symptom definitions"]:
        return None
    if d.loose and not _definitions_local(d, shipped, candidate):
        return None
    kinds: dict[str, set[str]] = {}
    for r in d.affected:
        kinds.setdefault(d.phases[r], set()).add(d.outputs[r])
    screenable = {
        "extract": kinds.get("extract") == {"events"},
        "early": "early" in kinds and not d.loose and _same_early_run(d, shipped, candidate),
        "final": kinds.get("final") == {"verdicts"},
    }
    if any(not screenable.get(phase, False) for phase in kinds):
        return None
    return [phase for phase in ("extract", "early", "final") if phase in kinds] + choice


def _same_early_run(d: PackDiff, shipped: Pack, candidate: Pack) -> bool:
    """Both packs run the same early rules in the same order, only some changed (a rule's rows
    compared are then its effect compared)."""
    order = [r.id for r in shipped.by_phase("early")]
    return order == [r.id for r in candidate.by_phase("early")]


def _definitions_local(d: PackDiff, shipped: Pack, candidate: Pack) -> bool:
    """Each symptom whose definition differs belongs to a differing rule, and no other rule (nor a
    Python module of the pack) names it: only the differing rules' rows can carry it."""
    a, b = shipped.symptom_defs, candidate.symptom_defs
    changed = {n for n in a.keys() | b.keys() if _definition(a, n) != _definition(b, n)}
    if any((a.get(n) or b[n])[0] not in d.affected or (b.get(n) or a[n])[0] not in d.affected for n in changed):
        return False
    others = [(p, r) for p in (shipped, candidate) for r in p.rules if r.id not in d.affected]
    return not any(_names(p, r, n) for p, r in others for n in changed)


def _names(pack: Pack, rule: Rule, symptom: str) -> bool:
    """Whether a rule's SQL, or its Python module, names the symptom as a string."""
    if rule.sql:
        return f"'{symptom}'" in rule.sql
    module = (rule.python or "").partition(":")[0]
    try:
        text = (Path(pack.path) / "python" / f"{module}.py").read_text()
    except OSError:
        return True  # cannot tell: it might
    return f"'{symptom}'" in text or f'"{symptom}"' in text


def _definitions(pack: Pack, rule_id: str) -> dict[str, Any]:
    """The symptoms a rule of the pack defines, as they mean."""
    return {n: d.model_dump(mode="json") for r in pack.rules if r.id == rule_id for n, d in r.symptoms.items()}


def _definition(defs: dict[str, Any], name: str) -> Any:
    found = defs.get(name)
    return None if found is None else (found[0], found[1].model_dump(mode="json"))
