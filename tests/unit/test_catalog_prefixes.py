"""Prefix-blind matching: a catalog message is the same message whatever a launcher, a logger, a
container runtime or syslog put in front of it. Every catalog row's verbatim test line, behind
each of these real prefixes (and, drawn by hypothesis, two of them nested at a random time), must
pass the scan's pre-filter and give the row's symptom on the same host, at the time the prefixed
line states (the prefix's when it carries one, else the line's own)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workload_attribution.rules.catalog import RECORD_SOURCES, CatalogRow
from workload_attribution.rules.claims import Probe, claims
from workload_attribution.rules.pack import Pack, load_pack


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def _docker(line: str, t: datetime) -> str:
    # Docker's json-file driver (Go's encoder): UTF-8 kept, < > & escaped, a newline ending the log
    log = json.dumps(line + "\n", ensure_ascii=False)
    log = log.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return '{"log":' + log + ',"stream":"stderr","time":"' + t.strftime("%Y-%m-%dT%H:%M:%S.%f") + '123Z"}'


@dataclass(frozen=True)
class Prefix:
    name: str
    add: Callable[[str, datetime], str]
    timed: bool  # the prefix states a time (which then is the line's)
    stamp: Callable[[datetime], datetime] = lambda t: t  # the time it states, as it writes it


PREFIXES = [
    Prefix(
        "tensorflow/absl",
        lambda s, t: f"{t:%Y-%m-%d %H:%M:%S.%f}: E tensorflow/core/framework/op_kernel.cc:1828] {s}",
        True,
    ),
    Prefix("glog", lambda s, t: f"E{t:%m%d %H:%M:%S.%f} 2361 coordination_service_agent.cc:745] {s}", True),
    Prefix(
        "mmengine",
        lambda s, t: f"{t:%m/%d %H:%M:%S} - mmengine - ERROR - {s}",
        True,
        lambda t: t.replace(microsecond=0),
    ),
    Prefix(
        "metaflow",
        lambda s, t: f"{t:%Y-%m-%d %H:%M:%S.%f}"[:-3] + f" [1646/train/7 (pid 12345)] {s}",
        True,
        lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000),
    ),
    Prefix(
        "python logging",
        lambda s, t: f"{t:%Y-%m-%d %H:%M:%S},417 - trainer - ERROR - {s}",
        True,
        lambda t: t.replace(microsecond=417000),
    ),
    Prefix("ray", lambda s, t: f"(RayTrainWorker pid=2361, ip=10.0.2.15) {s}", False),
    Prefix("torchrun rank", lambda s, t: f"[rank3]:{s}", False),
    Prefix("torchrun tee", lambda s, t: f"[default3]:{s}", False),
    Prefix("srun --label", lambda s, t: f"3: {s}", False),
    Prefix("open mpi tag", lambda s, t: f"[1,0]<stderr>:{s}", False),
    Prefix("docker json", _docker, True),
    Prefix("cri", lambda s, t: f"{_iso(t)} stderr F {s}", True),
    Prefix("kubectl timestamps", lambda s, t: f"{_iso(t)} {s}", True),
    Prefix(
        "syslog", lambda s, t: f"{t:%b %d %H:%M:%S} n1 python3[20311]: {s}", True, lambda t: t.replace(microsecond=0)
    ),
    Prefix(
        "journald short-iso",
        lambda s, t: f"{t:%Y-%m-%dT%H:%M:%S}+0000 n1 kernel: {s}",
        True,
        lambda t: t.replace(microsecond=0),
    ),
    Prefix("rfc5424", lambda s, t: f"<30>1 {_iso(t)} n1 trainer 2361 - - {s}", True),
]
T0 = datetime(2026, 11, 20, 10, 0, 1, 123456)


@pytest.fixture(scope="module")
def pack() -> Pack:
    return load_pack()


def _rows(pack: Pack) -> list[CatalogRow]:
    return [r for r in pack.catalog if r.sources[0] not in RECORD_SOURCES]


def _expected_time(prefix: Prefix, own: datetime | None, t: datetime) -> datetime | None:
    if not prefix.timed:
        return own
    return prefix.stamp(t)


def _check(pack: Pack, rows: list[CatalogRow], cases: list[tuple[CatalogRow, Prefix, str, datetime]]) -> None:
    """Each case's prefixed line kept by the scan and read as its row's bare line is."""
    bare = claims(pack, [Probe(r.sources[0], r.test_line) for r in rows], [r for r in pack.rules if r.catalog])
    own = {
        r.id: next((e["time"] for e in ev if e["symptom"] == r.symptom), "missing") for r, ev in zip(rows, bare.events)
    }
    got = claims(pack, [Probe(r.sources[0], text) for r, _, text, _ in cases], [r for r in pack.rules if r.catalog])
    wrong = []
    for (row, prefix, text, t), events in zip(cases, got.events, strict=True):
        literals = pack.prefilter(row.sources[0])
        hit = [e for e in events if e["symptom"] == row.symptom]
        expected = _expected_time(prefix, own[row.id], t)
        if not any(lit in text for lit in literals):
            wrong.append(f"{row.id} behind {prefix.name}: not kept by the scan")
        elif not hit or hit[0]["node"] != "n1" or hit[0]["time"] != expected:
            seen = [(e["symptom"], e["node"], e["time"]) for e in events]
            wrong.append(f"{row.id} behind {prefix.name}: {seen}, want time {expected}")
    assert not wrong, f"{len(wrong)} of {len(cases)}:\n" + "\n".join(wrong[:2000])


def test_every_row_behind_every_prefix(pack: Pack) -> None:
    rows = _rows(pack)
    assert len(rows) >= 300 and len(PREFIXES) >= 12
    _check(pack, rows, [(r, p, p.add(r.test_line, T0), T0) for r in rows for p in PREFIXES])


def test_a_prefix_changes_no_line_of_the_bare_rows(pack: Pack) -> None:
    """Without any prefix the rows give their symptom (the base case of the property)."""
    rows = _rows(pack)
    got = claims(pack, [Probe(r.sources[0], r.test_line) for r in rows], [r for r in pack.rules if r.catalog])
    assert [r.id for r, ev in zip(rows, got.events) if not any(e["symptom"] == r.symptom for e in ev)] == []


# a launcher's label inside a runtime's or collector's envelope: the combinations real logs stack
INNER = [p for p in PREFIXES if not p.timed]
OUTER = [
    p
    for p in PREFIXES
    if p.timed and p.name not in ("mmengine", "python logging", "tensorflow/absl", "glog", "metaflow")
]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=40, max_size=40),
    outer=st.sampled_from(OUTER),
    inner=st.sampled_from(INNER),
    seconds=st.integers(min_value=-150 * 86400, max_value=150 * 86400),
)
def test_nested_prefixes_at_any_time(pack: Pack, picks: list[int], outer: Prefix, inner: Prefix, seconds: int) -> None:
    rows = _rows(pack)
    t = datetime(2026, 6, 1) + timedelta(seconds=seconds, microseconds=123456)  # year-less forms: near the attempt
    chosen = [rows[i % len(rows)] for i in picks]
    both = Prefix(f"{outer.name} + {inner.name}", lambda s, tt: outer.add(inner.add(s, tt), tt), True, outer.stamp)
    _check(pack, rows, [(r, both, both.add(r.test_line, t), t) for r in chosen])
