"""Log files as real collectors leave them: rotated and compressed files, corrupt archives; the time
interval of lines that carry no time of their own, and what it means for ordering root candidates.
(The prefix and timestamp grammar itself is in test_log_lines.py and test_properties.py.)"""

from __future__ import annotations

import gzip
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import zstandard

from tests.conftest import WORKED
from tests.helpers import collect_bundle, diagnose
from workload_attribution.connectors.bundle import _node_of, load_scope
from workload_attribution.contracts.models import CoverageStatus
from workload_attribution.rules.engine import Settings, prepare
from workload_attribution.rules.pack import default_pack
from workload_attribution.staging.attempt import create_staging
from workload_attribution.staging.database import connect, release_staging
from workload_attribution.staging.files import plain_text
from workload_attribution.staging.lines import Line, stage_lines
from workload_attribution.staging.normalize import normalize


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


# ---- file names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,host",
    [
        ("node03.log", "node03"),
        ("node03.txt", "node03"),
        ("node03.log.1", "node03"),
        ("node03.log.12", "node03"),
        ("node03.log.gz", "node03"),
        ("node03.log.2.gz", "node03"),
        ("node03.log-20261119.gz", "node03"),  # logrotate dateext
        ("node03.log.1.zst", "node03"),
        ("node03.gz", "node03"),
        ("node03.zst", "node03"),
        ("gb-r12-n04.cluster.local.log.3.gz", "gb-r12-n04.cluster.local"),
        ("10.0.0.1.log.gz", "10.0.0.1"),
        ("node03.out", "node03"),
        ("node03", "node03"),
    ],
)
def test_log_file_names_give_the_host(name, host):
    assert _node_of(Path("logs/syslog") / name) == host


# ---- rotated and compressed files ------------------------------------------------------------------


def _compress_syslogs(bundle: Path) -> None:
    """The worked example's syslogs as a collector may leave them: n04 rotated (older half plain in
    .log.1, the rest, with the XID 149 lines, gzipped), n05 zstd-compressed, n06 an old gzipped rotation."""
    d = bundle / "logs" / "syslog"
    lines = (d / "gb-r12-n04.log").read_bytes().split(b"\n")
    (d / "gb-r12-n04.log.1").write_bytes(b"\n".join(lines[:10]) + b"\n")
    (d / "gb-r12-n04.log.gz").write_bytes(gz(b"\n".join(lines[10:])))
    (d / "gb-r12-n05.zst").write_bytes(zst((d / "gb-r12-n05.log").read_bytes()))
    (d / "gb-r12-n06.log.2.gz").write_bytes(gz((d / "gb-r12-n06.log").read_bytes()))
    for n in ("04", "05", "06"):
        (d / f"gb-r12-n{n}.log").unlink()


@pytest.fixture
def worked(tmp_path):
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
            "SELECT path, node, lineno, text, time, time_quality FROM log_lines ORDER BY path, lineno"
        ).fetchall()
        files = dict(con.execute("SELECT path, node FROM source_files").fetchall())
        con.close()
        return got, lines, files
    finally:
        release_staging(staging)


def test_rotated_and_compressed_logs_are_read_as_their_hosts_lines(worked):
    _compress_syslogs(worked)
    got, lines, files = _collect(worked, "syslog")
    cov = got.coverage
    assert cov.status == CoverageStatus.ok and cov.unparsed == 0 and cov.files == 7
    assert cov.nodes == [f"gb-r12-n0{i}" for i in range(1, 7)] and not cov.details.missing_nodes
    # each file keeps its own path for evidence; several files of one host are that host's lines
    assert {p: n for p, n in files.items() if "n04" in p or "n05" in p or "n06" in p} == {
        "logs/syslog/gb-r12-n04.log.1": "gb-r12-n04",
        "logs/syslog/gb-r12-n04.log.gz": "gb-r12-n04",
        "logs/syslog/gb-r12-n05.zst": "gb-r12-n05",
        "logs/syslog/gb-r12-n06.log.2.gz": "gb-r12-n06",
    }
    assert {(p, n) for p, n, *_ in lines} >= {("logs/syslog/gb-r12-n04.log.gz", "gb-r12-n04")}
    xid = [x for x in lines if x[0] == "logs/syslog/gb-r12-n04.log.gz" and "Xid (PCI:0018:01:00): 149" in x[3]]
    # line 23 of the original is line 13 of the compressed rotation; the time is the line's own
    assert xid[0][2] == 13 and xid[0][4] == datetime(2026, 11, 20, 12, 2, 41, 512000) and xid[0][5] == "own"


