"""`attribution rules impact`: a rules change replayed over a warehouse of archived attempts names
exactly the attempts it flips: the same ones, with the same new verdicts, as diagnosing each
attempt's bundle again under the changed pack."""

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import EXAMPLES, ROOT, WORKED
from tests.helpers import diagnose
from workload_attribution.cli import main
from workload_attribution.rules.pack import RULES_DIR, load_pack
from workload_attribution.warehouse.archive import Archive, Outcome

BUNDLES = sorted(p for p in EXAMPLES.iterdir() if (p / "attempt.yaml").is_file()) + [WORKED]

# A verdicts rule the shipped pack does not have (a GPU's hardware fault drains its host at once)
NEW_VERDICT_RULE = (ROOT / "tests" / "rule_changes" / "verdict-gpu-hardware-drain.yaml").read_text()

# One change per kind of rule the replay treats differently.
CHANGES = {
    # an extract rule: its old and new output compared on each attempt's evidence
    "extract": (
        "extract/xid-driver-report.yaml",
        "FROM m WHERE g['code'] != ''",
        "FROM m WHERE g['code'] NOT IN ('', '48', '79')",
    ),
    # a verdicts rule: compared on the events as the final phase began (kept by the archive)
    "verdict": (
        "final/verdict-root-cause.yaml",
        "CASE WHEN n_rivals > 0 THEN 'investigate' ELSE action END AS action",
        "CASE WHEN n_rivals > 0 OR sub_domain = 'nvlink' THEN 'investigate' ELSE action END AS action",
    ),
    # an early rule: compared in turn as the shipped pack's early phase runs up to it
    "early": (
        "early/xid-catalog-facts.yaml",
        "nullif(c.sub_domain, '') AS sub_domain,",
        "CASE WHEN c.code::VARCHAR = '79' THEN 'gpu_memory' ELSE nullif(c.sub_domain, '') END AS sub_domain,",
    ),
    # the last early rule: it reads what the early rules before it annotated (the XIDs' blame)
    "early, last": (
        "early/scope-attempt.yaml",
        "CASE WHEN a.ids IS NOT NULL AND len(ev.named_jobs) > 0",
        "CASE WHEN ev.blame = 'node' AND ev.source = 'syslog' THEN 'outside_attempt'\n"
        "                  WHEN a.ids IS NOT NULL AND len(ev.named_jobs) > 0",
    ),
    # an actions rule: replayed from the state the archive kept once the verdict was chosen
    "action": ("final/action-gpu-recovery.yaml", "THEN 'reboot_node'", "THEN 'drain_node'"),
    # a data table: compared in the rules that read it (two early rules read xid_catalog)
    "data table": (
        "data/xid_catalog.csv",
        "CONTACT_SUPPORT,gpu,root_candidate,hardware_failure,gpu,reboot_node",
        "CONTACT_SUPPORT,gpu,root_candidate,hardware_failure,gpu_memory,reboot_node",
    ),
    # a catalog row: compared in the one extract rule that reads the catalogs
    "catalog row": (
        "catalogs/pytorch.csv",
        "Signal 6 (SIGABRT) received by PID,task_killed,,,cascade,none,none,",
        "Signal 6 (SIGABRT) received by PID,task_killed,application_failure,user_code,root_candidate,host,fix_code,",
    ),
    # a Python module: compared in the rule that runs it (an early rule)
    "python module": (
        "python/nvlink5.py",
        'if d["immediate_action"] == "IGNORE":',
        'if d["immediate_action"] != "IGNORE":',
    ),
    # the precedence: the verdicts rules' rows the archive kept, chosen from again
    "precedence": (
        "pack.yaml",
        "  - verdict-scheduler-action   # a time limit, preemption, cancel or eviction ended it\n"
        "  - verdict-scheduler-message  # the scheduler's own words (PBS, LSF, Flux, Kubernetes) say why it ended it\n",
        "  - verdict-scheduler-message\n  - verdict-scheduler-action\n",
    ),
    # two phases: the extract rule compared first, then (where it agrees) the verdicts rule
    "extract and verdict": ["extract", "verdict"],
    # a new verdicts rule and its place in the precedence: its rows, then the verdict chosen again
    "new verdict": [
        ("final/verdict-gpu-hardware-drain.yaml", None, NEW_VERDICT_RULE),
        (
            "pack.yaml",
            "  - verdict-root-cause         #",
            "  - verdict-gpu-hardware-drain\n  - verdict-root-cause         #",
        ),
    ],
    # a new failure class: an extract rule changed, a new verdicts rule placed in the precedence
    "extract and new verdict": ["extract", "new verdict"],
}
# What each change's replays took: (what may occur, what must). An extract rule's change is decided
# on its own output for most attempts; a verdicts rule's from the events the archive kept as the
# final phase began; an early rule's as the early phase runs up to it; an actions rule's by what
# runs once the verdict is chosen, from the state the archive kept there; a table's or a module's
# in the rules that read or run it (the candidate's table lent to them); the precedence's by
# choosing again from the verdicts kept; two phases' stage by stage (the verdicts rule is compared
# only where the extract rule agreed: some attempts replay from there).
SCREENED = {"screened"}
TOOK = {
    "extract": ({"screened", "from extract"}, SCREENED),
    "verdict": ({"screened", "from final"}, SCREENED),
    "early": ({"screened", "from early"}, SCREENED),
    "early, last": ({"screened", "from early"}, SCREENED),
    "action": ({"from roles"}, {"from roles"}),
    "data table": ({"screened", "from early"}, SCREENED),
    "catalog row": ({"screened", "from extract"}, SCREENED),
    "python module": ({"screened", "from early"}, SCREENED),
    "precedence": ({"screened", "from roles"}, SCREENED),
    "extract and verdict": ({"screened", "from extract", "from final"}, {"screened", "from extract", "from final"}),
    # the new rule's rows where it gives some, else the verdict chosen again (the same one: screened)
    "new verdict": ({"screened", "from final", "from roles"}, {"screened", "from final"}),
    "extract and new verdict": (
        {"screened", "from extract", "from final", "from roles"},
        {"screened", "from extract", "from final"},
    ),
}
# What the report says differs, where it is not the changed rule
DIFFERENCES = {
    "data table": "data/xid_catalog.csv changed (read by xid-catalog-facts, xid-caused-by-previous)",
    "catalog row": "catalogs/pytorch.csv changed (read by catalog-messages)",
    "python module": "python/nvlink5.py changed (run by nvlink5-intrinfo-decode)",
    "precedence": "the precedence or the no_verdict changed",
    "new verdict": ["rule verdict-gpu-hardware-drain added", "the precedence or the no_verdict changed"],
    "extract and new verdict": [
        "rule verdict-gpu-hardware-drain added",
        "rule xid-driver-report changed",
        "the precedence or the no_verdict changed",
    ],
}


