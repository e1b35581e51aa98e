"""The evidence archive on real S3 (SeaweedFS, tests/services/seaweedfs.py): the credentials and the
endpoint reach it as AWS_* variables only; attempts are archived there, replayed from there by
`rules impact`, and pruned there."""

import json
import shutil

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.services.seaweedfs import SeaweedS3
from workload_attribution.cli import main
from workload_attribution.rules.pack import RULES_DIR
from workload_attribution.warehouse.archive import Archive
from workload_attribution.warehouse.objects import open_store


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


@pytest.fixture
def aws(s3, monkeypatch):
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3


def test_objects_put_get_list_delete(aws):
    store = open_store(f"s3://{aws.bucket}/objects-test")
    store.put("a/one.txt", b"1")
    store.put("a/b/two.txt", b"22")
    store.put("c.txt", b"333")
    assert store.get("a/b/two.txt") == b"22"
    assert sorted((o.key, o.size) for o in store.list("a/")) == [("a/b/two.txt", 2), ("a/one.txt", 1)]
    assert len(list(store.list(""))) == 3
    store.delete("a/one.txt")
    store.delete("a/one.txt")  # gone already: nothing to do
    with pytest.raises(KeyError):
        store.get("a/one.txt")
    other = open_store(f"s3://{aws.bucket}/objects-test-2")  # a prefix that starts alike is another archive
    other.put("x", b"x")
    assert [o.key for o in store.list("")] == ["a/b/two.txt", "c.txt"]


def test_many_objects_are_listed_past_a_page(aws):
    store = open_store(f"s3://{aws.bucket}/paged")
    for i in range(1005):  # ListObjectsV2 answers 1,000 at most: the continuation token carries on
        store.put(f"k/{i:05d}", b"")
    assert len(list(store.list("k/"))) == 1005


def test_diagnoses_archive_to_s3_and_rules_impact_replays_from_there(aws, tmp_path, capsys, monkeypatch):
    location = f"s3://{aws.bucket}/archive-e2e"
    monkeypatch.setenv("ATTRIBUTION_ARCHIVE__LOCATION", location)
    wh = tmp_path / "w.duckdb"
    bundles = [str(WORKED), str(EXAMPLES / "xid48_dbe-1-0"), str(EXAMPLES / "cuda_oom_one_rank-1-0")]
    assert main(["diagnose", *bundles, "--warehouse", str(wh), "--json", "-q"]) == 0
    capsys.readouterr()
    archive = Archive(location)
    assert archive.usage()[:2] == (3, 3)
    assert not (tmp_path / "w-archive").exists()  # nothing beside the file: the archive is in the bucket
    cand = tmp_path / "candidate"
    shutil.copytree(RULES_DIR, cand, ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.sql", "*.md"))
    shutil.copytree(RULES_DIR / "python", cand / "python", dirs_exist_ok=True)
    rule = cand / "extract" / "xid-driver-report.yaml"
    rule.write_text(
        rule.read_text().replace("FROM m WHERE g['code'] != ''", "FROM m WHERE g['code'] NOT IN ('', '48')")
    )
    code = main(["rules", "impact", "--candidate", str(cand), "--warehouse", str(wh), "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["archive"] == location and report["attempts"] == 3 and not report["failed"]
    assert [(c["job_id"], c["old"]["root_symptom"]) for c in report["changed"]] == [("5419414", "xid_48")]
    assert main(["archive", "prune", "--warehouse", str(wh), "--max-total-gib", "0"]) == 0
    assert "3 attempt(s) and 3 evidence object(s) removed" in capsys.readouterr().out
    assert archive.usage() == (0, 0, 0)


def test_a_wrong_secret_is_said_in_the_diagnosis_not_fatal(aws, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATTRIBUTION_ARCHIVE__LOCATION", f"s3://{aws.bucket}/denied")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    assert main(["diagnose", str(WORKED), "--warehouse", str(tmp_path / "w.duckdb"), "--json", "-q"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["terminal_state"] == "hardware_failure"
    assert any(
        n.startswith(f"evidence not archived (s3://{aws.bucket}/denied): ") and "HTTP 403" in n for n in d["notes"]
    )
