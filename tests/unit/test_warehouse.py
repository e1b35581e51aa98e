"""Warehouse: idempotent per attempt, concurrent writer processes both land, locks wait then fail loudly."""

import os
import subprocess
import sys
import textwrap
import time
from unittest import mock

import duckdb
import pytest

from tests.conftest import ROOT, WORKED
from tests.helpers import diagnose
from tests.waiting import duckdb_held_by_another_process, wait_line, wait_until
from workload_attribution.contracts.vocabulary import Action
from workload_attribution.rules.pack import default_pack
from workload_attribution.warehouse.schema import migrations
from workload_attribution.warehouse.store import Warehouse, WarehouseLocked


@pytest.fixture(scope="module")
def diagnosis():
    return diagnose(WORKED, pack=default_pack())


def test_rediagnosing_replaces_never_duplicates(tmp_path, diagnosis):
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write(diagnosis)
    again = diagnosis.model_copy(update={"recommended_action": Action("reboot_node")})
    wh.write(again)
    with wh.connect(read_only=True) as con:
        assert con.execute(
            "SELECT count(*), any_value(recommended_action), any_value(rules_version) FROM diagnoses"
        ).fetchone() == (1, "reboot_node", diagnosis.rules.version)
        n_sym = con.execute("SELECT count(*) FROM diagnosis_symptoms").fetchone()[0]
        assert n_sym == len(diagnosis.symptoms)
        assert con.execute("SELECT list(node) FROM diagnosis_affected_nodes").fetchone()[0] == ["gb-r12-n04"]
        assert con.execute("SELECT count(*) FROM diagnosis_coverage").fetchone()[0] == len(diagnosis.coverage)
    stored = wh.get("eos", "slurm", "4191701", 0)
    assert stored["terminal_state"] == "hardware_failure" and stored["diagnosis_id"] == diagnosis.diagnosis_id


def _threads(con) -> int:
    return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


def test_a_file_is_written_on_one_thread_and_read_on_every_core(tmp_path, diagnosis):
    """staging/database.ONE_THREAD: a diagnosis's publishing never starts a DuckDB worker thread (stopping
    one flushed the allocator's caches: page faults at every diagnosis); an analyst's query has
    every core."""
    wh = Warehouse(tmp_path / "w.duckdb")
    with wh.session():
        wh.write(diagnosis)
        with wh.connect() as con:  # the session's connection
            assert _threads(con) == 1
    with wh.reader() as con:
        assert _threads(con) == (os.cpu_count() or 1)
        assert con.execute("SELECT count(*) FROM diagnoses").fetchone() == (1,)
    wh.write(diagnosis)  # a file a reader set to every core opens on one again: the same configuration
    with wh.connect() as con:
        assert _threads(con) == 1


def _logged(wh) -> int:
    """Bytes in the warehouse file's write-ahead log (0: none)."""
    wal = wh.path.with_name(wh.path.name + ".wal")
    return wal.stat().st_size if wal.exists() else 0


