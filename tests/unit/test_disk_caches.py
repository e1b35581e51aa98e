"""What a new process takes from disk instead of building again: the pack's data tables (kept in the
user's cache, rules/pack_data.py) and the compiled Hyperscan databases (staging/prefilter.py).
Each gives what building gives; a changed source is another entry; an entry that cannot be read is
built again; no place to write leaves nothing kept and the answer the same; two processes at once
each read a whole entry or build their own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from workload_attribution.rules import pack_data
from workload_attribution.staging import prefilter


def _tables(data: Path) -> dict[str, tuple[list, list]]:
    """The pack's data tables as an attempt gets them: (columns with types, rows)."""
    con = duckdb.connect()
    try:
        pack_data.load_pack_data(con, data)
        return {
            t: (con.execute(f"DESCRIBE {t}").fetchall(), con.execute(f"SELECT * FROM {t}").fetchall())
            for t, _ in pack_data.PACK_DATA
        }
    finally:
        con.close()


def _read_csv(data: Path) -> dict[str, tuple[list, list]]:
    """The same tables read with read_csv, no cache anywhere."""
    con = duckdb.connect()
    try:
        out = {}
        for t, all_varchar in pack_data.PACK_DATA:
            con.execute(
                f"CREATE TABLE {t} AS SELECT * FROM read_csv('{data / (t + '.csv')}', header=true, "
                f"all_varchar={str(all_varchar).lower()})"
            )
            out[t] = (con.execute(f"DESCRIBE {t}").fetchall(), con.execute(f"SELECT * FROM {t}").fetchall())
        return out
    finally:
        con.close()


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped pack's data, this test's user cache directory, an empty process cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = tmp_path / "pack" / "data"
    shutil.copytree(pack_data.DATA_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})
    return copy


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []


def _kept(data: Path) -> Path:
    """Where the pack's entries are kept: the user's cache (this test's), never the pack's folder."""
    folder = pack_data._disk_dirs(data / "xid_catalog.csv")[0]
    assert folder.is_relative_to(data.parent.parent / "cache")
    return folder


def test_the_data_tables_are_kept_in_the_user_cache_and_read_back(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _read_csv(data)
    assert _tables(data) == expected  # built (read_csv, the round trip checked), then kept
    kept = _entries(_kept(data))
    assert len(kept) == 3 and all(n.endswith(".json") and not n.startswith(".") for n in kept)
    assert not (data / "__pycache__").exists()  # the pack's folder (an installed package's) untouched

    # a new process: nothing in its own cache; what is on disk is loaded, the CSV never read
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})

    def never(*_a: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(pack_data, "_as_json", never)
    assert _tables(data) == expected
    # ... and an entry that cannot be read is built again, and rewritten
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(data.parent.parent / "cache"))  # undone with the rest
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})
    broken = next(_kept(data).glob("xid_catalog-*.json"))
    broken.write_text("{not json")
    assert _tables(data) == expected
    assert json.loads(broken.read_text())["format"] == pack_data._DISK_FORMAT


def test_a_changed_data_file_is_another_entry(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tables(data)
    before = _entries(_kept(data))
    csv = data / "evidence_sources.csv"
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-1]))  # a row fewer: another version of the file
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})  # a new process
    tables = _tables(data)
    assert tables == _read_csv(data)
    assert len(tables["evidence_sources"][1]) == len(lines) - 2  # the header and the row gone
    after = _entries(_kept(data))
    assert len(after) == 3 and set(after) != set(before)  # the old entry replaced, not kept beside it
    assert {n for n in after if not n.startswith("evidence_sources-")} == {
        n for n in before if not n.startswith("evidence_sources-")
    }


def test_with_no_user_cache_the_tables_are_kept_nowhere_and_the_same(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _read_csv(data)
    monkeypatch.setenv("XDG_CACHE_HOME", str(data / "xid_catalog.csv"))  # a file, not a folder
    assert _tables(data) == expected
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})  # a new process: built again, the same tables
    assert _tables(data) == expected
    assert not (data / "__pycache__").exists()  # nor beside the pack