def candidate(tmp_path, kind):
    out = tmp_path / f"candidate-{kind.replace(', ', '-').replace(' ', '-')}"
    shutil.copytree(RULES_DIR, out, ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.sql", "*.md"))
    shutil.copytree(RULES_DIR / "python", out / "python", dirs_exist_ok=True)
    for path, old, new in edits(kind):
        if old is None:  # a file the pack did not have
            assert not (out / path).exists()
            (out / path).write_text(new)
            continue
        text = (out / path).read_text()
        assert old in text, f"{path} changed: update this test's change"
        (out / path).write_text(text.replace(old, new, 1))
    return out


def edits(kind):
    """A kind's (path, old text, new text) edits; a kind may be made of other kinds' edits."""
    change = CHANGES[kind] if isinstance(kind, str) else kind
    return [change] if isinstance(change, tuple) else [e for part in change for e in edits(part)]


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """The regression bundles and the worked example, diagnosed into a warehouse, archived."""
    wh = tmp_path_factory.mktemp("impact") / "w.duckdb"
    return wh, {b.name: diagnose(b, warehouse=wh, archive=True) for b in BUNDLES}


def impact(capsys, wh, cand, *more):
    code = main(["rules", "impact", "--candidate", str(cand), "--warehouse", str(wh), "--json", "-q", *more])
    return code, json.loads(capsys.readouterr().out)


def flips(cand, live):
    """What diagnosing every bundle again under the candidate changes: bundle -> new outcome."""
    pack = load_pack(cand)
    with ThreadPoolExecutor(max_workers=2) as pool:
        again = dict(zip((b.name for b in BUNDLES), pool.map(lambda b: diagnose(b, pack=pack), BUNDLES)))
    return {name: Outcome.of(d) for name, d in again.items() if not Outcome.of(d).decides_as(Outcome.of(live[name]))}


# The default tier replays one change of each way the replay resumes (an extract rule, a verdicts
# rule, a catalog row, a Python module, a new verdicts rule); the other kinds run in the slow tier
# (each is 20-45 s of a busy core: replays plus every bundle diagnosed again under the candidate).
DEFAULT_KINDS = {"extract", "verdict", "catalog row", "python module", "new verdict"}


@pytest.mark.parametrize(
    "kind", [k if k in DEFAULT_KINDS else pytest.param(k, marks=pytest.mark.slow) for k in sorted(CHANGES)]
)
def test_impact_names_exactly_the_attempts_a_rule_change_flips(archived, tmp_path, capsys, kind):
    wh, live = archived
    cand = candidate(tmp_path, kind)
    expected = flips(cand, live)
    assert 0 < len(expected) < len(BUNDLES), f"the {kind} change should flip some attempts, not all"
    code, report = impact(capsys, wh, cand)
    assert code == 0 and report["attempts"] == len(BUNDLES) and not report["failed"]
    by_job = {live[n].attempt.job_id: n for n in live}
    got = {by_job[c["job_id"]]: Outcome.model_validate(c["new"]) for c in report["changed"]}
    assert got == expected
    for c in report["changed"]:
        assert Outcome.model_validate(c["old"]) == Outcome.of(live[by_job[c["job_id"]]])
    assert sum(t["attempts"] for t in report["transitions"]) == len(expected)
    rules = sorted(path.rpartition("/")[2].removesuffix(".yaml") for path, _, _ in edits(kind))
    said = DIFFERENCES.get(kind, [f"rule {r} changed" for r in rules])
    assert report["differences"] == ([said] if isinstance(said, str) else said)
    assert report["unseen"] == []  # the changed rules look for the lines they looked for
    may, must = TOOK[kind]
    assert must <= set(report["how"]) <= may, report["how"]


def test_a_candidate_looking_for_lines_the_archive_never_kept_says_so(archived, tmp_path, capsys):
    """A log line is archived only when it holds a literal of the pack that staged it: a candidate
    looking for a new literal cannot be judged on the archive alone, and the report says which."""
    wh, _ = archived
    out = tmp_path / "wider"
    shutil.copytree(RULES_DIR, out, ignore=shutil.ignore_patterns("__pycache__"))
    rule = out / "extract" / "xid-driver-report.yaml"
    wider = '["NVRM: Xid", "NVRM: Xid (PCI", "NVRM: NVLink"]'  # one holds a shipped literal, one is new
    rule.write_text(rule.read_text().replace('prefilter: ["NVRM: Xid"]', f"prefilter: {wider}", 1))
    code, report = impact(capsys, wh, out)
    assert code == 0 and report["unseen"] == ["app: NVRM: NVLink", "syslog: NVRM: NVLink"]
    assert main(["rules", "impact", "--candidate", str(out), "--warehouse", str(wh), "--markdown", "-q"]) == 0
    said = capsys.readouterr().out
    assert "**Not seen**: the archive keeps only the lines the shipped pack's prefilters kept" in said


def test_the_same_pack_changes_nothing_and_replays_nothing(archived, tmp_path, capsys):
    wh, _ = archived
    same = tmp_path / "same"
    shutil.copytree(RULES_DIR, same, ignore=shutil.ignore_patterns("__pycache__"))
    code, report = impact(capsys, wh, same)
    assert (code, report["changed"], report["how"]) == (0, [], {"alike": len(BUNDLES)})


def test_a_threshold_crossed_exits_4_and_the_markdown_is_a_review_comment(archived, tmp_path, capsys):
    wh, _ = archived
    cand = candidate(tmp_path, "extract")
    code, report = impact(capsys, wh, cand, "--max-changed", "0")
    assert code == 4 and report["changed"]
    assert impact(capsys, wh, cand, "--max-changed-percent", "50")[0] == 0
    assert main(["rules", "impact", "--candidate", str(cand), "--warehouse", str(wh), "--markdown", "-q"]) == 0
    md = capsys.readouterr().out
    assert md.startswith(f"### Rules impact: {len(report['changed'])} of {len(BUNDLES)} archived attempts change")
    assert "| from | to | attempts | what changed |" in md and "| attempt | ended | old | new |" in md


def test_since_and_cluster_choose_the_attempts(archived, tmp_path, capsys):
    wh, live = archived
    cand = candidate(tmp_path, "extract")
    eos = sum(d.attempt.cluster == "eos" for d in live.values())
    assert impact(capsys, wh, cand, "--cluster", "eos")[1]["attempts"] == eos
    late = sum(d.attempt.end.isoformat() >= "2026-06-01" for d in live.values())
    assert impact(capsys, wh, cand, "--since", "2026-06-01T00:00:00Z")[1]["attempts"] == late


def test_bad_use_is_refused_in_one_line(archived, tmp_path, capsys):
    wh, _ = archived
    assert main(["rules", "impact", "--warehouse", str(wh)]) == 2
    assert main(["rules", "impact", "--candidate", str(tmp_path / "none"), "--warehouse", str(wh)]) == 2
    assert main(["rules", "list", "--candidate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--candidate DIR" in err and "is an option of `rules impact` only" in err


def test_an_attempt_archived_with_the_shipped_pack_is_not_replayed_under_it(archived):
    """The shipped pack's verdict of an attempt it diagnosed is the archived one (the rules are
    deterministic): every archived verdict is what the live diagnosis said."""
    wh, live = archived
    archive = Archive(str(wh.with_name("w-archive")))
    for e in archive.entries():
        m = archive.read_manifest(e.key)
        assert m.outcome == Outcome.of(next(d for d in live.values() if d.diagnosis_id == m.diagnosis_id))
