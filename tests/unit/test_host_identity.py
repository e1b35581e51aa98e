"""One identity per host: names compared as DNS compares them, reported in the allocation's spelling."""

import pytest

from workload_attribution.contracts.identity import allocated_spelling
from workload_attribution.staging.hosts import spell_as_allocated

ALLOCATION = ["gb-r12-n01", "gb-r12-n02", "node7.eos.internal", "x1.a.example", "x1.b.example"]


@pytest.mark.parametrize(
    "name,spelt",
    [
        ("gb-r12-n01", "gb-r12-n01"),
        ("GB-R12-N01", "gb-r12-n01"),  # case-insensitive
        ("gb-r12-n01.", "gb-r12-n01"),  # the root's trailing dot
        ("gb-r12-n01.eos.internal", "gb-r12-n01"),  # a FQDN against the allocation's short name
        ("NODE7", "node7.eos.internal"),  # a short name against the allocation's FQDN
        ("node7.eos.internal.", "node7.eos.internal"),
        ("node7.other.domain", None),  # both qualified, another domain: another host
        ("x1", None),  # the short name of two allocated hosts decides nothing
        ("gb-r12-n03", None),  # outside the allocation: stays as written
        ("", None),
        (None, None),
    ],
)
def test_allocated_spelling(name, spelt):
    assert allocated_spelling(name, ALLOCATION) == spelt


def test_staged_names_take_the_allocations_spelling(staging):
    staging.execute(
        "INSERT INTO source_files (file_id, source, connector, node, path) VALUES (1, 'syslog', 'b', 'GB-R12-N01', 'p')"
    )
    staging.execute(
        "INSERT INTO samples (obs_id, source, connector, node, metric) VALUES (1, 'metrics', 'b', 'gb-r12-n02.', 'm'), "
        "(2, 'metrics', 'b', 'gb-r12-n99', 'm')"
    )
    renamed = spell_as_allocated(staging, ALLOCATION)
    assert renamed == {"GB-R12-N01": "gb-r12-n01", "gb-r12-n02.": "gb-r12-n02"}
    assert staging.execute("SELECT node FROM source_files").fetchall() == [("gb-r12-n01",)]
    assert sorted(staging.execute("SELECT node FROM samples").fetchall()) == [("gb-r12-n02",), ("gb-r12-n99",)]
