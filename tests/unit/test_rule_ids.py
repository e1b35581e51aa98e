"""Renaming rules changes no diagnosis: which verdict wins is the pack's precedence list, which
symptom is root is decided by time and evidence, never by the alphabetical order of rule ids.
Every rule and concept of a copy of the pack gets a new id that sorts differently (file names and the
precedence list follow); the shared examples and the real-log corpus are diagnosed with both."""

from __future__ import annotations

import hashlib
import re
import shutil

import pytest

from tests.conftest import EXAMPLES, ROOT


def renamed_pack(dst):
    shutil.copytree(ROOT / "rules", dst, ignore=shutil.ignore_patterns("__pycache__"))
    mapping = {}
    for path in sorted(dst.glob("*/*.yaml")):
        if path.parent.name == "tests":
            continue
        old = re.search(r"^id: (\S+)$", path.read_text(), re.M).group(1)
        new = f"{hashlib.sha1(old.encode()).hexdigest()[:6]}-{old[::-1]}"  # another order entirely
        mapping[old] = new
        path.write_text(re.sub(r"^id: \S+$", f"id: {new}", path.read_text(), count=1, flags=re.M))
        path.rename(path.with_name(f"{new}.yaml"))
    for path in sorted(dst.glob("*/*.yaml")):  # a rule names the rules it overrides by id
        text = path.read_text()
        names = re.search(r"^overrides: \[(.*)\]$", text, re.M)
        if names:
            renamed = ", ".join(mapping[n.strip()] for n in names.group(1).split(","))
            path.write_text(text.replace(names.group(0), f"overrides: [{renamed}]"))
    meta = dst / "pack.yaml"
    text = meta.read_text()
    for old, new in mapping.items():
        text = re.sub(rf"(?m)^(\s*- ){re.escape(old)}(\s|$)", rf"\g<1>{new}\g<2>", text)
    meta.write_text(text)
    return mapping


def summary(d):
    roles = sorted((s.symptom, s.node or "", s.role.value, s.count) for s in d.symptoms)
    return (
        d.terminal_state.value,
        d.sub_domain.value,
        tuple(d.affected_nodes),
        d.recommended_action.value,
        d.root_cause.symptom if d.root_cause else None,
        d.root_cause.node if d.root_cause else None,
        tuple(roles),
        tuple(sorted(c.symptom for c in d.candidates)),
    )


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    from workload_attribution.rules.pack import default_pack, load_pack

    dst = tmp_path_factory.mktemp("renamed") / "rules"
    mapping = renamed_pack(dst)
    renamed = load_pack(dst)
    # the concepts (concepts/*.yaml) are renamed too: which meaning wins a line is not their ids' order
    ids = {r.id for r in renamed.rules} | {c.id for c in renamed.concepts}
    assert ids == set(mapping.values()) and len(renamed.concepts) >= 19 and len(renamed.precedence) >= 7
    return default_pack(), renamed


BUNDLES = sorted(p.parent for p in (ROOT / "tests" / "real").glob("*/attempt.yaml")) + sorted(
    p.parent for p in EXAMPLES.glob("*/attempt.yaml")
)


@pytest.mark.slow  # the whole corpus diagnosed twice: about three minutes of one core
def test_renaming_every_rule_changes_no_diagnosis(packs):
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import diagnose

    shipped, renamed = packs
    with ThreadPoolExecutor(max_workers=2) as pool:
        a = list(pool.map(lambda b: summary(diagnose(b, pack=shipped)), BUNDLES))
        b = list(pool.map(lambda b: summary(diagnose(b, pack=renamed)), BUNDLES))
    differ = [(bundle.name, x, y) for bundle, x, y in zip(BUNDLES, a, b) if x != y]
    assert differ == []


TIE_RULE = """id: {id}
version: 1
phase: extract
description: a host fault seen as '{word}' (two rules, one tie)
output: events
sources: [syslog]
prefilter: ["{word}"]
symptoms:
  {symptom}:
    title: "{word}"
    role: root_candidate
    terminal_state: hardware_failure
    sub_domain: host
    action: drain_node
    blame: node
sql: "SELECT obs_id, '{symptom}' AS symptom FROM log_lines WHERE source = 'syslog' AND contains(body, '{word}')"
tests:
  - name: t
    lines: [{{source: syslog, node: n1, text: "{word}"}}]
    expect: [{{symptom: {symptom}}}]
"""


@pytest.mark.parametrize("left_first", [True, False])
def test_a_tie_between_two_rules_falls_the_same_way_whatever_their_ids(tmp_path, left_first):
    """Two host faults at the same second on two hosts, found by two different rules: the root is
    the same whichever rule's id sorts first (the tie falls by evidence: the observation's order)."""
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import load_pack

    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack, ignore=shutil.ignore_patterns("__pycache__"))
    ids = ("aa-tie", "zz-tie") if left_first else ("zz-tie", "aa-tie")
    for rule_id, word, symptom in ((ids[0], "TIE-LEFT", "tie_left"), (ids[1], "TIE-RIGHT", "tie_right")):
        (pack / "extract" / f"{rule_id}.yaml").write_text(TIE_RULE.format(id=rule_id, word=word, symptom=symptom))
    bundle = tmp_path / "b"
    (bundle / "logs" / "syslog").mkdir(parents=True)
    (bundle / "logs" / "app").mkdir(parents=True)
    (bundle / "attempt.yaml").write_text(
        "cluster: c\nscheduler: slurm\njob_id: '7'\nattempt: 0\nnodes: [n1, n2, n3]\n"
        "start: 2026-11-20T10:00:00Z\nend: 2026-11-20T11:30:00Z\nstate: FAILED\n"
    )
    (bundle / "logs" / "syslog" / "n1.log").write_text("Nov 20 11:02:41 n1 kernel: TIE-RIGHT\n")
    (bundle / "logs" / "syslog" / "n2.log").write_text("Nov 20 11:02:41 n2 kernel: TIE-LEFT\n")
    (bundle / "logs" / "app" / "n3.log").write_text(
        "[rank0]:[E1120 11:12:42.123456 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600060 "
        "milliseconds before timing out.\n"
    )
    d = diagnose(bundle, pack=load_pack(pack))
    # n1's file comes first in the scan: its line is the earlier observation of the two
    assert (d.terminal_state.value, d.sub_domain.value, d.affected_nodes) == ("hardware_failure", "host", ["n1"])
    assert d.root_cause.symptom == "tie_right"
