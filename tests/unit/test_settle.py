"""What would settle it: an ambiguous or insufficient_evidence diagnosis names the evidence not
collected that would decide it (source, hosts, window, the readings it separates), and
`attribution diagnose --retry-missing` collects just that and diagnoses again."""

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.helpers import diagnose
from workload_attribution.cli import main
from workload_attribution.rules.pack import default_pack
from workload_attribution.rules.settle import unnamed_host

REAL = ROOT / "tests" / "real"
UNDECIDED = ("ambiguous", "insufficient_evidence")


def undecided_by_label(bundle: Path) -> bool:
    """Labelled ambiguous or insufficient_evidence, or accepting it."""
    exp = json.loads((bundle / "expected.json").read_text())
    return any(e["sub_domain"] in UNDECIDED for e in [exp, *exp.get("also_acceptable", [])])


LABELLED = sorted(b for b in REAL.iterdir() if (b / "expected.json").is_file())
# The default tier diagnoses the cases labelled undecided (or accepting it) and every eighth of the
# rest; the slow tier diagnoses every case (about three minutes of a busy core).
SAMPLE = [b for b in LABELLED if undecided_by_label(b)] + [b for b in LABELLED if not undecided_by_label(b)][::8]


def _diagnosed(bundles: list[Path]) -> dict:
    pack = default_pack()
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((b.name for b in bundles), pool.map(lambda b: diagnose(b, pack=pack), bundles)))


@pytest.fixture(scope="module")
def sample_diagnosed():
    """The sample, diagnosed: an undecided verdict counts whatever the label."""
    return _diagnosed(SAMPLE)


@pytest.fixture(scope="module")
def real_diagnosed():
    """Every labelled tests/real bundle, diagnosed."""
    return _diagnosed(LABELLED)


def _names_what_would_settle_it(diagnosed: dict, at_least: int) -> None:
    undecided = {n: d for n, d in diagnosed.items() if d.sub_domain in UNDECIDED}
    assert len(undecided) >= 10 and len(diagnosed) >= at_least
    for name, d in undecided.items():
        assert d.would_settle, f"{name}: {d.sub_domain} names nothing that would settle it"
        coverage = {c.source: c for c in d.coverage}
        for m in d.would_settle:
            cov = coverage[m.source]  # only sources configured for the attempt, so --retry-missing can collect them
            assert cov.status.value not in ("ok", "empty", "skipped") or set(m.hosts) - set(cov.nodes), (name, m)
            assert set(m.hosts) <= set(d.attempt.nodes) and m.start <= m.end, (name, m)
            assert m.separates and m.separates[0].startswith("unknown/insufficient_evidence"), (name, m)
            assert m.reason.startswith(f"{m.source} of ") or m.reason.startswith(f"the job's {m.source}"), m.reason


def _decided_names_nothing(diagnosed: dict, at_least: int) -> None:
    """Decided: neither undecided nor a node-level verdict naming no host (that one names what
    would name the host: tests/unit/test_hosts.py)."""
    decided = [d for d in diagnosed.values() if d.sub_domain not in UNDECIDED and not unnamed_host(d)]
    assert len(decided) >= at_least and all(d.would_settle == [] for d in decided)


def test_every_undecided_case_of_the_sample_names_what_would_settle_it(sample_diagnosed):
    _names_what_would_settle_it(sample_diagnosed, at_least=45)


@pytest.mark.slow
def test_every_undecided_case_in_tests_real_names_what_would_settle_it(real_diagnosed):
    _names_what_would_settle_it(real_diagnosed, at_least=90)


def test_the_missing_kernel_log_of_the_hosts_comes_first(sample_diagnosed):
    d = sample_diagnosed["nccl-watchdog-no-precursor-milabench-1"]
    first = d.would_settle[0]
    assert (first.source, first.hosts) == ("syslog", ["cn-d003", "cn-d004"])
    assert (first.start.isoformat(), first.end.isoformat()) == (
        "2024-09-09T09:43:41+00:00",
        "2024-09-09T09:56:11+00:00",
    )
    assert "hardware_failure/gpu" in first.separates and "infrastructure_failure/network_link" in first.separates
    assert first.reason.startswith(
        "syslog of cn-d003, cn-d004 between 2024-09-09 09:43 and 09:56 UTC would show whether a GPU, NVLink, NIC, "
        "link, host, storage or out-of-memory fault came before the first failure seen (NCCL watchdog"
    )


def test_a_decided_diagnosis_of_the_sample_names_nothing(sample_diagnosed):
    _decided_names_nothing(sample_diagnosed, at_least=15)


@pytest.mark.slow
def test_a_decided_diagnosis_names_nothing(real_diagnosed):
    _decided_names_nothing(real_diagnosed, at_least=60)


def test_retry_missing_collects_just_what_would_settle_it(tmp_path, capsys):
    """Without its hosts' kernel logs an XID 79 attempt is insufficient_evidence, naming syslog; the
    logs come back, and --retry-missing reads them and nothing else: the application log, changed
    meanwhile, is the archived one."""
    bundle = tmp_path / "xid79"
    shutil.copytree(EXAMPLES / "xid79_offbus_cascade-1-0", bundle)
    shutil.move(bundle / "logs" / "syslog", tmp_path / "syslog")
    wh = tmp_path / "w.duckdb"
    before = diagnose(bundle, warehouse=wh, archive=True)
    assert (before.terminal_state, before.sub_domain) == ("unknown", "insufficient_evidence")
    assert before.would_settle[0].source == "syslog"
    shutil.move(tmp_path / "syslog", bundle / "logs" / "syslog")
    app = sorted((bundle / "logs" / "app").iterdir())[0]
    with app.open("ab") as f:
        f.write(b"Traceback (most recent call last):\nRuntimeError: CUDA out of memory.\n")
    code = main(["diagnose", str(bundle), "--warehouse", str(wh), "--retry-missing", "--json", "-q"])
    after = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (after["terminal_state"], after["sub_domain"], after["affected_nodes"]) == (
        "hardware_failure",
        "gpu",
        diagnose(EXAMPLES / "xid79_offbus_cascade-1-0").affected_nodes,
    )
    [note] = [n for n in after["notes"] if n.startswith("--retry-missing: collected again: ")]
    again = note.removeprefix("--retry-missing: collected again: ").split(";")[0].split(", ")
    assert "syslog" in again and "app" not in again and set(again) == {m.source for m in before.would_settle}
    assert not any(s["symptom"] in ("cuda_oom", "python_exception") for s in after["symptoms"])  # app: archived
    assert [c["source"] for c in after["coverage"]] == [c.source for c in before.coverage]
    whole = {c.source: c.status.value for c in diagnose(EXAMPLES / "xid79_offbus_cascade-1-0").coverage}
    assert {c["source"]: c["status"] for c in after["coverage"]} == whole  # as if all had been collected at once


def test_retry_missing_without_an_archive_collects_everything(tmp_path, capsys):
    wh = tmp_path / "w.duckdb"
    code = main(
        ["diagnose", str(EXAMPLES / "watchdog_no_syslog-1-0"), "--warehouse", str(wh), "--retry-missing", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and any("no earlier diagnosis with archived evidence" in n for n in out["notes"])
    assert main(["diagnose", str(EXAMPLES / "watchdog_no_syslog-1-0"), "--no-warehouse", "--retry-missing"]) == 2