_LOAD = """
import sys
from pathlib import Path
import duckdb
from workload_attribution.rules import pack_data
con = duckdb.connect()
pack_data.load_pack_data(con, Path(sys.argv[1]))
print(con.execute("SELECT (SELECT count(*) FROM xid_catalog), (SELECT count(*) FROM nvlink5_decode), "
                  "(SELECT count(*) FROM evidence_sources)").fetchone())
"""


def test_processes_starting_at_once_each_read_a_whole_entry(data: Path) -> None:
    expected = _read_csv(data)
    counts = str(tuple(len(expected[t][1]) for t, _ in pack_data.PACK_DATA))
    for _ in range(2):  # with nothing kept, then with every entry there
        procs = [
            subprocess.Popen([sys.executable, "-c", _LOAD, str(data)], stdout=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=120)[0].strip() for p in procs]
        assert all(p.returncode == 0 for p in procs) and outs == [counts] * 4
        kept = _entries(_kept(data))
        assert len(kept) == 3 and not [n for n in kept if n.startswith(".")]  # no temporary file left
        for n in kept:
            assert json.loads((_kept(data) / n).read_text())["format"] == pack_data._DISK_FORMAT
    assert _tables(data) == expected


# -- Hyperscan's compiled databases ------------------------------------------------------------

hs = pytest.importorskip("hyperscan") if prefilter.engine() == "hyperscan" else None
needs_hyperscan = pytest.mark.skipif(hs is None, reason="the hyperscan wheel is not installed here")

LITERALS = ("NVRM: Xid", "CUDA error", "Out of memory", "ECC")
TEXT = "ok\nNVRM: Xid (PCI:0000:1b:00): 79\nfine\nRuntimeError: CUDA error: out of memory\nECC page retired\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "workload-attribution" / "hyperscan"


