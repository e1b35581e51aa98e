"""The rules pack: every rule's own test cases, validation errors, isolation of failing rules."""

import shutil

import pytest

from workload_attribution.rules.engine import RunResult, Settings, prepare, run_rule
from workload_attribution.rules.pack import RULES_DIR, Rule, RuleFileError, default_pack, load_pack, validate_pack
from workload_attribution.rules.testing import run_tests


def test_every_rule_has_passing_test_cases():
    pack = default_pack()
    assert all(r.tests for r in pack.rules)
    failed = [f"{r.rule} :: {r.case}: {r.message}" for r in run_tests(pack) if not r.ok]
    assert failed == []


def test_the_pack_version_changes_with_any_rule_file(tmp_path):
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    before = load_pack(copy).version
    f = copy / "final" / "verdict-fallback.yaml"
    f.write_text(f.read_text().replace("never a guess.", "never, ever a guess."))
    assert load_pack(copy).version != before


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda d: d.replace("phase: final", "phase: finale"), "phase"),
        (lambda d: d.replace("version: 1", "version: zero"), "version"),
        (lambda d: d.replace("id: verdict-fallback", "id: Bad Id!"), "id"),
        (
            lambda d: d.replace(
                "output: verdicts", "output: verdicts\npython: workload_attribution.rules.python.nvlink5:decode_events"
            ),
            "rule",
        ),
        (lambda d: d + "\nunknown_key: 1\n", "unknown_key"),
        (lambda d: d.replace("id: verdict-fallback", "id: [verdict-fallback"), "yaml"),
    ],
)
def test_broken_rule_files_name_file_rule_and_field(tmp_path, mutate, field):
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    f = copy / "final" / "verdict-fallback.yaml"
    f.write_text(mutate(f.read_text()))
    pack, errors = validate_pack(copy)
    assert pack is None and len(errors) == 1
    msg = str(errors[0])
    assert "verdict-fallback.yaml" in msg and field in msg


def test_rule_in_the_wrong_phase_directory(tmp_path):
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.move(copy / "final" / "verdict-fallback.yaml", copy / "early" / "verdict-fallback.yaml")
    with pytest.raises(RuleFileError, match="rules/early/"):
        load_pack(copy)


def test_extract_rule_on_logs_needs_a_prefilter():
    with pytest.raises(ValueError, match="prefilter"):
        Rule.model_validate(
            {
                "id": "x",
                "version": 1,
                "phase": "extract",
                "description": "a rule without prefilter",
                "output": "events",
                "sources": ["syslog"],
                "sql": "SELECT 1",
                "tests": [{"name": "t"}],
            }
        )


def test_sql_failing_at_run_time_is_reported_and_the_rest_runs(staging):
    pack = default_pack()
    prepare(staging, pack, Settings())
    bad = Rule.model_validate(
        {
            "id": "broken",
            "version": 1,
            "phase": "final",
            "description": "refers to a missing table",
            "output": "verdicts",
            "sql": "SELECT * FROM no_such_table",
            "tests": [{"name": "t"}],
        }
    )
    result = RunResult()
    run_rule(staging, pack, bad, Settings(), result)
    run_rule(staging, pack, next(r for r in pack.rules if r.id == "verdict-fallback"), Settings(), result)
    assert result.failed[0]["rule"] == "broken" and "no_such_table" in result.failed[0]["error"]
    assert "verdict-fallback" in result.fired


def test_when_no_verdicts_rule_gives_a_verdict_the_diagnosis_says_so(tmp_path):
    """The fallback rule broken and nothing else explaining the attempt: the diagnosis is the honest
    unknown / insufficient_evidence, names no root, and says that no verdict was given and why."""
    from tests.conftest import ROOT
    from tests.helpers import diagnose

    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    fallback = copy / "final" / "verdict-fallback.yaml"
    fallback.write_text(fallback.read_text().replace("AS reason", "AS reason FROM no_such_table"))
    d = diagnose(ROOT / "tests" / "real" / "torch-sigkill-exitcode-9-no-oom-evidence-1", pack=load_pack(copy))
    assert [f["rule"] for f in d.rules.failed] == ["verdict-fallback"]
    assert "verdict-fallback" not in d.rules.fired and "python-exception" in d.rules.fired  # the rest ran
    assert (d.terminal_state.value, d.sub_domain.value, d.confidence.value) == (
        "unknown",
        "insufficient_evidence",
        "low",
    )
    assert d.recommended_action.value == "restart_job" and d.root_cause is None and d.affected_nodes == []
    assert d.candidates == [] and d.affected_components == []
    assert d.notes[0] == "no verdict" and "1 rule(s) did not run" in d.notes[1]


