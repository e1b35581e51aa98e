"""Coverage records: one status ladder for every connector (connectors/coverage.py), typed details
whose JSON keeps the keys (and their order) diagnoses and the warehouse have always had."""

from __future__ import annotations

import json

import pytest

from tests.conftest import WORKED
from tests.helpers import diagnose
from workload_attribution.connectors.coverage import Cover, Tally, distrust_values, lose
from workload_attribution.connectors.text import LogFileDetails
from workload_attribution.contracts.models import Coverage, CoverageStatus, Diagnosis


@pytest.mark.parametrize(
    "tally, status",
    [
        (Tally(observations=5), "ok"),
        (Tally(), "ok"),  # nothing asked of it: a record of objects that were all there
        (Tally(absent=True, failed=True, observations=5), "unavailable"),
        (Tally(failed=True, read_nothing=True, unparsed=2), "error"),
        (Tally(read_nothing=True, unparsed=3, gaps=True), "empty"),  # nothing to read, whatever is missing
        (Tally(observations=5, unparsed=1), "partial"),
        (Tally(observations=5, gaps=True), "partial"),
        (Tally(none_in_scope=True, gaps=True), "partial"),  # what was read says nothing, and some is missing
        (Tally(none_in_scope=True), "empty"),
    ],
)
def test_one_ladder(tally, status):
    assert tally.status == status


def test_a_record_times_its_collection_and_keeps_its_evidence_files(tmp_path):
    cover = Cover("syslog", "files")
    got = cover.judged(Tally(observations=3), nodes=["n1"], paths={"n1.log": tmp_path / "n1.log"}, notes=["x"])
    assert got.coverage.status == CoverageStatus.ok and got.coverage.observations == 3 and got.coverage.nodes == ["n1"]
    assert got.files == {"n1.log": tmp_path / "n1.log"} and got.notes == ["x"]
    assert cover.outcome("timeout", "slow").coverage.status == CoverageStatus.timeout


def details(**overrides):
    fields = {
        "matched_lines": 1,
        "lines_with_bad_bytes": 0,
        "long_lines": 0,
        "truncated_bytes": 0,
        "missing_nodes": [],
        "refused": [],
        "not_read": [],
        "corrupt_archives": [],
        "blank_files": [],
    }
    return LogFileDetails(**{**fields, **overrides})


def test_stamps_out_of_range_are_lost_last_and_only_when_there_are_some():
    ok = Coverage(source="syslog", connector="bundle", status="ok", observations=4, details=details())
    assert "lines_with_time_out_of_range" not in json.loads(ok.model_dump_json())["details"]
    lose(ok, 2)
    doc = json.loads(ok.model_dump_json())
    assert (doc["status"], doc["unparsed"]) == ("partial", 2)
    assert list(doc["details"])[-2:] == ["outside_window", "lines_with_time_out_of_range"]
    assert doc["details"]["lines_with_time_out_of_range"] == 2


def test_quarantined_lines_and_non_finite_samples_are_named_last():
    c = Coverage(source="metrics", connector="bundle", status="ok", observations=4, details=details())
    lose(c, 0, impossible=1)
    distrust_values(c, 3, ['DCGM_FI_DEV_XID_ERRORS{Hostname="n1"}'])
    doc = json.loads(c.model_dump_json())
    assert (doc["status"], doc["unparsed"]) == ("partial", 1)
    assert list(doc["details"])[-3:] == ["lines_with_impossible_time", "non_finite_samples", "non_finite_series"]
    assert doc["details"]["non_finite_series"] == ['DCGM_FI_DEV_XID_ERRORS{Hostname="n1"}']


def test_a_connector_writes_only_its_own_keys_and_a_diagnosis_read_back_keeps_them():
    with pytest.raises(ValueError, match="extra"):
        details(lines=3)
    d = diagnose(WORKED)
    again = Diagnosis.model_validate_json(d.model_dump_json())
    assert again.model_dump_json() == d.model_dump_json()
    syslog = {c.source: c for c in again.coverage}["syslog"]
    assert syslog.details.matched_lines == {c.source: c for c in d.coverage}["syslog"].details.matched_lines


# The details each bundle source has always written, key for key, in this order (the diagnosis JSON).
BUNDLE_DETAILS = {
    "app": [
        "matched_lines",
        "lines_with_bad_bytes",
        "long_lines",
        "truncated_bytes",
        "missing_nodes",
        "refused",
        "not_read",
        "corrupt_archives",
        "blank_files",
        "outside_window",
    ],
    "sacct": ["slurm_release"],
    "metrics": ["samples_without_value_or_time", "duplicate_samples", "lines_with_bad_bytes"],
    "topology": ["hosts_outside_allocation", "entries_not_read"],
    "kueue": [],  # skipped: a Slurm job's bundle
    "scheduler_log": [],  # unavailable
}


def test_the_bundle_sources_details_keep_their_keys():
    doc = json.loads(diagnose(WORKED).model_dump_json())
    got = {c["source"]: list(c["details"]) for c in doc["coverage"]}
    for source, keys in BUNDLE_DETAILS.items():
        assert got[source] == keys, source
