"""The evidence archive: each diagnosed attempt's staged evidence kept beside the warehouse,
compressed and named by its digest, with what a replay needs; replayed, it gives the diagnosis
back; retention by age and total size."""

import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.conftest import EXAMPLES, WORKED
from tests.helpers import diagnose
from workload_attribution.cli import main
from workload_attribution.rules.engine import Settings
from workload_attribution.rules.pack import default_pack
from workload_attribution.tasks.replay import PackDatabase
from workload_attribution.warehouse.archive import (
    Archive,
    ArchiveCorrupt,
    ArchiveSettings,
    Outcome,
    evidence_key,
    location_for,
)
from workload_attribution.warehouse.objects import LocalObjects, S3Objects, open_store

BUNDLES = sorted(p for p in EXAMPLES.iterdir() if (p / "attempt.yaml").is_file()) + [WORKED]


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    wh = tmp_path_factory.mktemp("archive") / "w.duckdb"
    live = {d.diagnosis_id: d for d in (diagnose(b, warehouse=wh, archive=True) for b in BUNDLES)}
    return wh, Archive(str(wh.with_name("w-archive"))), live


def test_every_diagnosed_attempt_is_archived_beside_the_warehouse(archived):
    wh, archive, live = archived
    assert str(archive.store) == str(wh.parent / "w-archive")
    manifests = {e.diagnosis_id: archive.read_manifest(e.key) for e in archive.entries()}
    assert set(manifests) == set(live)
    for m in manifests.values():
        d = live[m.diagnosis_id]
        assert (m.attempt, m.rules_version) == (d.attempt, d.rules.version)
        # as JSON: read back, a connector's details model is the contract's base model with its keys
        assert [c.model_dump(mode="json") for c in m.coverage] == [c.model_dump(mode="json") for c in d.coverage]
        assert m.outcome == Outcome.of(d) and set(m.checkpoints) == {"early", "final", "roles"}
        assert m.rows["log_lines"] + m.rows["samples"] + m.rows["records"] > 0
        assert 0 < m.stored_bytes < m.evidence_bytes  # compressed
        assert archive.evidence(m)  # and its digest checks


@pytest.mark.parametrize("start", ["extract", "early", "final", "roles"])
def test_an_archived_attempt_replays_to_its_diagnosis(archived, start):
    """From the evidence, or from the state at a later point (the final phase's once its verdict is
    chosen among them): the same verdict, root, hosts,
    action and confidence as the diagnosis the attempt got."""
    _, archive, live = archived
    db = PackDatabase(default_pack(), Settings())
    try:
        for e in archive.entries():
            m = archive.read_manifest(e.key)
            db.load(m, archive.evidence(m).splitlines(), start)
            assert db.diagnose(m, start) == Outcome.of(live[m.diagnosis_id]), m.attempt.job_id
    finally:
        db.close()


def test_evidence_is_named_by_its_digest_and_stored_once(archived, tmp_path):
    _, archive, _ = archived
    e = next(archive.entries())
    m = archive.read_manifest(e.key)
    copy = Archive(str(tmp_path / "copy"))
    body = archive.store.get(evidence_key(m.digest))
    copy.put(m, body)
    twin = m.model_copy(update={"diagnosis_id": "another-attempt"})
    copy.put(twin, body)
    assert [o.key for o in copy.store.list("evidence/")] == [evidence_key(m.digest)]
    assert sorted(x.diagnosis_id for x in copy.entries()) == sorted([m.diagnosis_id, "another-attempt"])
    changed = m.model_copy(update={"digest": "0" * 64})
    copy.put(changed, body)  # the attempt again, other evidence: its manifest replaces the earlier one
    assert [x.digest for x in copy.entries() if x.diagnosis_id == m.diagnosis_id] == ["0" * 64]
    with pytest.raises(ArchiveCorrupt, match="does not match its digest"):
        copy.evidence(changed)


