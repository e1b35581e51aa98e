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


def _spelling_by_scan(name, allocation):
    """allocated_spelling as it was first written: every allocated host compared in turn."""
    from workload_attribution.contracts.identity import host_key

    key = host_key(name or "")
    if not key:
        return None
    exact = [n for n in allocation if host_key(n) == key]
    if exact:
        return exact[0] if len(exact) == 1 else None
    short = key.split(".", 1)[0]
    matches = [
        n for n in allocation if ("." not in key and host_key(n).split(".", 1)[0] == key) or host_key(n) == short
    ]
    return matches[0] if len(matches) == 1 else None


def test_allocated_spelling_by_index_equals_comparing_every_host():
    """The index by name and short name answers as comparing the name with every allocated host:
    duplicates, two domains, case, trailing dots, a short and a qualified spelling of one host."""
    import random

    rng = random.Random(7)
    parts = ["n1", "N1", "n2", "gb-r1-n01", "x1"]
    domains = ["", ".a.example", ".b.example", ".A.example.", "."]
    for _ in range(300):
        allocation = [rng.choice(parts) + rng.choice(domains) for _ in range(rng.randint(0, 6))]
        for name in [p + d for p in parts for d in domains] + ["", " n1 ", "n1.a"]:
            assert allocated_spelling(name, allocation) == _spelling_by_scan(name, allocation), (name, allocation)
