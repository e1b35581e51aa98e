"""The bundle connector: coverage records for every kind of source trouble, lines kept faithfully."""

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import WORKED
from tests.helpers import collect_bundle
from workload_attribution.connectors.bundle import BundleError, load_scope
from workload_attribution.connectors.schedulers import get_scheduler
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connect, release_staging
from workload_attribution.staging.normalize import normalize
from workload_attribution.tasks.steps import scope_bundle


@pytest.fixture
def bundle(tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(WORKED, dst)
    return dst


def _collect(bundle: Path, source: str):
    scope = load_scope(bundle)
    staging = create_staging(scope)
    try:
        got = collect_bundle(bundle, scope, source, staging, default_pack().prefilter(source))
        con = connect(staging)
        normalize(con, scope.timezone, scope.start.replace(tzinfo=None), got.files)
        lines = con.execute(
            "SELECT path, lineno, text, time, time_quality, rank FROM log_lines ORDER BY path, lineno"
        ).fetchall()
        con.close()
        return got, lines
    finally:
        release_staging(staging)


def test_missing_source_is_unavailable_not_healthy(bundle):
    shutil.rmtree(bundle / "logs" / "syslog")
    got, _ = _collect(bundle, "syslog")
    assert got.coverage.status == CoverageStatus.unavailable
    assert "logs/syslog" in got.coverage.error


def test_kueue_files_for_a_slurm_attempt_are_skipped(bundle):
    got, _ = _collect(bundle, "kueue")
    assert got.coverage.status == CoverageStatus.skipped


def test_corrupt_sacct_is_an_error_with_the_reason(bundle):
    (bundle / "scheduler" / "sacct.json").write_text('{"jobs": [ {"job_id": 1,')
    got, _ = _collect(bundle, "sacct")
    assert got.coverage.status == CoverageStatus.error
    assert "invalid JSON at line 1" in got.coverage.error


def test_sacct_of_another_job_is_refused(bundle):
    doc = json.loads((bundle / "scheduler" / "sacct.json").read_text())
    doc["jobs"][0]["job_id"] = 999
    (bundle / "scheduler" / "sacct.json").write_text(json.dumps(doc))
    got, _ = _collect(bundle, "sacct")
    assert got.coverage.status == CoverageStatus.error
    assert "not job 4191701" in got.coverage.error


def test_a_reused_job_id_takes_the_latest_record_only(bundle):
    """Job ids wrap and restart: an older job under the same id is not this attempt's evidence."""
    path = bundle / "scheduler" / "sacct.json"
    doc = json.loads(path.read_text())
    old = json.loads(json.dumps(doc["jobs"][0]))
    old["nodes"], old["name"] = "gb-r01-n01", "someone-elses-job"
    for key in ("submission", "eligible", "start", "end"):
        if isinstance(old.get("time", {}).get(key), int):
            old["time"][key] -= 400 * 86400
    doc["jobs"] = [doc["jobs"][0], old]
    path.write_text(json.dumps(doc))
    got, _ = _collect(bundle, "sacct")
    assert got.coverage.status == CoverageStatus.ok
    scope = load_scope(bundle)
    staging = create_staging(scope)
    try:
        collect_bundle(bundle, scope, "sacct", staging, [])
        con = connect(staging)
        texts = [r[0] for r in con.execute("SELECT text FROM records WHERE kind = 'sacct_job'").fetchall()]
        con.close()
    finally:
        release_staging(staging)
    assert len(texts) == 1 and "gb-r01-n01" not in texts[0]


def test_bad_bytes_nul_crlf_and_long_lines_survive_and_are_counted(bundle):
    log = bundle / "logs" / "syslog" / "gb-r12-n04.log"
    data = log.read_bytes()
    extra = (
        b"Nov 20 13:03:00 gb-r12-n04 kernel: caf\xc3\xa9 \xff\xfe bad "
        b"NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.\r\n"
        + b"Nov 20 13:03:01 gb-r12-n04 kernel: \x00 nul NVRM: Xid (PCI:0000:c1:00): 79, GPU has fallen off the bus.\n"
        + b"x" * 2_000_000
        + b"\n"
        + b"Nov 20 13:03:02 gb-r12-n04 kernel: truncated last NVRM: Xid (PCI:0000:c1:00): 154, x"
    )
    log.write_bytes(data + extra)
    got, lines = _collect(bundle, "syslog")
    cov = got.coverage
    assert cov.status == CoverageStatus.partial
    assert cov.details.lines_with_bad_bytes == 2 and cov.details.long_lines == 1
    mine = [x for x in lines if x[0] == "logs/syslog/gb-r12-n04.log" and "c1:00" in x[2]]
    assert len(mine) == 3
    assert "café" in mine[0][2] and "\ufffd" in mine[0][2] and not mine[0][2].endswith("\r")
    n_lines = len(data.split(b"\n")) - 1
    assert [x[1] for x in mine] == [n_lines + 1, n_lines + 2, n_lines + 4]
    assert str(mine[2][3]) == "2026-11-20 12:03:02"


def test_line_numbers_point_at_the_raw_line(bundle):
    got, lines = _collect(bundle, "app")
    raw = {}
    for path, lineno, text, *_ in lines:
        if path not in raw:
            raw[path] = (bundle / path).read_text().split("\n")
        assert raw[path][lineno - 1].rstrip("\r") == text


def test_continuation_lines_inherit_their_ranks_time(bundle):
    got, lines = _collect(bundle, "app")
    exc = [x for x in lines if "ncclUnhandledCudaError" in x[2]]
    assert exc and exc[0][4] == "inherited" and exc[0][5] == 14
    assert str(exc[0][3]).startswith("2026-11-20 12:02:43")


def test_symlink_outside_the_bundle_is_refused(bundle, tmp_path):
    outside = tmp_path / "secret.log"
    outside.write_text("Nov 20 13:00:00 h kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")
    os.symlink(outside, bundle / "logs" / "syslog" / "evil.log")
    got, lines = _collect(bundle, "syslog")
    assert any("evil.log" in r for r in got.coverage.details.refused)
    assert not any("evil" in x[0] for x in lines)


def test_a_path_is_inside_the_bundle_unless_a_link_or_dotdot_leads_out(tmp_path):
    """connectors/bundle._inside: what lies under the bundle's path with no link on the way is in
    (the bundle itself reached through a link included); a link is followed, `..` resolved."""
    from workload_attribution.connectors.bundle import _inside

    real = tmp_path / "real"
    (real / "logs" / "app").mkdir(parents=True)
    (real / "logs" / "app" / "h1.log").write_text("x\n")
    (tmp_path / "secret.log").write_text("x\n")
    via = tmp_path / "via"
    via.symlink_to(real)
    (real / "logs" / "app" / "same.log").symlink_to(real / "logs" / "app" / "h1.log")
    (real / "logs" / "app" / "out.log").symlink_to(tmp_path / "secret.log")
    (real / "logs" / "up").symlink_to(tmp_path)
    for bundle in (real, via):
        assert _inside(bundle, bundle / "logs" / "app" / "h1.log")
        assert _inside(bundle, bundle / "logs" / "app" / "absent.log")  # nothing to follow
        assert _inside(bundle, bundle / "logs" / "app" / "same.log")  # a link within the bundle
        assert not _inside(bundle, bundle / "logs" / "app" / "out.log")
        assert not _inside(bundle, bundle / "logs" / "up" / "secret.log")  # a folder linked out
        assert not _inside(bundle, bundle / "logs" / ".." / ".." / "secret.log")
        assert not _inside(bundle, tmp_path / "secret.log")  # not under the bundle's path at all


@pytest.mark.parametrize(
    "content,field",
    [
        (
            "cluster: c\nscheduler: slurm\njob_id: 1\nattempt: 0\nnodes: [a]\nstart: 2026-01-01T01:00:00Z\n"
            "end: 2026-01-01T00:00:00Z\nstate: FAILED\n",
            "end",
        ),
        (
            "cluster: c\nscheduler: sge\njob_id: 1\nattempt: 0\nnodes: [a]\nstart: 2026-01-01T00:00:00Z\n"
            "end: 2026-01-01T01:00:00Z\nstate: FAILED\n",
            "scheduler",
        ),
        ("cluster: [unclosed\n", "YAML"),
        ("- just a list\n", "mapping"),
    ],
)
def test_bad_attempt_yaml_gives_a_one_line_reason(tmp_path, content, field):
    (tmp_path / "attempt.yaml").write_text(content)
    with pytest.raises(BundleError) as err:
        load_scope(tmp_path)
    assert field in str(err.value) and "\n" not in str(err.value)


SCOPE = "cluster: c\nscheduler: slurm\njob_id: 1\nattempt: 0\nnodes: [a, b]\nstart: 2026-01-01T00:00:00Z\n"


@pytest.mark.parametrize(
    "tail,message",
    [
        ("end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: 1:0\n", "field 'exit_code': 1:0 is read by YAML 1.1"),
        ("end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: 2:15  # signal\n", '(exit_code: "2:15")'),
        ("end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: 1.5\n", "field 'exit_code': 1.5 is a float"),
        ("end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: true\n", "field 'exit_code': True is a bool"),
        ("end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: [1]\n", "a string or an integer"),
        ("end: 2025-12-31T23:00:00Z\nstate: FAILED\n", "field 'start/end': end (2025-12-31T23:00:00+00:00) is before"),
    ],
)
def test_attempt_yaml_is_strict_and_names_the_field(tmp_path, tail, message):
    (tmp_path / "attempt.yaml").write_text(SCOPE + tail)
    with pytest.raises(BundleError) as err:
        load_scope(tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "Value error" not in str(err.value) and "field 'attempt'" not in str(err.value)


@pytest.mark.parametrize("written,read", [("'1:0'", "1:0"), ("0:0", "0:0"), ('"137"', "137"), ("137", "137")])
def test_exit_codes_as_schedulers_write_them_are_read(tmp_path, written, read):
    (tmp_path / "attempt.yaml").write_text(SCOPE + f"end: 2026-01-01T01:00:00Z\nstate: FAILED\nexit_code: {written}\n")
    assert load_scope(tmp_path).exit_code == read


@pytest.mark.parametrize(
    "scheduler,state",
    [
        ("slurm", "CANCELLED by 0"),  # Slurm's state with its actor: the first word is the state
        ("slurm", "failed"),  # case aside
        ("kueue", "Finished"),  # the Workload's condition without its reason
        ("kueue", "Failed"),  # the Job's own condition
        ("pbs", "F"),
        ("lsf", "EXIT"),
        ("flux", "INACTIVE"),
        ("static", "NODE_FAIL"),
    ],
)
def test_each_scheduler_takes_the_states_of_its_own_table(tmp_path, scheduler, state):
    scope = SCOPE.replace("scheduler: slurm", f"scheduler: {scheduler}")
    if scheduler == "pbs":
        scope = scope.replace("job_id: 1\n", "job_id: 1.pbs01\n")
    (tmp_path / "attempt.yaml").write_text(scope + f"end: 2026-01-01T01:00:00Z\nstate: {state}\n")
    assert load_scope(tmp_path).state == state


@pytest.mark.parametrize("state", ["FAILD", "Finished", "LAUNCH_FAILED"])  # a typo, Kueue's word, a later Slurm's
def test_a_state_no_table_holds_is_read_not_refused(tmp_path, state):
    # the diagnosis notes it and the record and the evidence decide (tests/unit/test_state_words.py)
    (tmp_path / "attempt.yaml").write_text(SCOPE + f"end: 2026-01-01T01:00:00Z\nstate: {state}\n")
    scoped = scope_bundle(tmp_path)
    try:
        assert scoped.scope.state == state
        assert [n for n in scoped.notes if n.startswith("unknown state")] == [
            f"unknown state {state!r} (attempt.yaml): not a word of the slurm states table ("
            + ", ".join(get_scheduler("slurm").states.words())
            + "); it says nothing by itself: read as over and failed unless the record says otherwise, "
            "the record and the evidence decide"
        ]
    finally:
        release_staging(scoped.staging)


def test_missing_attempt_yaml(tmp_path):
    with pytest.raises(BundleError, match="no attempt.yaml"):
        load_scope(tmp_path)