@needs_hyperscan
def test_a_compiled_database_is_kept_and_loaded(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = prefilter.LineMatcher(LITERALS, ("MARK",))
    assert len(_entries(cache)) == 1
    prefilter._platform(prefilter._hyperscan())  # worked out once per process, before compiling is refused

    def never(*_a: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(prefilter, "_compile", never)
    loaded = prefilter.LineMatcher(LITERALS, ("MARK",))
    assert (
        loaded.scan(TEXT)
        == built.scan(TEXT)
        == (
            [
                (1, "NVRM: Xid (PCI:0000:1b:00): 79"),
                (3, "RuntimeError: CUDA error: out of memory"),
                (4, "ECC page retired"),
            ],
            False,
        )
    )
    assert loaded.scan("MARK\n")[1] and not loaded.scan("MARK\n")[0]
    with pytest.raises(AssertionError):  # other literals (or another order of the ids): another entry
        prefilter.LineMatcher(LITERALS[:-1])


@needs_hyperscan
def test_a_broken_or_unwritable_cache_compiles_the_same_database(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = prefilter.LineMatcher(LITERALS).lines(TEXT)
    [entry] = cache.glob("*.hsdb")
    entry.write_bytes(b"not a database")
    assert prefilter.LineMatcher(LITERALS).lines(TEXT) == expected  # compiled again, and kept
    assert entry.read_bytes() != b"not a database"
    assert prefilter.LineMatcher(LITERALS).lines(TEXT) == expected
    monkeypatch.setenv("XDG_CACHE_HOME", str(entry))  # a file: no cache directory can be made under it
    assert prefilter.LineMatcher(LITERALS).lines(TEXT) == expected
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary file left


@needs_hyperscan
def test_a_database_of_patterns_is_kept_apart_from_one_of_the_same_literals(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The concepts' patterns (prefilter.PatternMatcher) are kept as the literals are, under a key
    that tells a pattern from the literal of the same text."""
    patterns = (r"(?i:out[\s_]*of[\s_]*memory)|ECC", "CUDA error")
    built = prefilter.PatternMatcher(patterns)
    assert len(_entries(cache)) == 1
    prefilter.PatternMatcher(("CUDA error",))
    prefilter.LineMatcher(("CUDA error",))  # the same text as a literal: its own entry
    assert len(_entries(cache)) == 3
    prefilter._platform(prefilter._hyperscan())

    def never(*_a: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(prefilter, "_compile", never)
    loaded = prefilter.PatternMatcher(patterns)
    lines = TEXT.splitlines() + ["OUT_OF MEMORY"]
    assert [loaded.matching(line) for line in lines] == [built.matching(line) for line in lines]
    assert [built.matching(line) for line in lines] == [set(), set(), set(), {0, 1}, {0}, {0}]


@needs_hyperscan
def test_the_patterns_split_is_kept_and_read_back_the_same(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process reads the concepts' alternatives and their Hyperscan forms a previous one kept
    (prefilter._kept_split), and matches as the one that split them; other patterns are another entry."""
    from workload_attribution.rules.pack import default_pack

    patterns = tuple(c.says for c in default_pack().concepts)
    built = prefilter.PatternMatcher(patterns)
    [entry] = cache.with_name("hyperscan-forms").glob("*.json")

    def never(*_a: object) -> None:
        raise AssertionError("split again")

    monkeypatch.setattr(prefilter, "hyperscan_form", never)
    loaded = prefilter.PatternMatcher(patterns)
    assert loaded.rest == built.rest and any(built.rest) and loaded._ids == built._ids
    lines = TEXT.splitlines() + ["OUT_OF MEMORY", "Cuda failure 700 'an illegal memory access'"]
    assert [loaded.matching(line) for line in lines] == [built.matching(line) for line in lines]
    with pytest.raises(AssertionError):
        prefilter.PatternMatcher(patterns[:-1])
    entry.write_text("not JSON")
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent))
    assert prefilter.PatternMatcher(patterns).rest == built.rest  # split again, and kept again
    assert json.loads(entry.read_text())["taken"]


def test_reading_ahead_takes_kept_tables_without_a_statement(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _tables(data)
    monkeypatch.setattr(pack_data, "_CSV_TABLES", {})  # a new process, every table kept on disk
    closed = duckdb.connect()
    closed.close()  # any statement on it raises
    pack_data.read_data_ahead(closed, data)
    assert {Path(p).name for p, _ in pack_data._CSV_TABLES} == {f"{t}.csv" for t, _ in pack_data.PACK_DATA}
    monkeypatch.setattr(pack_data, "_disk_entry", lambda *_a: pytest.fail("read from disk again"))
    assert _tables(data) == expected  # the attempt loads them from the process's cache


def test_the_pack_keeps_its_rules_found_one_select(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped pack's rules' SQL is parsed once per version of the pack (kept with the pickled
    pack), and SQL that is not one SELECT is still refused, never kept."""
    import pickle

    from workload_attribution.rules import pack as packs
    from workload_attribution.rules import sandbox
    from workload_attribution.rules.sandbox import RuleRuntimeError

    pack = packs.load_pack(packs.RULES_DIR)
    pack.warm_literals()
    sqls = [r.sql for r in pack.rules if r.sql]
    assert sqls and all(sql in pack._selects for sql in sqls)
    kept = pickle.loads(pickle.dumps(pack))
    monkeypatch.setattr(sandbox, "single_select", lambda sql: pytest.fail("parsed again"))
    for sql in sqls:
        kept.check_select(sql)
    monkeypatch.undo()
    for bad in ("SELECT 1; DELETE FROM events", "DELETE FROM events", "SELEC 1"):
        with pytest.raises(RuleRuntimeError):
            kept.check_select(bad)
        assert bad not in kept._selects


# -- The grammar's macros (staging/grammar.py) --------------------------------------------------

GRAMMAR_LINES = [
    "2026-11-20T10:05:01.123+01:00 gpu-a01 kernel: NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus.",
    "Nov 20 10:05:01 gpu-a01 kernel: [  12.5] nvidia: loading out-of-tree module",
    '{"log":"[rank3]: RuntimeError: CUDA error\\n","stream":"stderr","time":"2026-11-20T09:05:02.5Z"}',
    " 3: [rank3]: E1120 10:05:03.000 123 ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout",
    "no time at all",
]


def _parsed(path: str) -> list[tuple]:
    """The grammar's reading of GRAMMAR_LINES on a new connection to a staging database."""
    from workload_attribution.staging import database

    with database.connected(path) as con:
        return con.execute(
            "SELECT p['ts']::VARCHAR, p['rank'], p['body'] FROM "
            "(SELECT i, parse_log_line(l, 'Europe/Berlin', TIMESTAMP '2026-11-20 10:00:00') AS p "
            "FROM (SELECT unnest($l) AS l, generate_subscripts($l, 1) AS i)) ORDER BY i",
            {"l": GRAMMAR_LINES},
        ).fetchall()


def _staged(monkeypatch: pytest.MonkeyPatch, fresh_process: bool = True) -> tuple[str, list[tuple], str | None]:
    """A new staging database: its path, the grammar's reading on another connection, the catalog
    its macros were found in (None: made in the database itself)."""
    from workload_attribution.staging import database, grammar

    if fresh_process:
        monkeypatch.setattr(grammar, "_found", set())
        monkeypatch.setattr(grammar, "_refused", set())
    path = database.new_staging_path()
    database.open_staging(path)
    with database.connected(path) as con:
        where = con.execute(
            "SELECT database_name FROM duckdb_functions() WHERE function_name = 'parse_log_line'"
        ).fetchone()[0]
    parsed = _parsed(path)
    database.release_staging(path)
    return path, parsed, (None if where == "memory" else where)


def test_the_grammar_is_attached_from_the_cache_and_reads_as_made_in_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workload_attribution.staging import grammar

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, attached, where = _staged(monkeypatch)
    assert where == grammar.GRAMMAR
    [kept] = (tmp_path / "workload-attribution" / "grammar").glob("grammar-*.duckdb")
    monkeypatch.setenv("XDG_CACHE_HOME", str(kept))  # a file: no cache directory can be made under it
    _, made, where = _staged(monkeypatch)
    assert where is None  # made in the database, as always
    assert attached == made
    assert made[0][0] == "2026-11-20 09:05:01.123"
    assert made[3][1] == 3 and made[3][2].startswith("E1120 10:05:03.000 123 ProcessGroupNCCL.cpp:607] Watchdog")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert grammar.grammar_file("SELECT 1") != kept  # other macros: another file


def test_a_damaged_grammar_file_is_read_around_and_built_again_by_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workload_attribution.staging import grammar

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, expected, _ = _staged(monkeypatch)
    [kept] = (tmp_path / "workload-attribution" / "grammar").glob("grammar-*.duckdb")
    kept.write_bytes(b"not a database" * 1000)
    _, parsed, where = _staged(monkeypatch, fresh_process=False)  # this process still takes it as good
    assert where is None and parsed == expected and not kept.exists()  # made in the database; file removed
    _, parsed, where = _staged(monkeypatch, fresh_process=False)
    assert where is None  # this process does not try it again
    _, parsed, where = _staged(monkeypatch)  # the next process builds it again
    assert where == grammar.GRAMMAR and parsed == expected and kept.exists()
    assert not [p for p in kept.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_staging_databases_made_at_once_on_many_threads_all_read_the_grammar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file built by whichever thread gets there first, attached read-only by every database."""
    from concurrent.futures import ThreadPoolExecutor

    from workload_attribution.staging import grammar

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(grammar, "_found", set())
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: _staged(monkeypatch, fresh_process=False), range(12)))
    assert {where for _, _, where in results} == {grammar.GRAMMAR}
    assert len({tuple(parsed) for _, parsed, _ in results}) == 1
    assert len(list((tmp_path / "workload-attribution" / "grammar").iterdir())) == 1


PACK_TABLES = ("xid_catalog", "nvlink5_decode", "evidence_sources", "catalog", "concepts")


def _prepared(pack, monkeypatch: pytest.MonkeyPatch, staging: bool = True, fresh_process: bool = True):
    """A staging database prepared for `pack` as a diagnosis prepares it: the catalog holding its
    pack tables, and each table's columns and rows, read on another connection to it."""
    from workload_attribution.rules.phases import prepare
    from workload_attribution.rules.settings import Settings
    from workload_attribution.staging import database

    if fresh_process:
        monkeypatch.setattr(pack_data, "_TABLE_FILES", {})
        monkeypatch.setattr(pack_data, "_TABLES_REFUSED", set())
    path = database.new_staging_path()
    database.open_staging(path)
    try:
        with database.connected(path) as con:
            prepare(con, pack, Settings(), 0, staging=path if staging else None)
        with database.connected(path) as con:
            where = {
                r[0]
                for r in con.execute(
                    "SELECT database_name FROM duckdb_tables() WHERE list_contains($t, table_name)",
                    {"t": list(PACK_TABLES)},
                ).fetchall()
            }
            tables = {t: (con.sql(f"DESCRIBE {t}").fetchall(), _rows(con, t)) for t in PACK_TABLES}
    finally:
        database.release_staging(path)
    return where, tables


def _rows(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return sorted(map(repr, con.sql(f"SELECT * FROM {table}").fetchall()))


def test_the_pack_tables_are_attached_from_the_cache_and_read_as_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rules/pack_data.attach_pack_tables: a diagnosis's staging database finds its pack's tables in
    a file of the user's cache (every connection to it), the same columns and rows as loaded into
    it; with no cache to write, loaded as before."""
    from workload_attribution.rules.pack import default_pack

    pack = default_pack()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    where, attached = _prepared(pack, monkeypatch)
    assert where == {pack_data.PACK_TABLES}
    [kept] = (tmp_path / "workload-attribution" / "pack-tables").glob("tables-*.duckdb")
    where, loaded = _prepared(pack, monkeypatch, staging=False)  # a replay's database: loaded
    assert where == {"memory"} and loaded == attached
    assert len(attached["catalog"][1]) > 300 and len(attached["concepts"][1]) > 10
    monkeypatch.setenv("XDG_CACHE_HOME", str(kept))  # a file: no cache directory can be made under it
    where, loaded = _prepared(pack, monkeypatch)
    assert where == {"memory"} and loaded == attached


def test_a_changed_pack_has_its_own_tables_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workload_attribution.rules.pack import default_pack, load_pack

    shipped = default_pack()
    rules = tmp_path / "rules"
    shutil.copytree(shipped.path, rules, ignore=shutil.ignore_patterns("__pycache__"))
    decode = rules / "data" / "nvlink5_decode.csv"
    lines = decode.read_text().splitlines()
    decode.write_text("\n".join([lines[0], *lines[2:]]) + "\n")  # one row fewer
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, before = _prepared(shipped, monkeypatch)
    where, after = _prepared(load_pack(rules), monkeypatch)
    assert where == {pack_data.PACK_TABLES}
    assert len(after["nvlink5_decode"][1]) == len(before["nvlink5_decode"][1]) - 1
    assert after["catalog"] == before["catalog"]
    assert len(list((tmp_path / "cache" / "workload-attribution" / "pack-tables").glob("tables-*.duckdb"))) == 2


def test_a_damaged_tables_file_is_read_around_and_built_again_by_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workload_attribution.rules.pack import default_pack

    pack = default_pack()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, expected = _prepared(pack, monkeypatch)
    [kept] = (tmp_path / "workload-attribution" / "pack-tables").glob("tables-*.duckdb")
    kept.write_bytes(b"not a database" * 1000)
    where, tables = _prepared(pack, monkeypatch, fresh_process=False)  # this process took it as good
    assert where == {"memory"} and tables == expected and not kept.exists()
    where, tables = _prepared(pack, monkeypatch)  # the next process builds it again
    assert where == {pack_data.PACK_TABLES} and tables == expected and kept.exists()
    assert not [p for p in kept.parent.iterdir() if p.name.startswith(".")]  # no temporary file left
