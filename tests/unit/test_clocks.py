"""Clocks are checked, not trusted: a host's offset from the collectives every host saw time out."""

from datetime import datetime, timedelta

from workload_attribution.staging.clocks import check_clocks, estimate_offsets

T0 = datetime(2026, 11, 20, 12, 12, 41)
WATCHDOG = "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)"


def _line(con, node: str, t: datetime, body: str, quality: str = "own") -> None:
    con.execute(
        "INSERT INTO log_lines (source, node, time, time_quality, body, time_lo, time_hi) "
        "VALUES ('app', ?, ?, ?, ?, ?, ?)",
        [node, t, quality, body, t, t],
    )


def _job(con, offsets: dict[str, float], seqs=(870917,)) -> None:
    for node, off in offsets.items():
        for i, seq in enumerate(seqs):
            _line(con, node, T0 + timedelta(seconds=off + 700 * i), WATCHDOG.format(r=1, seq=seq))


def test_a_host_ahead_is_found_and_its_lines_corrected(staging):
    _job(staging, {"n1": 0.0, "n2": 0.4, "n3": 0.8, "n4": 90.3}, seqs=(1, 2))
    _line(staging, "n4", T0 - timedelta(minutes=10), "NVRM: Xid 149")
    (off,) = check_clocks(staging, 30.0)
    assert (off.node, off.anchors, off.firm) == ("n4", 2, True) and 89 < off.offset_s < 91
    moved = staging.execute("SELECT time FROM log_lines WHERE node = 'n4' AND body LIKE 'NVRM%'").fetchone()[0]
    assert abs((T0 - timedelta(minutes=10) - timedelta(seconds=off.offset_s) - moved).total_seconds()) < 1e-3


def test_clocks_within_the_tolerance_are_left_alone(staging):
    _job(staging, {"n1": 0.0, "n2": 2.0, "n3": 25.0})
    assert check_clocks(staging, 30.0) == []
    assert [round(o.offset_s) for o in estimate_offsets(staging)] == [-2, 0, 23]


def test_two_hosts_cannot_tell_which_clock_is_off(staging):
    _job(staging, {"n1": 0.0, "n2": 300.0})
    assert estimate_offsets(staging) == []


def test_offsets_that_disagree_are_named_not_corrected(staging):
    # n3 is 60 s ahead at one collective and 200 s at the next: no firm estimate
    _job(staging, {"n1": 0.0, "n2": 0.0}, seqs=(1, 2))
    _line(staging, "n3", T0 + timedelta(seconds=60), WATCHDOG.format(r=9, seq=1))
    _line(staging, "n3", T0 + timedelta(seconds=900), WATCHDOG.format(r=9, seq=2))
    (off,) = check_clocks(staging, 30.0)
    assert (off.node, off.firm) == ("n3", False)
    assert staging.execute("SELECT min(time) FROM log_lines WHERE node = 'n3'").fetchone()[0] == T0 + timedelta(
        seconds=60
    )