def _count_in_another_process(path) -> int:
    """What an analyst's own DuckDB (another process, read-only) finds in the file."""
    code = (
        "import duckdb, sys; "
        "print(duckdb.connect(sys.argv[1], read_only=True).sql('SELECT count(*) FROM diagnoses').fetchone()[0])"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    return int(done.stdout)


def _as(diagnosis, job: str):
    return diagnosis.model_copy(update={"attempt": diagnosis.attempt.model_copy(update={"job_id": job})})


def test_a_write_leaves_its_log_until_the_log_grows_and_every_reader_replays_it(tmp_path, diagnosis, monkeypatch):
    """backends.close_file: a process's first close of a file checkpoints it (a one-shot
    `diagnose` leaves it whole), later ones only once the write-ahead log passes WAL_KEPT_BYTES (a
    checkpoint at every close rewrote each touched table's newest row group); what was committed
    is read by every open meanwhile, another process's read-only one too; the nightly
    maintenance's checkpoint leaves no log."""
    from workload_attribution.warehouse import backends

    wh = Warehouse(tmp_path / "w.duckdb")
    with wh.session():
        wh.write(_as(diagnosis, "wal-1"))
    assert _logged(wh) == 0  # this process's first close checkpointed
    wh.write(_as(diagnosis, "wal-2"))
    kept = _logged(wh)
    assert kept > 0  # the next close left the log
    assert kept < backends.WAL_KEPT_BYTES
    assert _count_in_another_process(wh.path) == 2
    with wh.reader() as con:
        assert con.execute("SELECT list(job_id ORDER BY job_id) FROM diagnoses").fetchone()[0] == ["wal-1", "wal-2"]

    monkeypatch.setattr(backends, "WAL_KEPT_BYTES", kept)  # the next write takes the log past it
    wh.write(_as(diagnosis, "wal-3"))
    assert _logged(wh) == 0  # that close checkpointed
    assert _count_in_another_process(wh.path) == 3

    monkeypatch.setattr(backends, "WAL_KEPT_BYTES", 1 << 20)
    wh.write(_as(diagnosis, "wal-4"))
    assert _logged(wh) > 0
    assert wh.maintain()["checkpointed"] is True
    assert _logged(wh) == 0
    assert _count_in_another_process(wh.path) == 4


WRITES_THREE = """
import os, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.warehouse.store import Warehouse
d = Diagnosis.model_validate_json(Path({src!r}).read_text())
wh = Warehouse({wh!r})
for job in ("one", "two", "three"):
    wh.write(d.model_copy(update={{"attempt": d.attempt.model_copy(update={{"job_id": job}})}}))
print("log", wh.path.with_name(wh.path.name + ".wal").stat().st_size, flush=True)
if sys.argv[1] == "killed":
    os._exit(0)  # no exit handlers: as a worker killed between writes
"""


@pytest.mark.parametrize("ending", ["exits", "killed"])
def test_a_writer_that_exits_leaves_the_file_whole_and_a_killed_one_loses_nothing(tmp_path, diagnosis, ending):
    """A process that kept the log checkpoints it as it exits (a copy of the file alone then has
    every diagnosis); one killed first leaves the log, which the next open replays."""
    src, path = tmp_path / "d.json", tmp_path / "w.duckdb"
    src.write_text(diagnosis.to_json())
    script = tmp_path / "writer.py"
    script.write_text(WRITES_THREE.format(root=str(ROOT), src=str(src), wh=str(path)))
    done = subprocess.run([sys.executable, str(script), ending], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    logged = next(line for line in done.stdout.splitlines() if line.startswith("log "))
    assert int(logged.split()[1]) > 0  # it kept the log while it ran
    wal = path.with_name(path.name + ".wal")
    assert wal.exists() == (ending == "killed")
    assert _count_in_another_process(path) == 3


KEEPS_TAKING_IT = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from workload_attribution.warehouse.backends import writes_coming
from workload_attribution.warehouse.store import Warehouse
wh, stop = Warehouse({wh!r}), Path({stop!r})
with writes_coming(), ThreadPoolExecutor(1) as pool:  # the loop's maintenance on a thread of its own
    pool.submit(wh.maintain).result()
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while not stop.exists() and time.monotonic() < deadline:
        pool.submit(wh.maintain).result()  # the file taken back as soon as it is given up (or kept)
"""

WRITES_ONCE = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from workload_attribution.contracts.models import Diagnosis
from workload_attribution.warehouse.store import Warehouse
d = Diagnosis.model_validate_json(Path({src!r}).read_text())
started = time.monotonic()
waited = d.model_copy(update={{"attempt": d.attempt.model_copy(update={{"job_id": "waited"}})}})
Warehouse({wh!r}, lock_wait_s=20).write(waited)
print("wrote in", round(time.monotonic() - started, 2), flush=True)
"""


@pytest.mark.parametrize("hold", [0, 60], ids=["given-up-at-each-write", "held-between-writes"])
def test_a_process_that_keeps_taking_the_file_gives_a_waiting_writer_its_turn(tmp_path, diagnosis, hold):
    """DuckDB's file lock has no queue: a process that takes the file again as soon as it gives it up
    (a loop of writes or of maintenance) would keep a writer that retries with backoff out past its
    lock wait. Here the writer gets its turn while the other is still looping; also when the loop
    keeps the file between its writes (a worker, a backfill) for longer than the writer would wait:
    its next write finds the writer waiting and gives the file up."""
    src, path, stop = tmp_path / "d.json", tmp_path / "w.duckdb", tmp_path / "stop"
    src.write_text(diagnosis.to_json())
    Warehouse(path).write(diagnosis)
    looping = tmp_path / "looping.py"
    looping.write_text(KEEPS_TAKING_IT.format(root=str(ROOT), wh=str(path), stop=str(stop)))
    writer = tmp_path / "writer.py"
    writer.write_text(WRITES_ONCE.format(root=str(ROOT), src=str(src), wh=str(path)))
    env = {**os.environ, "ATTRIBUTION_WAREHOUSE_HOLD_S": str(hold)}
    loop = subprocess.Popen(
        [sys.executable, str(looping)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        wait_line(loop, "ready", 120)
        done = subprocess.run([sys.executable, str(writer)], capture_output=True, text=True, timeout=300)
        still_looping = loop.poll() is None
    finally:
        stop.touch()
        loop.wait(120)
    assert done.returncode == 0, done.stderr[-1500:]
    assert still_looping and loop.returncode == 0, loop.stderr.read()[-1500:]
    assert _count_in_another_process(path) == 2


def _held_here(path) -> bool:
    """Whether this process has the file attached: DuckDB refuses a second instance of it then."""
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.BinderException as exc:
        assert "already attached" in str(exc)
        return True
    return False


def test_a_process_writing_often_keeps_the_file_between_writes_and_gives_it_up_to_a_reader(
    tmp_path, diagnosis, monkeypatch
):
    """backends.writes_coming: while work that writes is in flight on another thread (a backfill's
    loop, the worker's other runs), the next write neither attaches the file again nor checks its
    schema again; a reader of this process has it at once (given up for it), as does anyone once
    the work is done. Alone (one run in flight, a script) a write gives it up at its end."""
    from concurrent.futures import ThreadPoolExecutor

    from workload_attribution.warehouse import backends, store

    attached, migrated = [], []
    real_attach, real_migrate = backends._Host._attach, store.migrate
    monkeypatch.setattr(backends._Host, "_attach", lambda host, *a: (attached.append(a), real_attach(host, *a))[1])
    monkeypatch.setattr(store, "migrate", lambda *a, **k: (migrated.append(a), real_migrate(*a, **k))[1])
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE_HOLD_S", "60")
    path = tmp_path / "w.duckdb"
    wh = Warehouse(path)
    with backends.writes_coming(), ThreadPoolExecutor(1) as pool:
        pool.submit(wh.write, _as(diagnosis, "first")).result()
        pool.submit(wh.write, _as(diagnosis, "second")).result()
        assert (len(attached), len(migrated)) == (1, 1)
        assert _held_here(path)
        assert wh.get("eos", "slurm", "second", 0)["attempt"]["job_id"] == "second"  # this process's reader
        assert not _held_here(path)
        pool.submit(wh.write, _as(diagnosis, "third")).result()
        assert (len(attached), len(migrated)) == (2, 2)
        assert _held_here(path)
    assert not _held_here(path)
    assert _count_in_another_process(path) == 3
    with backends.writes_coming():  # no other work in flight: given up at the write's end
        wh.write(_as(diagnosis, "fourth"))
        assert not _held_here(path)
    wh.write(_as(diagnosis, "fifth"))
    assert not _held_here(path) and len(attached) == 4


def test_a_file_held_between_writes_is_given_up_once_idle(tmp_path, diagnosis, monkeypatch):
    """Kept at most the hold's seconds after the last write, then given up with nobody asking, even
    while work that writes is still in flight: an analyst's own DuckDB opens it again."""
    from concurrent.futures import ThreadPoolExecutor

    from workload_attribution.warehouse import backends

    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE_HOLD_S", "3")
    path = tmp_path / "w.duckdb"
    with backends.writes_coming(), ThreadPoolExecutor(1) as pool:
        pool.submit(Warehouse(path).write, diagnosis).result()
        assert _held_here(path)
        wait_until(lambda: not _held_here(path), "the file given up once idle", 60)
        assert _count_in_another_process(path) == 1


def test_a_holding_process_lets_a_waiting_process_in_before_its_next_writer(tmp_path, diagnosis, monkeypatch):
    """A worker's writers overlap (four runs at once): the file is never idle, so none of its
    writers joins it while another process says it waits; the last one out gives it up and the
    next waits for the other process's turn."""
    import threading

    from workload_attribution.warehouse import backends

    src, path = tmp_path / "d.json", tmp_path / "w.duckdb"
    src.write_text(diagnosis.to_json())
    wh = Warehouse(path, lock_wait_s=60)
    wh.write(_as(diagnosis, "before"))
    writer = tmp_path / "writer.py"
    writer.write_text(WRITES_ONCE.format(root=str(ROOT), src=str(src), wh=str(path)))
    refused = threading.Event()
    real = backends._others_waiting

    def seen(p):
        found = real(p)
        if found and threading.current_thread().name == "next-writer":
            refused.set()
        return found

    monkeypatch.setattr(backends, "_others_waiting", seen)
    done: dict[str, float] = {}

    def next_writer():
        wh.write(_as(diagnosis, "next"))
        done["next"] = time.monotonic()

    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE_HOLD_S", "60")
    with backends.writes_coming():
        with wh.connect():  # one writer in the file
            other = subprocess.Popen(
                [sys.executable, str(writer)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            wait_until(lambda: list(tmp_path.glob("w.duckdb.waiting.*")), "the other process waiting", 120, gone=other)
            thread = threading.Thread(target=next_writer, name="next-writer")
            thread.start()
            wait_until(refused.is_set, "the next writer kept out", 60)
            assert "next" not in done
            closed = time.monotonic()
        _, err = other.communicate(timeout=120)
        thread.join(120)
    assert other.returncode == 0, err[-1500:]
    assert done["next"] > closed
    assert _count_in_another_process(path) == 3


def _opens_in_another_process(path) -> bool:
    """Whether another process can open the file (read-only) now: not while this one writes it."""
    code = "import duckdb, sys; duckdb.connect(sys.argv[1], read_only=True).close()"
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 or "lock" in done.stderr.lower(), done.stderr[-1500:]
    return done.returncode == 0


def test_writers_of_a_process_share_the_file_and_give_it_back_and_its_readers_wait_their_turn(tmp_path, diagnosis):
    """backends._Host: a writer has the file attached to the process's kept DuckDB; writers on
    other threads share it meanwhile, another process cannot open it, a reader of this process
    waits (two DuckDB instances of one file in a process would share, and drop, its one lock) and
    the writing thread's own reader is refused at once; the last writer's close gives it back."""
    import threading

    wh = Warehouse(tmp_path / "w.duckdb", lock_wait_s=60)
    wh.write(_as(diagnosis, "before"))
    assert _opens_in_another_process(wh.path)
    counted: list[int] = []
    with wh.connect() as held:
        other = threading.Thread(target=lambda: wh.write(_as(diagnosis, "beside")))
        other.start()
        other.join(timeout=120)
        assert not other.is_alive()  # another thread's writer shared the attachment
        started = time.monotonic()
        with pytest.raises(duckdb.ConnectionException, match="holds the file open"):
            with wh.reader():
                pass
        assert time.monotonic() - started < 5  # refused, not waited for
        reader = threading.Thread(target=lambda: counted.append(wh.rows("SELECT count(*) FROM diagnoses")[0][0]))
        reader.start()
        assert not _opens_in_another_process(wh.path)
        held.execute("INSERT INTO diagnoses SELECT * REPLACE ('held' AS job_id) FROM diagnoses WHERE job_id = 'before'")
        assert reader.is_alive() and not counted  # waiting for the writer
    reader.join(timeout=120)
    assert counted == [3]  # read once the writer was done, what it wrote included
    assert _opens_in_another_process(wh.path)


def test_a_newer_rules_pack_wins_over_an_older_one_whoever_writes_last(tmp_path, diagnosis):
    """warehouse/precedence.py: the pack's calendar version first, then when the diagnosis was made."""
    from datetime import timedelta

    from workload_attribution.warehouse.precedence import pack_rank, rank

    assert pack_rank("2026.12.1+78ecdca1d9") == (2026, 12, 1) < pack_rank("2026.12.10+0") < pack_rank("2027.1.1")
    assert pack_rank("dev") == () < pack_rank("0")
    t = diagnosis.created_at
    assert rank("2026.12.1+a", t) < rank("2026.12.1+a", t + timedelta(microseconds=1)) < rank("2026.12.2+b", t)

    def made(version: str, after_s: float, action: str):
        rules = diagnosis.rules.model_copy(update={"version": version})
        return diagnosis.model_copy(
            update={"rules": rules, "created_at": t + timedelta(seconds=after_s), "recommended_action": Action(action)}
        )

    wh = Warehouse(tmp_path / "w.duckdb")
    current = "SELECT count(*), any_value(rules_version), any_value(recommended_action) FROM diagnoses"
    assert wh.write(made("2026.12.1+a", 0, "reboot_node"))
    assert not wh.write(made("2026.11.9+z", 60, "drain_node"))  # an older pack, made later: kept out
    assert wh.query(current)[1] == [(1, "2026.12.1+a", "reboot_node")]
    assert not wh.write(made("2026.12.1+a", -5, "drain_node"))  # the same pack, made earlier
    assert wh.write(made("2026.12.1+a", 10, "drain_and_reset_gpu"))  # the same pack, made later: replaces
    assert wh.write(made("2027.1.1+b", -3600, "reboot_node"))  # a newer pack, however early
    assert wh.query(current)[1] == [(1, "2027.1.1+b", "reboot_node")]
    # every use of a rules version is recorded, kept or not: the same record in any write order
    assert [r[0] for r in wh.query("SELECT version FROM rules_versions ORDER BY first_used")[1]] == [
        "2027.1.1+b",
        "2026.12.1+a",
        "2026.11.9+z",
    ]


def test_schema_newer_than_the_code_is_refused(tmp_path, diagnosis):
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write(diagnosis)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("INSERT INTO schema_version (version) VALUES (999)")
    con.close()
    with pytest.raises(Exception, match="newer than this code"):
        wh.write(diagnosis)


def test_xid_symptoms_are_kept_by_code_and_a_warehouse_from_before_gets_them(tmp_path, diagnosis):
    """Schema v7: each diagnosis's XID symptoms again, by code (what xids_by_week reads), written and
    replaced with the diagnosis, and made from the symptoms a v6 warehouse already holds."""
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write(diagnosis)
    wh.write(diagnosis)  # replaced, not added
    xids = "SELECT xid, node, role, first_seen, count FROM diagnosis_xids ORDER BY ALL"
    from_symptoms = (
        "SELECT replace(symptom, 'xid_', '')::INTEGER, node, role, first_seen, count FROM diagnosis_symptoms "
        "WHERE symptom LIKE 'xid%' ORDER BY ALL"
    )
    written = wh.query(xids)[1]
    assert written and written == wh.query(from_symptoms)[1]
    con = duckdb.connect(str(tmp_path / "w.duckdb"))  # as a v6 warehouse: no table, no record of v7 or later
    con.execute("DELETE FROM schema_version WHERE version >= 7")
    con.execute("DROP TABLE diagnosis_xids")
    con.execute("DROP TABLE attempt_templates")
    con.close()
    other = diagnosis.attempt.model_copy(update={"job_id": "another"})
    wh.write(diagnosis.model_copy(update={"diagnosis_id": "another", "attempt": other}))  # an open migrates
    mine = xids.replace("ORDER BY", f"WHERE diagnosis_id = '{diagnosis.diagnosis_id}' ORDER BY")
    assert wh.query(mine)[1] == written  # made by the migration from the symptoms
    assert wh.query("SELECT count(*) FROM diagnosis_xids")[1] == [(2 * len(written),)]
    assert {r[1] for r in wh.query("xids_by_week")[1]} == {r[0] for r in written}


def _primary_keys(con, table: str) -> int:
    return con.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type = 'PRIMARY KEY'", [table]
    ).fetchone()[0]


def test_diagnoses_keep_their_key_without_an_index_and_a_warehouse_from_before_loses_only_that(tmp_path, diagnosis):
    """Schema v9: `diagnoses` has no PRIMARY KEY (its index made each checkpoint rewrite the table's
    last row group whole, every diagnosis' JSON in it); the writer keeps the key. A v8 warehouse's
    table is rebuilt: every row, column and NOT NULL kept, the index gone."""
    path = tmp_path / "w.duckdb"
    wh = Warehouse(path)
    wh.write(diagnosis)
    wh.write(diagnosis)  # the key kept by the writer: replaced, never added
    with wh.connect(read_only=True) as con:
        assert _primary_keys(con, "diagnoses") == 0
        assert con.execute("SELECT count(*) FROM diagnoses").fetchone() == (1,)
        columns = con.execute("DESCRIBE diagnoses").fetchall()
    con = duckdb.connect(str(path))  # as a v8 warehouse: the table as schema v1 made it, keyed
    v1 = (ROOT / "warehouse" / "schema" / "001_core.sql").read_text()
    table = v1[v1.index("CREATE TABLE IF NOT EXISTS diagnoses") : v1.index(");", v1.index("diagnoses (")) + 2]
    con.execute("CREATE TABLE v8 AS SELECT * FROM diagnoses; DROP TABLE diagnoses")
    con.execute(table)
    con.execute("INSERT INTO diagnoses SELECT * FROM v8; DROP TABLE v8; DELETE FROM schema_version WHERE version >= 9")
    assert _primary_keys(con, "diagnoses") == 1
    con.close()
    other = diagnosis.attempt.model_copy(update={"job_id": "another"})
    wh.write(diagnosis.model_copy(update={"diagnosis_id": "another", "attempt": other}))  # an open migrates
    with wh.connect(read_only=True) as con:
        assert _primary_keys(con, "diagnoses") == 0
        assert con.execute("DESCRIBE diagnoses").fetchall() == columns  # NOT NULL key columns included
        assert con.execute("SELECT job_id, diagnosis_id FROM diagnoses ORDER BY job_id").fetchall() == [
            (diagnosis.attempt.job_id, diagnosis.diagnosis_id),
            ("another", "another"),
        ]
        assert con.execute("SELECT max(version) FROM schema_version").fetchone() == (migrations()[-1][0],)
    assert wh.get("eos", "slurm", "4191701", 0)["diagnosis_id"] == diagnosis.diagnosis_id


def test_actions_lose_their_key_index_too_and_keep_every_row(tmp_path, diagnosis):
    """Schema v10: `actions` without its PRIMARY KEY (the same rewrite at each checkpoint as v9's),
    every row and column of a v9 file's table kept."""
    path = tmp_path / "w.duckdb"
    wh = Warehouse(path)
    wh.write(diagnosis)
    con = duckdb.connect(str(path))  # as a v9 warehouse: the table as schema v5 made it, keyed, with an action
    v5 = (ROOT / "warehouse" / "schema" / "005_actions.sql").read_text()
    con.execute("DROP TABLE actions")
    con.execute(v5[v5.index("CREATE TABLE") :])
    con.execute(
        "INSERT INTO actions (action_id, decided_at, seq, cluster, scheduler, job_id, attempt, diagnosis_id, "
        "rules_version, terminal_state, sub_domain, confidence, recommended_action, sink, operation, isolates, "
        "node, dry_run, outcome, details) VALUES ('a-1', now(), 0, 'eos', 'slurm', '4191701', 0, ?, 'v', "
        "'hardware_failure', 'nvlink', 'high', 'drain_node', 'slurm', 'drain', true, 'gb-r12-n04', true, "
        "'dry_run', '{\"reason\": \"x\"}')",
        [diagnosis.diagnosis_id],
    )
    columns = [r[:3] for r in con.execute("DESCRIBE actions").fetchall()]  # name, type, NOT NULL
    con.execute("DELETE FROM schema_version WHERE version >= 10")
    assert _primary_keys(con, "actions") == 1
    con.close()
    wh.write(diagnosis)  # an open migrates
    with wh.connect(read_only=True) as con:
        assert _primary_keys(con, "actions") == 0
        assert [r[:3] for r in con.execute("DESCRIBE actions").fetchall()] == columns
        assert con.execute("SELECT action_id, node, details->>'reason' FROM actions").fetchall() == [
            ("a-1", "gb-r12-n04", "x")
        ]
    assert [a.action_id for a in wh.actions()] == ["a-1"]


def test_a_schema_file_for_duckdb_files_only_is_recorded_on_a_lake_and_changes_nothing(tmp_path):
    """A lake never had the key v9 takes off a file: its version is recorded, nothing run."""
    from workload_attribution.warehouse import schema

    (path,) = [p for v, p in schema.migrations() if v == 9]
    assert path.read_text().startswith(schema.FILE_ONLY)
    con = duckdb.connect()
    con.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMPTZ DEFAULT now())")
    con.execute("CREATE TABLE diagnoses (cluster VARCHAR, n INTEGER)")
    schema._apply(con, 9, path, lake=True)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(9,)]
    assert con.execute("DESCRIBE diagnoses").fetchall()[1][0] == "n"  # not rebuilt


WRITER = textwrap.dedent("""
    import sys, json
    sys.path.insert(0, {root!r})
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.warehouse.store import Warehouse
    d = Diagnosis.model_validate_json(open({src!r}).read())
    d.attempt.job_id = sys.argv[1]
    d.diagnosis_id = "id-" + sys.argv[1]
    for _ in range(5):
        Warehouse({wh!r}, lock_wait_s=60).write(d)
    print("ok")
""")


def test_two_writer_processes_both_land(tmp_path, diagnosis):
    src = tmp_path / "d.json"
    src.write_text(diagnosis.to_json())
    wh = tmp_path / "w.duckdb"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT), src=str(src), wh=str(wh)))
    procs = [
        subprocess.Popen([sys.executable, str(script), job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for job in ("a", "b", "c")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    con = duckdb.connect(str(wh), read_only=True)
    assert con.execute("SELECT list(job_id ORDER BY job_id) FROM diagnoses").fetchone()[0] == ["a", "b", "c"]
    con.close()


STARTER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.warehouse.store import Warehouse
    d = Diagnosis.model_validate_json(open({src!r}).read())
    d.attempt.job_id = sys.argv[1]
    d.diagnosis_id = "id-" + sys.argv[1]
    print("ready", flush=True)
    while not os.path.exists({go!r}):
        time.sleep(0.002)
    Warehouse({wh!r}, lock_wait_s=60).write(d)
    print("ok")
""")


def test_six_workers_starting_on_one_new_warehouse_all_land(tmp_path, diagnosis):
    """Six processes released at once onto a warehouse file that does not exist yet: each write
    lands (the file appears whole: no process finds it empty, none is left waiting for headers
    nobody writes), and no temporary file is left beside it (the file's write-ahead log is DuckDB's
    own, kept until it grows: backends.close_file)."""
    src = tmp_path / "d.json"
    src.write_text(diagnosis.to_json())
    wh, go = tmp_path / "new" / "w.duckdb", tmp_path / "go"
    script = tmp_path / "starter.py"
    script.write_text(STARTER.format(root=str(ROOT), src=str(src), wh=str(wh), go=str(go)))
    jobs = [f"j{i}" for i in range(6)]
    procs = [
        subprocess.Popen([sys.executable, str(script), job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for job in jobs
    ]
    for p in procs:
        wait_line(p, "ready", 120)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err[-1500:] for _, err in outs]
    con = duckdb.connect(str(wh), read_only=True)
    assert con.execute("SELECT list(job_id ORDER BY job_id) FROM diagnoses").fetchone()[0] == jobs
    con.close()
    assert sorted(p.name for p in wh.parent.iterdir()) in (["w.duckdb"], ["w.duckdb", "w.duckdb.wal"])


def test_a_held_lock_makes_the_writer_wait_then_fail_loudly(tmp_path, diagnosis):
    wh = tmp_path / "w.duckdb"
    Warehouse(wh).write(diagnosis)
    with duckdb_held_by_another_process(wh):
        started = time.monotonic()
        with pytest.raises(WarehouseLocked, match="still locked"):
            Warehouse(wh, lock_wait_s=1.5).write(diagnosis)
        assert 1.4 < time.monotonic() - started < 10


def test_a_warehouse_another_writer_is_creating_is_waited_for(tmp_path, diagnosis):
    """Workers starting on one new warehouse at once: a file that exists without its headers yet
    (another process's first open under way) is waited for like a lock, then opened; one that
    never gets them fails loudly at the deadline; a file with content that is not DuckDB's is no
    such wait."""
    import threading

    made = tmp_path / "made.duckdb"
    Warehouse(made).write(diagnosis)
    wh = tmp_path / "w.duckdb"
    wh.touch()  # the creator has opened it and written nothing yet
    from workload_attribution.warehouse import backends

    tries = []
    real_execute = backends._HOST._execute

    def counting(sql):
        if sql.startswith("ATTACH"):
            tries.append(sql)
        return real_execute(sql)

    def creator_finishes():
        wait_until(lambda: len(tries) >= 2, "the writer to find the headerless file twice", timeout=30)
        made.replace(wh)

    finisher = threading.Thread(target=creator_finishes)
    with mock.patch.object(backends._HOST, "_execute", counting):
        finisher.start()
        written = Warehouse(wh, lock_wait_s=60).write(diagnosis)
        finisher.join()
    assert written and len(tries) >= 3
    assert Warehouse(wh).query("SELECT count(*) FROM diagnoses")[1] == [(1,)]

    stale = tmp_path / "stale.duckdb"
    stale.touch()
    with pytest.raises(WarehouseLocked, match="being created"):
        Warehouse(stale, lock_wait_s=0.5).write(diagnosis)
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database\n" * 2000)
    started = time.monotonic()
    with pytest.raises(Exception, match="not a (valid )?DuckDB"):
        Warehouse(garbage, lock_wait_s=30).write(diagnosis)
    assert time.monotonic() - started < 10


def test_a_warehouse_finished_while_it_was_being_read_is_read_again(tmp_path, diagnosis):
    """The race CI met: DuckDB read the creator's empty file, the creator linked its finished one into
    place, and only then was the path looked at again. The error describes the file that was; the
    writer tries the one that is, never calling a real warehouse "not a DuckDB database"."""
    made = tmp_path / "made.duckdb"
    Warehouse(made).write(diagnosis)
    wh = tmp_path / "w.duckdb"
    wh.touch()
    from workload_attribution.warehouse import backends

    real_execute = backends._HOST._execute
    tries = []

    def finished_mid_read(sql):
        if not sql.startswith("ATTACH"):
            return real_execute(sql)
        tries.append(sql)
        if len(tries) == 1:  # read the empty file; the finished one lands before the error is looked at
            made.replace(wh)
            raise duckdb.IOException(f'IO Error: The file "{wh}" exists, but it is not a valid DuckDB database file!')
        return real_execute(sql)

    with mock.patch.object(backends._HOST, "_execute", finished_mid_read):
        assert Warehouse(wh, lock_wait_s=5).write(diagnosis)
    assert len(tries) == 2
    assert Warehouse(wh).query("SELECT count(*) FROM diagnoses")[1] == [(1,)]


def test_which_lake_errors_a_writer_retries():
    """A lake write or maintenance step that lost a race is retried (the catalog's own serialization
    failure included, as DuckLake words it); anything else fails at once, never retried blindly."""
    import duckdb

    from workload_attribution.warehouse.store import _conflict

    raced = (
        duckdb.TransactionException("TransactionContext Error: Transaction conflict: cannot update a table"),
        duckdb.Error(
            "Failed to delete flushed inlined data in DuckLake from table ducklake_inlined_data_7_3: Failed to execute "
            'query "DELETE FROM ...": ERROR:  could not serialize access due to concurrent update'
        ),
        duckdb.Error("Failed to execute query: ERROR:  deadlock detected"),
    )
    assert all(_conflict(e) for e in raced)
    failed = (duckdb.IOException("IO Error: No space left on device"), duckdb.CatalogException("no table x"))
    assert not any(_conflict(e) for e in failed)


def test_a_maintenance_step_runs_again_when_the_object_store_was_busy():
    """A lake's maintenance step that an S3 server failed with a server error (500 InternalError,
    503 SlowDown: S3 asks the client to retry) is run again; a refusal (403, 404) is not."""
    from workload_attribution.warehouse.conflicts import is_store_busy

    put = "for HTTP PUT to 'http://127.0.0.1:8333/lake/main/diagnoses/ducklake-01.parquet'"
    assert is_store_busy(duckdb.HTTPException(f"HTTP Error: Request returned HTTP 500 {put}"))
    assert is_store_busy(duckdb.HTTPException(f"HTTP Error: Request returned HTTP 503 {put}"))
    assert not is_store_busy(duckdb.HTTPException(f"HTTP Error: Request returned HTTP 403 {put}"))
    assert not is_store_busy(duckdb.IOException("IO Error: No space left on device"))