def test_prune_by_age_then_by_size_then_unnamed_evidence(archived, tmp_path):
    _, archive, _ = archived
    copy = Archive(str(tmp_path / "pruned"))
    entries = list(archive.entries())
    for e in entries:
        m = archive.read_manifest(e.key)
        copy.put(m, archive.store.get(evidence_key(m.digest)))
    now = time.time()
    for i, e in enumerate(copy.entries()):  # archived one day apart, the first 20 days ago
        os.utime(tmp_path / "pruned" / e.key, (now - (20 - i) * 86400, now - (20 - i) * 86400))
    attempts, objects, total = copy.usage()
    assert attempts == objects == len(entries)
    aged = copy.prune(timedelta(days=15.5), 10 * total, datetime.now(timezone.utc))
    assert len(aged.removed) == 5 and aged.evidence_removed == 5 and aged.kept == len(entries) - 5
    left = copy.usage()[2]
    sized = copy.prune(timedelta(days=365), left // 2)
    assert sized.bytes_kept <= left // 2 < sized.bytes_kept + sized.bytes_freed
    oldest_kept = min(e.archived_at for e in copy.entries())
    assert all(e.archived_at <= oldest_kept for e in sized.removed)  # the oldest went first
    assert copy.usage() == (sized.kept, sized.kept, sized.bytes_kept)


def test_archive_prune_and_usage_on_the_command_line(archived, tmp_path, capsys):
    wh, archive, _ = archived
    assert main(["archive", "usage", "--warehouse", str(wh)]) == 0
    attempts, _, size = archive.usage()
    said = capsys.readouterr().out
    assert said.startswith(f"archive {archive}: {len(BUNDLES)} attempt(s), ") and attempts == len(BUNDLES)
    assert said.rstrip().endswith(f"{size // attempts / 1024:.1f} KiB an attempt")
    other = tmp_path / "o.duckdb"
    diagnose(WORKED, warehouse=other, archive=True)
    assert main(["archive", "prune", "--warehouse", str(other), "--max-total-gib", "0"]) == 0
    assert "1 attempt(s) and 1 evidence object(s) removed" in capsys.readouterr().out
    assert Archive(str(tmp_path / "o-archive")).usage() == (0, 0, 0)


def test_an_attempt_too_large_to_archive_says_so(tmp_path):
    from workload_attribution.contracts.identity import Target
    from workload_attribution.tasks.archiving import archive_attempt
    from workload_attribution.tasks.steps import drop_staging, scope_attempt

    d = diagnose(WORKED)
    scoped = scope_attempt(Target(bundle=str(WORKED)))
    try:
        note = archive_attempt(scoped.staging, d, Outcome.of(d), str(tmp_path / "a"), default_pack(), Settings(), 2**10)
    finally:
        drop_staging(scoped)
    assert note == "evidence not archived: its staged evidence passes 0.000976562 MiB (archive.max_attempt_mib)"
    assert Archive(str(tmp_path / "a")).usage() == (0, 0, 0)


def test_where_the_archive_lives():
    s = ArchiveSettings()
    assert location_for("/var/lib/a/warehouse.duckdb", s) == "/var/lib/a/warehouse-archive"
    lake = "ducklake+postgres://u@db:5432/lake?data_path=s3://bucket/lake/"
    assert location_for(lake, s) == "s3://bucket/lake/archive"
    assert location_for("/w.duckdb", ArchiveSettings(location="s3://b/x")) == "s3://b/x"
    assert location_for("/w.duckdb", ArchiveSettings(enabled=False)) is None and location_for("", s) is None
    assert isinstance(open_store("/tmp/x"), LocalObjects)


def test_an_s3_archive_needs_the_aws_variables(monkeypatch):
    from workload_attribution.contracts.errors import BadInput

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(BadInput, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_store("s3://bucket/prefix")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    store = open_store("s3://bucket/prefix")
    assert (
        isinstance(store, S3Objects) and store._url("a/b")[0] == "https://bucket.s3.eu-west-1.amazonaws.com/prefix/a/b"
    )


def test_no_warehouse_no_archive(tmp_path):
    d = diagnose(WORKED, archive=True)
    assert not any(n.startswith("evidence not archived") for n in d.notes)
    assert not list(tmp_path.iterdir())


def test_a_packs_prefix_digests_are_computed_once_and_are_its_own():
    """The archive's checkpoints are named by the pack's prefix digests: a worker's one pack is
    digested once, and another pack (another object, other rules) gets its own digests."""
    from workload_attribution.rules.diff import prefix_digest
    from workload_attribution.tasks import archiving
    from workload_attribution.warehouse.archive import settings_dict

    pack, given = default_pack(), settings_dict(Settings())
    first = {p: archiving._prefix(pack, p, given) for p in archiving.KEPT}
    assert first == {p: prefix_digest(pack, p, given) for p in archiving.KEPT}
    assert {p: archiving._prefix(pack, p, given) for p in archiving.KEPT} == first
    other = pack.model_copy(update={"rules": pack.rules[1:]})  # same path and version, a rule fewer
    assert archiving._prefix(other, "roles", given) == prefix_digest(other, "roles", given) != first["roles"]
    assert archiving._prefix(pack, "roles", {**given, "x": 1}) != first["roles"]


@pytest.mark.parametrize("archived", [True, False])
def test_the_rules_state_is_kept_at_each_point_only_for_an_attempt_to_archive(archived):
    """The state at each point of the rules' run is what an archive's checkpoints hold: made while the
    rules run when the attempt will be archived, and not at all when nothing will read it."""
    from workload_attribution.contracts.identity import Target
    from workload_attribution.staging.database import connected
    from workload_attribution.tasks import steps
    from workload_attribution.tasks.archiving import KEPT, SCHEMA

    pack = default_pack()
    scoped = steps.scope_attempt(Target(bundle=str(WORKED)))
    try:
        results = [steps.collect_source(scoped, source, pack) for source in scoped.sources]
        coverage = steps.normalize_collected(scoped, results)
        d = steps.attribute(scoped, coverage, pack, archived=archived)
        with connected(scoped.staging) as con:
            found = con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = ?", [SCHEMA]).fetchall()
        kept = {r[0] for r in found}
    finally:
        steps.drop_staging(scoped)
    assert d.root_cause is not None and d.root_cause.node == "gb-r12-n04"  # the worked example's root either way
    expected = {f"{table}_{point}" for point, tables in KEPT.items() for table in tables}
    assert kept == (expected if archived else set())


def test_the_story_keeps_the_rules_state_only_where_the_attempt_is_archived(tmp_path, monkeypatch):
    """The story tells the rules' run whether its attempt will be archived: with a warehouse and its
    archive, yes; without a warehouse, or with the archive off, no."""
    from tests.helpers import diagnose
    from workload_attribution.tasks import steps

    told = []
    attribute = steps.attribute

    def spy(*args, **kwargs):
        told.append(args[5] if len(args) > 5 else kwargs.get("archived", True))
        return attribute(*args, **kwargs)

    monkeypatch.setattr(steps, "attribute", spy)
    diagnose(WORKED, warehouse=tmp_path / "w.duckdb", archive=True)
    diagnose(WORKED, warehouse=tmp_path / "w.duckdb", archive=False)
    diagnose(WORKED)
    assert told == [True, False, False]
