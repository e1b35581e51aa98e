"""What a rule can emit, read from its code (rules/emits.py), and `rules validate` reporting a
symptom its `produces:` does not declare without running a test; the shipped pack validates clean."""

import shutil

import pytest

from workload_attribution.rules import graph
from workload_attribution.rules.emits import Emitted, sql_symptoms
from workload_attribution.rules.pack import RULES_DIR, load_pack
from workload_attribution.rules.validation import validate, warnings


@pytest.fixture
def pack_dir(tmp_path):
    out = tmp_path / "pack"
    shutil.copytree(RULES_DIR, out, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copytree(RULES_DIR / "python", out / "python", dirs_exist_ok=True)
    return out


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{path.name} changed: update this test"
    path.write_text(text.replace(old, new, 1))


def emitted_errors(pack_dir):
    return [str(e) for e in graph.check(load_pack(pack_dir))[0] if "emits" in str(e)]


@pytest.mark.parametrize(
    ("sql", "names", "opaque"),
    [
        ("SELECT obs_id, 'a' AS symptom FROM log_lines", {"a"}, False),
        (
            "SELECT obs_id, CASE WHEN contains(body, 'x') THEN 'a' WHEN rank = 0 THEN coalesce(NULL, 'b') "
            "ELSE 'c' END AS symptom FROM log_lines",
            {"a", "b", "c"},
            False,
        ),
        # the later branches of a UNION give the column by position, unnamed
        (
            "SELECT obs_id, 'a' AS symptom FROM log_lines UNION ALL SELECT obs_id, 'b' FROM log_lines "
            "UNION ALL SELECT obs_id, CASE WHEN rank = 1 THEN 'c' END FROM log_lines",
            {"a", "b", "c"},
            False,
        ),
        # followed through a CTE and a subquery, a join's side and SELECT *
        (
            "WITH k AS (SELECT obs_id, CASE WHEN rank = 1 THEN 'a' ELSE 'b' END AS symptom FROM log_lines) "
            "SELECT k.obs_id, k.symptom FROM k JOIN log_lines l USING (obs_id) "
            "UNION ALL SELECT * FROM (SELECT obs_id, 'c' AS symptom FROM log_lines)",
            {"a", "b", "c"},
            False,
        ),
        ("SELECT obs_id, 'xid_' || code AS symptom FROM events", {"xid_*"}, False),
        # a table's column says nothing of what the rule means to emit
        ("SELECT obs_id, symptom FROM events", set(), True),
        ("SELECT obs_id, upper(body) AS symptom FROM log_lines", set(), True),
    ],
)
def test_the_symptoms_a_select_can_emit(sql, names, opaque):
    assert sql_symptoms(sql) == Emitted(frozenset(names), opaque)


def test_no_symptom_column_or_no_parse_says_nothing():
    assert sql_symptoms("SELECT obs_id FROM log_lines") is None
    assert sql_symptoms("SELEC obs_id, 'a' AS symptom") is None


def test_the_shipped_pack_emits_only_what_it_declares_and_validates_without_a_warning():
    pack, errors = validate(RULES_DIR)
    assert pack is not None and errors == []
    assert warnings(pack) == []


def test_an_undeclared_symptom_in_a_case_branch_is_reported_without_running_a_test(pack_dir):
    edit(
        pack_dir / "extract" / "nccl-communication-errors.yaml",
        "THEN 'nccl_heartbeat_timeout'",
        "THEN 'nccl_heartbeat_lost'",
    )
    errors = emitted_errors(pack_dir)
    assert len(errors) == 1
    assert "nccl-communication-errors" in errors[0] and "'nccl_heartbeat_lost'" in errors[0]


def test_an_undeclared_symptom_in_a_union_branch_is_reported(pack_dir):
    edit(pack_dir / "extract" / "oom-and-numerical.yaml", "SELECT obs_id, 'nan_or_inf',", "SELECT obs_id, 'nan_seen',")
    errors = emitted_errors(pack_dir)
    assert len(errors) == 1 and "oom-and-numerical" in errors[0] and "'nan_seen'" in errors[0]
    _, found = validate(pack_dir)
    assert any(e.rule == "oom-and-numerical" and e.field == "produces" for e in found)


def test_a_python_rule_emitting_an_undeclared_constant_is_reported(pack_dir):
    edit(pack_dir / "python" / "node_failures.py", '"symptom": "k8s_node_not_ready"', '"symptom": "k8s_node_gone"')
    errors = emitted_errors(pack_dir)
    assert len(errors) == 1 and "node-failures" in errors[0] and "'k8s_node_gone'" in errors[0]


def test_a_rule_declaring_what_it_emits_is_not_reported(pack_dir):
    # a new symptom, emitted and declared (produces and symptoms): nothing to say
    rule = pack_dir / "extract" / "nccl-communication-errors.yaml"
    edit(rule, "THEN 'nccl_heartbeat_timeout'", "THEN 'nccl_heartbeat_lost'")
    edit(rule, "nccl_heartbeat_timeout: [],", "nccl_heartbeat_lost: [],")
    edit(rule, "  nccl_heartbeat_timeout:\n", "  nccl_heartbeat_lost:\n")
    assert emitted_errors(pack_dir) == []
