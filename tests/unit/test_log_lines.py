"""Prefix grammar and timestamps: every form of the bundle spec, zones, year-less forms, ranks."""

from datetime import datetime

import pytest

REF = datetime(2026, 11, 20, 11, 0, 0)  # attempt in Europe/Berlin (UTC+1 in November)

CASES = [
    # (line, expected UTC time or None, rank, body starts with)
    ("2026-11-20T10:05:01.123456+00:00 node-02 kernel: NVRM: x", "2026-11-20 10:05:01.123456", None, "node-02 kernel"),
    ("2026-11-20T10:05:01+0000 node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02"),
    ("2026-11-20T11:05:01+01:00 node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02"),
    ("2026-11-20T10:05:01Z node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02"),
    ("Nov 20 11:05:01 node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02"),
    ("Nov  2 11:05:01 node-02 kernel: x", "2026-11-02 10:05:01", None, "node-02"),
    ("Nov 20 11:05:01.123456 node-02 kernel: x", "2026-11-20 10:05:01.123456", None, "node-02"),
    ("[Fri Nov 20 11:05:01 2026] NVRM: x", "2026-11-20 10:05:01", None, "NVRM"),
    ("2026-11-20 11:05:01,123 ERROR x", "2026-11-20 10:05:01.123", None, "ERROR"),
    ("[rank3]:[E1120 11:05:01.123456789 ProcessGroupNCCL.cpp:607] x", "2026-11-20 10:05:01.123457", 3, "[E1120"),
    ("[Nov 20 2026 11:05:01] [ERROR] [tid 841] x", "2026-11-20 10:05:01", None, "[ERROR]"),
    ("[2026-11-20 11:05:01] node-02:3468:3905 [4] NCCL WARN x", "2026-11-20 10:05:01", None, "node-02:3468"),
    ("2026-11-20T10:05:01.770Z [default4]:h:1:2 [4] NCCL WARN", "2026-11-20 10:05:01.77", 4, "h:1:2"),
    ("2026-11-20T10:05:01.570Z 12: Traceback (most recent call last):", "2026-11-20 10:05:01.57", 12, "Traceback"),
    ("[default0]:2026-11-20 11:05:01,785 INFO iteration", "2026-11-20 10:05:01.785", 0, "INFO"),
    ("10: Traceback (most recent call last):", None, 10, "Traceback"),
    ("E1120 11:05:01.690030210 139185760270418 torch/x.py:874] failed", "2026-11-20 10:05:01.69003", None, "E1120"),
    ("[2026-11-20T11:05:01.433] error: Nodes n3 not responding", "2026-11-20 10:05:01.433", None, "error: Nodes"),
    ("plain continuation line", None, None, "plain"),
    ("Feb 30 10:00:00 host impossible date", None, None, "host"),
    ("", None, None, ""),
]


@pytest.mark.parametrize("line,expected,rank,body", CASES)
def test_prefix_grammar(staging, line, expected, rank, body):
    got = staging.execute("SELECT parse_log_line(?, 'Europe/Berlin', ?)", [line, REF]).fetchone()[0]
    assert (str(got["ts"]) if got["ts"] else None) == (
        expected if expected is None else str(datetime.fromisoformat(expected))
    )
    assert got["rank"] == rank
    assert got["body"].startswith(body)


def test_yearless_takes_the_year_nearest_the_attempt(staging):
    # A 'Dec 31' line in a January attempt belongs to the year before; 'Jan 2' to the attempt's year.
    jan = datetime(2026, 1, 2, 12, 0, 0)
    dec = staging.execute("SELECT log_time('Dec 31 23:59:00 h k: x', 'UTC', ?)", [jan]).fetchone()[0]
    assert dec == datetime(2025, 12, 31, 23, 59, 0)
    same = staging.execute("SELECT log_time('Jan  2 08:00:00 h k: x', 'UTC', ?)", [jan]).fetchone()[0]
    assert same == datetime(2026, 1, 2, 8, 0, 0)
    glog = staging.execute("SELECT log_time('E1231 23:00:00.5 123 f.cc:1] x', 'UTC', ?)", [jan]).fetchone()[0]
    assert glog == datetime(2025, 12, 31, 23, 0, 0, 500000)


def test_zone_less_forms_use_the_attempt_zone_with_dst(staging):
    summer = datetime(2026, 7, 1, 12, 0, 0)
    t = staging.execute("SELECT log_time('2026-07-01 14:00:00,000 INFO x', 'Europe/Berlin', ?)", [summer]).fetchone()[0]
    assert t == datetime(2026, 7, 1, 12, 0, 0)  # CEST is UTC+2
    t = staging.execute(
        "SELECT log_time('2026-07-01 14:00:00,000 INFO x', 'America/Los_Angeles', ?)", [summer]
    ).fetchone()[0]
    assert t == datetime(2026, 7, 1, 21, 0, 0)
