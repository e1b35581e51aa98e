"""Which rules read a table of the pack (rules/reads.py), and what a rules diff makes of a table's
change: the rules that read it are the ones a replay compares (tasks/replay.py)."""

import shutil

import pytest

from workload_attribution.rules.diff import diff
from workload_attribution.rules.pack import RULES_DIR, load_pack
from workload_attribution.rules.reads import readers, reads_only, sql_tables


@pytest.fixture
def pack_dir(tmp_path):
    out = tmp_path / "pack"
    shutil.copytree(RULES_DIR, out, ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.sql", "*.md"))
    shutil.copytree(RULES_DIR / "python", out / "python", dirs_exist_ok=True)
    return out


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{path.name} changed: update this test"
    path.write_text(text.replace(old, new, 1))


def test_the_shipped_pack_reads_each_table_in_the_rules_that_name_it():
    pack = load_pack()
    assert readers(pack, "xid_catalog") == {"xid-catalog-facts", "xid-caused-by-previous"}
    assert readers(pack, "catalog") == {"catalog-messages"}  # declared: `catalog: true`, a Python rule
    assert readers(pack, "nvlink5_decode") == {"nvlink5-intrinfo-decode"}  # its module opens the CSV


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("SELECT * FROM events e JOIN xid_catalog c ON e.symptom = 'xid_' || c.code", {"events", "xid_catalog"}),
        ("WITH c AS (SELECT code FROM main.XID_CATALOG) SELECT * FROM c", {"c", "xid_catalog"}),
        ("SELECT * FROM events WHERE symptom IN (SELECT 'xid_' || code FROM xid_catalog)", {"events", "xid_catalog"}),
        ("SELECT 'xid_catalog' AS said, attrs->>'catalog' FROM events -- xid_catalog", {"events"}),
        ("SELECT * FROM (SELECT 1) t LEFT JOIN LATERAL (SELECT * FROM nvlink5_decode) d ON true", {"nvlink5_decode"}),
    ],
)
def test_a_rule_reads_the_tables_its_sql_reads_not_the_words_it_says(sql, tables):
    assert sql_tables(sql) == tables


@pytest.mark.parametrize(
    ("sql", "only_lines"),
    [
        ("SELECT obs_id, 'x' AS symptom FROM log_lines WHERE contains(body, 'LustreError')", True),
        ("WITH l AS (SELECT * FROM LOG_LINES), m AS MATERIALIZED (SELECT * FROM l) SELECT * FROM m", True),
        ("SELECT * FROM log_lines l JOIN records r USING (obs_id)", False),
        ("SELECT * FROM log_lines WHERE obs_id NOT IN (SELECT obs_id FROM events)", False),
        ("SELECT * FROM parse_log_lines(log_lines, 'UTC', TIMESTAMP '2026-01-01')", False),  # a table macro
        ("SELECT * FROM range(3)", False),
        ("SELEC * FROM log_lines", False),
    ],
)
def test_a_rule_reading_only_log_lines_is_told_from_its_parse_tree(sql, only_lines):
    """reads_only: no table but the one named (CTEs aside) and no table function."""
    assert reads_only(sql, "log_lines") is only_lines


def test_sql_that_does_not_parse_reads_anything():
    assert sql_tables("SELEC * FROM xid_catalog") is None


def test_a_rule_naming_the_table_in_a_subquery_reads_it(pack_dir):
    rule = pack_dir / "early" / "xid-meta-links.yaml"
    edit(rule, "('xid_45', 'xid_154')", "(SELECT 'xid_' || code FROM xid_catalog WHERE code IN (45, 154))")
    got = readers(load_pack(pack_dir), "xid_catalog")
    assert got == {"xid-catalog-facts", "xid-caused-by-previous", "xid-meta-links"}