@pytest.mark.parametrize(
    "mutate,field,words",
    [
        (lambda t: t[: t.index("no_verdict:")], "no_verdict", "missing"),
        (lambda t: t.replace("terminal_state: unknown", "terminal_state: unknwon"), "no_verdict.terminal_state", ""),
        (lambda t: t.replace("sub_domain: insufficient_evidence", "sub_domain: gpu"), "no_verdict", "belong"),
        (lambda t: t.replace("  reason: no verdict\n", ""), "no_verdict.reason", "required"),
    ],
)
def test_the_pack_says_which_verdict_stands_when_no_rule_gives_one(tmp_path, mutate, field, words):
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    meta = copy / "pack.yaml"
    meta.write_text(mutate(meta.read_text()))
    with pytest.raises(RuleFileError) as caught:
        load_pack(copy)
    assert caught.value.field == field and "pack.yaml" in str(caught.value) and words in str(caught.value)


def _rule(**fields):
    return Rule.model_validate(
        {
            "id": "needs-xids",
            "version": 1,
            "phase": "early",
            "description": "annotates XIDs, finds nothing without one",
            "output": "annotations",
            "consumes": ["xid_*", "role:root_candidate"],
            "requires": ["xid_*"],
            "sql": "SELECT event_id, 'benign' AS role_hint FROM events WHERE symptom LIKE 'xid_%'",
            "tests": [{"name": "t"}],
            **fields,
        }
    )


def test_requires_lists_what_the_rule_consumes_and_no_extract_rule_requires():
    with pytest.raises(ValueError, match="not in 'consumes'"):
        _rule(requires=["storage_error"])
    with pytest.raises(ValueError, match="extract rules read observations"):
        _rule(phase="extract", output="events", sources=["metrics"], consumes=["xid_*"])


def test_a_rule_whose_requirements_are_absent_is_skipped_and_runs_once_they_are_there(staging):
    """Rule.requires: the engine asks which symptoms and role hints the events hold, runs the rule
    only when one it requires is there, and asks again once a rule may have changed them."""
    from workload_attribution.rules.phases import Present

    pack = default_pack()
    prepare(staging, pack, Settings())
    rule, present = _rule(), Present()
    assert not present.any_of(staging, rule)
    assert present.any_of(staging, _rule(requires=["role:root_candidate"])) is False
    staging.execute("INSERT INTO events (event_id, symptom, role_hint) VALUES (1, 'xid_79', 'root_candidate')")
    assert not present.any_of(staging, rule)  # what it knew stands until forgotten
    present.forget()
    assert present.any_of(staging, rule) and present.any_of(staging, _rule(requires=["role:root_candidate"]))
    assert present.any_of(staging, _rule(requires=[], consumes=[]))
    result = RunResult()
    run_rule(staging, pack, rule, Settings(), result)  # an annotation setting a role hint changes what is there
    assert result.fired == ["needs-xids"] and Present.changed_by(staging, rule)
    assert not Present.changed_by(staging, _rule(output="roles"))


def test_every_rule_that_requires_finds_nothing_in_its_tests_without_it():
    """rules test fails a rule that finds something in a test case holding none of what it requires."""
    pack = default_pack()
    lying = next(r for r in pack.rules if r.id == "xid-meta-links").model_copy(update={"requires": ["xid_13"]})
    from workload_attribution.rules.testing import run_case

    outcome = run_case(pack, lying, lying.tests[0])
    assert not outcome.ok and "none of what it requires" in outcome.message