def test_a_bundle_of_compressed_logs_gets_the_same_diagnosis(worked):
    _compress_syslogs(worked)
    d = diagnose(worked, pack=default_pack())
    assert (d.terminal_state, d.sub_domain, d.affected_nodes) == ("hardware_failure", "nvlink", ["gb-r12-n04"])
    ev = {e.id: e for e in d.evidence}
    root_lines = [ev[i] for i in d.root_cause.evidence if ev[i].source == "syslog"]
    assert (root_lines[0].path, root_lines[0].line) == ("logs/syslog/gb-r12-n04.log.gz", 13)
    # the evidence names the raw line: line 13 of the decompressed file
    raw = gzip.decompress((worked / root_lines[0].path).read_bytes()).split(b"\n")[12].decode()
    assert raw.startswith(root_lines[0].text[:120])


def test_corrupt_archives_are_counted_never_fatal(worked):
    d = worked / "logs" / "syslog"
    whole = gz((d / "gb-r12-n04.log").read_bytes())
    (d / "gb-r12-n04.log.gz").write_bytes(whole[: len(whole) * 3 // 4])  # truncated: its start is still read
    (d / "gb-r12-n05.log.gz").write_bytes(b"this was never gzip data\n")  # named .gz, is not
    z = zst((d / "gb-r12-n06.log").read_bytes())
    (d / "gb-r12-n06.log.zst").write_bytes(z[: len(z) // 2])  # truncated inside its frame
    (d / "gb-r12-n03.log.1.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)  # gzip magic, garbage after
    for n in ("04", "05", "06"):
        (d / f"gb-r12-n{n}.log").unlink()
    got, lines, _ = _collect(worked, "syslog")
    cov = got.coverage
    assert cov.status == CoverageStatus.partial and cov.unparsed == 4
    reasons = dict(r.split(": ", 1) for r in cov.details.corrupt_archives)
    assert set(reasons) == {
        "logs/syslog/gb-r12-n04.log.gz",
        "logs/syslog/gb-r12-n05.log.gz",
        "logs/syslog/gb-r12-n06.log.zst",
        "logs/syslog/gb-r12-n03.log.1.gz",
    }
    assert reasons["logs/syslog/gb-r12-n05.log.gz"] == "named .gz but not gzip data: not read"
    assert "corrupt gzip archive" in reasons["logs/syslog/gb-r12-n04.log.gz"]
    assert "truncated" in reasons["logs/syslog/gb-r12-n06.log.zst"]
    # what the truncated archive held before the fault was scanned
    assert any(p == "logs/syslog/gb-r12-n04.log.gz" for p, *_ in lines)


def test_decompression_reads_every_gzip_member_and_zstd_frame(tmp_path):
    data = b"".join(b"Nov 20 10:05:%02d n1 kernel: line %d\n" % (i % 60, i) for i in range(50_000))
    half = len(data) // 2
    (tmp_path / "a.log.gz").write_bytes(gz(data[:half]) + gz(data[half:]))  # `cat a.gz b.gz` is valid gzip
    (tmp_path / "a.log.zst").write_bytes(zst(data[:half]) + zst(data[half:]))
    same = b"Nov 20 10:05:01 n1 kernel: the same line, compressed a thousandfold\n" * 150_000
    (tmp_path / "b.log.gz").write_bytes(gz(same))  # one read of it holds more than one step produces
    (tmp_path / "b.log.zst").write_bytes(zst(same))
    for name, want in (("a.log.gz", data), ("a.log.zst", data), ("b.log.gz", same), ("b.log.zst", same)):
        with plain_text(tmp_path / name) as plain:
            assert plain.problem is None and plain.path.read_bytes() == want
            copy = plain.path
        assert not copy.exists()  # the temporary copy is gone with the block


# ---- intervals of lines with no time ---------------------------------------------------------------

APP = """\
[rank0]: warming up
2026-11-20T10:00:00Z [rank0]: step 1
2026-11-20T10:00:01Z [rank1]: step 1
[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File "train.py", line 3, in <module>
2026-11-20T10:00:05Z [rank1]: step 2
[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered
2026-11-20T10:00:09Z [rank0]: exiting
a line of no rank
"""


@pytest.mark.parametrize("pack", [None, gz, zst], ids=["plain", "gzip", "zstd"])
def test_continuation_lines_lie_between_the_stamps_of_their_stream(staging, tmp_path, pack):
    path = tmp_path / ("app.log" if pack is None else "app.log.gz" if pack is gz else "app.log.zst")
    path.write_bytes(APP.encode() if pack is None else pack(APP.encode()))
    text = APP.split("\n")
    hits = [1, 2, 4, 5, 8, 10]  # as if these passed the pre-filter
    stage_lines(staging, "app", "bundle", "n1", "logs/app/n1.log", [Line(text[n - 1], n) for n in hits])
    normalize(staging, "UTC", datetime(2026, 11, 20, 10, 0), {"logs/app/n1.log": path})
    got = {
        r[0]: r[1:]
        for r in staging.execute(
            "SELECT lineno, time, time_quality, time_lo, time_hi, rank, len(ctx) FROM log_lines"
        ).fetchall()
    }
    t = lambda s: datetime(2026, 11, 20, 10, 0, s)  # noqa: E731
    # a stamped line is its own instant
    assert got[2] == (t(0), "own", t(0), t(0), 0, None)
    # nothing of rank 0 before it: no time, but it was written before rank 0's first stamp
    assert got[1] == (None, "none", None, t(0), 0, 0)
    # rank 0's traceback: between rank 0's stamps, whatever rank 1 printed in between
    assert got[4] == (t(0), "inherited", t(0), t(9), 0, 3)
    assert got[8] == (t(0), "inherited", t(0), t(9), 0, 7)
    assert got[5] == (t(1), "inherited", t(1), t(5), 1, 4)
    # a line of no rank: any stamped line is of its stream; none after it: unbounded
    assert got[10] == (t(9), "inherited", t(9), None, None, 9)


def test_continuation_lines_of_a_file_with_bad_bytes_still_find_their_stamps(staging, tmp_path):
    path = tmp_path / "app.log"
    path.write_bytes(
        b"2026-11-20T10:00:00Z caf\xc3\xa9 \xff step\nTraceback (most recent call last):\n"
        b"RuntimeError: x\n2026-11-20T10:00:07Z done\n"
    )
    stage_lines(staging, "app", "bundle", "n1", "logs/app/n1.log", [Line("RuntimeError: x", 3)])
    normalize(staging, "UTC", datetime(2026, 11, 20, 10, 0), {"logs/app/n1.log": path})
    got = staging.execute("SELECT time, time_lo, time_hi, ctx FROM log_lines").fetchone()
    t0, t7 = datetime(2026, 11, 20, 10, 0, 0), datetime(2026, 11, 20, 10, 0, 7)
    assert got == (t0, t0, t7, ["2026-11-20T10:00:00Z café \ufffd step", "Traceback (most recent call last):"])


def _event(con, event_id, symptom, node, obs, time, lo, hi, terminal_state, quality="own"):
    con.execute(
        "INSERT INTO log_lines (obs_id, source, connector, node, path, lineno, time, time_quality, text, body, "
        "time_lo, time_hi) VALUES (?, 'app', 'bundle', ?, 'x.log', ?, ?, ?, 'x', 'x', ?, ?)",
        [obs, node, obs, time, quality, lo, hi],
    )
    con.execute(
        "INSERT INTO events BY NAME SELECT ? AS event_id, 'r' AS rule_id, ? AS symptom, ? AS obs_id, "
        "'app' AS source, ? AS node, ? AS time, 'root_candidate' AS role_hint, ? AS terminal_state",
        [event_id, symptom, obs, node, time, terminal_state],
    )


def test_a_candidate_known_by_an_interval_is_not_ordered_before_a_hardware_fault_it_overlaps(staging):
    prepare(staging, default_pack(), Settings())
    at = lambda m, s=0: datetime(2026, 11, 20, 11, m, s)  # noqa: E731  (the failure window ends 12:00)
    # a traceback between two stamps 11:50 and 11:55 on n1, and an XID at 11:52 on the same host
    _event(staging, 1, "python_exception", "n1", 101, at(50), at(50), at(55), "application_failure", "inherited")
    _event(staging, 2, "xid_79", "n1", 102, at(52), at(52), at(52), "hardware_failure")
    # the same on another host: nothing to yield to there
    _event(staging, 3, "python_exception", "n2", 103, at(50), at(50), at(55), "application_failure", "inherited")
    # a traceback on n1 whose interval closed before the fault, one with no later stamp (unbounded)
    _event(staging, 4, "python_exception", "n1", 104, at(49), at(49), at(50, 30), "application_failure", "inherited")
    _event(staging, 5, "python_exception", "n1", 105, at(51), at(51), None, "application_failure", "inherited")
    # a line with its own time before the fault stays before it
    _event(staging, 6, "python_exception", "n1", 106, at(51, 30), at(51, 30), at(51, 30), "application_failure")
    rows = staging.execute(
        "SELECT event_id, time_lo, time_hi, order_time, yields_to FROM root_candidates ORDER BY event_id"
    ).fetchall()
    assert rows == [
        (1, at(50), at(55), at(52), 2),
        (2, at(52), at(52), at(52), None),
        (3, at(50), at(55), at(50), None),
        (4, at(49), at(50, 30), at(49), None),
        (5, at(51), None, at(52), 2),
        (6, at(51, 30), at(51, 30), at(51, 30), None),
    ]
    by_time = [r[0] for r in staging.execute("SELECT event_id FROM root_candidates ORDER BY time, event_id").fetchall()]
    ordered = [
        r[0]
        for r in staging.execute(
            "SELECT event_id FROM root_candidates ORDER BY order_time NULLS LAST, yields_to IS NOT NULL, event_id"
        ).fetchall()
    ]
    assert by_time == [4, 1, 3, 5, 6, 2]  # by the earlier stamp alone the traceback precedes the XID
    assert ordered == [4, 3, 6, 2, 1, 5]  # by what is known, it cannot


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
@pytest.mark.parametrize("budget", ["bytes", "lines"])
def test_a_decompression_bomb_stops_at_its_budget_and_says_so(tmp_path, monkeypatch, kind, budget):
    """A member that expands past its budget of bytes or lines is cut at a line's end, the rest not
    read, and the archive's problem (its coverage) says so. (Measured on 1 GiB bombs of 28-byte
    lines: zstd 16.7 s / 842 MB RSS before, 5.3 s / 229 MB after; gzip 33.0 s before, 5.3 s / 232 MB.)"""
    import zlib

    import zstandard

    from workload_attribution.staging import files

    monkeypatch.setattr(files, "DECOMPRESSED_MAX_BYTES", 1_000_000 if budget == "bytes" else 1 << 30)
    monkeypatch.setattr(files, "DECOMPRESSED_MAX_LINES", 20_000 if budget == "lines" else 1 << 30)
    text = b"Nov 20 10:00:00 h kernel: x\n" * 200_000  # 5.6 MB, 200,000 lines
    path = tmp_path / ("bomb.log.gz" if kind == "gzip" else "bomb.log.zst")
    if kind == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        path.write_bytes(c.compress(text) + c.flush())
    else:
        path.write_bytes(zstandard.ZstdCompressor().compress(text))
    with files.plain_text(path) as plain:
        assert plain.problem and "past its budget" in plain.problem and kind in plain.problem
        kept = plain.path.read_bytes()
    assert kept.endswith(b"\n") and text.startswith(kept)
    if budget == "lines":
        assert kept.count(b"\n") == 20_000
    else:
        assert 1_000_000 - 28 < len(kept) <= 1_000_000