def test_a_module_saying_the_name_only_in_its_prose_does_not_read_it(pack_dir):
    module = pack_dir / "python" / "node_failures.py"
    module.write_text('"""Reads nothing of xid_catalog."""\n# nor here: xid_catalog\n' + module.read_text())
    assert readers(load_pack(pack_dir), "xid_catalog") == {"xid-catalog-facts", "xid-caused-by-previous"}
    module.write_text(module.read_text() + '\n_TABLE = "xid_catalog"\n')
    got = readers(load_pack(pack_dir), "xid_catalog")
    assert got is not None and "node-failures" in got


def test_a_module_no_rule_runs_that_names_the_table_makes_any_rule_a_reader(pack_dir):
    helper = 'def codes(con):\n    return con.sql("SELECT code FROM xid_catalog")\n'
    (pack_dir / "python" / "helpers.py").write_text(helper)
    assert readers(load_pack(pack_dir), "xid_catalog") is None


def test_a_table_change_starts_where_its_first_reader_runs_and_names_its_readers(pack_dir):
    edit(pack_dir / "data" / "xid_catalog.csv", "GPU has fallen off the bus", "GPU fell off the bus")
    d = diff(load_pack(), load_pack(pack_dir))
    assert d.rules == {} and d.loose == []
    assert d.affected == {r: "reads data/xid_catalog.csv" for r in ("xid-catalog-facts", "xid-caused-by-previous")}
    assert d.first_point == "early"
    assert d.describe() == ["data/xid_catalog.csv changed (read by xid-catalog-facts, xid-caused-by-previous)"]


def test_a_catalog_row_change_starts_at_extract_and_a_module_change_where_its_rule_runs(pack_dir):
    edit(pack_dir / "catalogs" / "nccl.csv", "async fatal event on", "async fatal event on ")
    d = diff(load_pack(), load_pack(pack_dir))
    assert (d.affected, d.first_point) == ({"catalog-messages": "reads catalogs/nccl.csv"}, "extract")
    module = pack_dir / "python" / "nvlink5.py"
    module.write_text(module.read_text() + "\nX = 1\n")
    d = diff(load_pack(), load_pack(pack_dir))
    assert d.stood_on["python/nvlink5.py"] == ["nvlink5-intrinfo-decode"] and d.loose == []
    assert d.first_point == "extract"  # the catalog row's rule runs first
    assert d.reasons("catalog-messages") == ["catalogs/nccl.csv"]
    assert d.describe()[-1] == "python/nvlink5.py changed (run by nvlink5-intrinfo-decode)"


def test_a_module_another_module_names_may_be_run_by_any_rule_and_one_nobody_runs_by_none(pack_dir):
    module = pack_dir / "python" / "nvlink5.py"
    module.write_text(module.read_text() + "\nX = 1\n")
    assert diff(load_pack(), load_pack(pack_dir)).first_point == "early"
    (pack_dir / "python" / "helpers.py").write_text("import importlib\nNV = importlib.import_module('nvlink5')\n")
    d = diff(load_pack(), load_pack(pack_dir))
    assert d.loose == ["python/nvlink5.py"] and d.first_point == "extract"
    assert d.stood_on == {"python/helpers.py": []}  # no rule runs it, no module names it


def test_the_catalog_rows_that_differ_are_named_unless_the_others_move(pack_dir):
    nccl = pack_dir / "catalogs" / "nccl.csv"
    edit(nccl, "async fatal event on", "async fatal event on ")
    d = diff(load_pack(), load_pack(pack_dir))
    assert d.catalog_rows == ["nccl-ib-async-qp-cq-fatal"]
    header, changed, second, third, *rest = nccl.read_text().splitlines(keepends=True)
    nccl.write_text("".join([header, second, changed, third, *rest]))  # it moved: the others did not
    assert diff(load_pack(), load_pack(pack_dir)).catalog_rows == ["nccl-ib-async-qp-cq-fatal"]
    nccl.write_text("".join([header, changed, third, second, *rest]))  # a line's first match may change
    assert diff(load_pack(), load_pack(pack_dir)).catalog_rows is None
