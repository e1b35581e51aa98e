"""Prefix grammar and timestamps: every form of the bundle spec, zones, year-less forms, ranks."""

from datetime import datetime

import pytest

REF = datetime(2026, 11, 20, 11, 0, 0)  # attempt in Europe/Berlin (UTC+1 in November)

IMPOSSIBLE = "-infinity"  # what a stamp whose fields make no time reads as

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
    # glog / PyTorch c10: severity I/W/E/F, month not zero-padded by c10 ("E626" = June 26, CEST there)
    ("[E626 06:24:44.123] x", "2026-06-26 04:24:44.123", None, "[E626 06:24:44.123]"),
    (
        "E626 06:24:44.123456 139185760270418 torch/distributed/x.py:874] failed",
        "2026-06-26 04:24:44.123456",
        None,
        "E626",
    ),
    ("W1120 11:05:01.690030 139185760270418 torch/x.py:874] x", "2026-11-20 10:05:01.69003", None, "W1120"),
    (
        "I0626 06:24:44.123000 139 torch/distributed/elastic/agent/server/api.py:680] [default] x",
        "2026-06-26 04:24:44.123",
        None,
        "I0626",
    ),
    ("F1120 11:05:01.123456789 ProcessGroupNCCL.cpp:1 x", "2026-11-20 10:05:01.123457", None, "F1120"),
    (
        "[rank7]:[W626 06:24:44.123456789 ProcessGroupNCCL.cpp:1568] [PG ID 0 PG GUID 0(default_pg) Rank 7] "
        "Process group watchdog thread terminated",
        "2026-06-26 04:24:44.123457",
        7,
        "[W626",
    ),
    ("[gb-r12-n04:3]:[E1120 11:05:01.123456789 ProcessGroupNCCL.cpp:607] x", "2026-11-20 10:05:01.123457", 3, "[E1120"),
    # dmesg -T (one-digit day padded), dmesg -x --time-format=iso, raw uptime (no wall clock, not a rank)
    (
        "[Mon Nov  2 11:05:01 2026] NVRM: Xid (PCI:0000:c1:00): 79, pid=1234, GPU has fallen off the bus.",
        "2026-11-02 10:05:01",
        None,
        "NVRM: Xid",
    ),
    (
        "kern  :err   : 2026-11-20T10:05:01,123456+00:00 NVRM: Xid (PCI:0000:c1:00): 79, pid=1234",
        "2026-11-20 10:05:01.123456",
        None,
        "NVRM: Xid",
    ),
    (
        "kern  :warn  : 2026-11-20T11:05:01,000001+01:00 mlx5_core 0000:61:00.0: x",
        "2026-11-20 10:05:01.000001",
        None,
        "mlx5_core",
    ),
    ("kern  :err   : [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0", None, None, "NVRM: The"),
    ("[ 1843.308145] NVRM: The NVIDIA probe routine failed for 1 device(s).", None, None, "NVRM: The"),
    ("[    0.000000] 12: not a rank", None, 12, "not a rank"),
    ("[   12.5] x", None, None, "x"),
    # UCX prints epoch seconds where dmesg prints uptime: 10 digits are a wall clock
    (
        "[1638351161.447102] [b1360:141181:0]    dc_mlx5_devx.c:78   UCX  ERROR mlx5dv_devx_obj_create(DCT) failed",
        "2021-12-01 09:32:41.447102",
        None,
        "[b1360:141181:0]",
    ),
    # journalctl: short-iso, short-iso-precise, short-precise, short-full (abbreviation = the attempt's zone)
    ("2026-11-20T11:05:01+0100 node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02 kernel"),
    ("2026-11-20T12:05:01.123456+02:00 node-02 kernel: x", "2026-11-20 10:05:01.123456", None, "node-02 kernel"),
    ("Fri 2026-11-20 10:05:01 UTC node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02 kernel"),
    ("Fri 2026-11-20 11:05:01 CET node-02 kernel: x", "2026-11-20 10:05:01", None, "node-02 kernel"),
    ("Fri 2026-11-20 13:05:01.250000 +03 node-02 kernel: x", "2026-11-20 10:05:01.25", None, "node-02 kernel"),
    # RFC 3164 with a priority; RFC 5424 (structured data, NILVALUE fields, a BOM) in the 3164 body shape
    ("<30>Nov 20 11:05:01 node-02 slurmd[123]: error: x", "2026-11-20 10:05:01", None, "node-02 slurmd[123]: error"),
    (
        "<30>1 2026-11-20T10:05:01.123456+00:00 node-02 slurmd 1234 - - error: Node x",
        "2026-11-20 10:05:01.123456",
        None,
        "node-02 slurmd[1234]: error: Node x",
    ),
    (
        '<165>1 2026-11-20T10:05:01.003Z node-02 evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="App\\]" '
        'eventID="1011"][examplePriority@32473 class="high"] An application event',
        "2026-11-20 10:05:01.003",
        None,
        "node-02 evntslog: An application event",
    ),
    (
        "<34>1 2026-11-20T10:05:01Z node-02.example.com su - ID47 - \ufeff'su root' failed",
        "2026-11-20 10:05:01",
        None,
        "node-02.example.com su: 'su root' failed",
    ),
    (
        "<30>1 - - - - - - 2026-11-20 11:05:01,000 INFO the message's own time",
        "2026-11-20 10:05:01",
        None,
        "INFO the message",
    ),
    # Slurm: a cancel notice dates itself (zone-less) when nothing else does; an outer stamp wins
    (
        "slurmstepd: error: *** JOB 123 ON node03 CANCELLED AT 2026-11-20T11:05:01 DUE TO TIME LIMIT ***",
        "2026-11-20 10:05:01",
        None,
        "slurmstepd: error: *** JOB 123",
    ),
    (
        "0: slurmstepd: error: *** STEP 123.0 ON node03 CANCELLED AT 2026-11-20T11:05:01 ***",
        "2026-11-20 10:05:01",
        0,
        "slurmstepd",
    ),
    (
        "[2026-11-20T11:05:01.123] error: *** JOB 123 ON node03 CANCELLED AT 2026-11-20T09:00:00 ***",
        "2026-11-20 10:05:01.123",
        None,
        "error: *** JOB",
    ),
    # rank prefixes: torchrun with host names, srun --label with blanks, Open MPI --tag-output, stacked
    ("[viking-prod-230:1]:Time to instantiate model: 0.02 seconds.", None, 1, "Time to instantiate"),
    ("  3: Traceback (most recent call last):", None, 3, "Traceback"),
    ("[1,0]<stdout>:Hello from rank 0", None, 0, "Hello"),
    ("[1,5]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered", None, 5, "RuntimeError"),
    (' 0: [rank0]:   File "/opt/thunder/executors/nvfuserex_impl.py", line 402, in __call__', None, 0, '   File "/opt'),
    (" 2: [rank5]: x", None, 5, " x"),
    (" 2: [default1]: x", None, 2, " x"),
    ("[default0]: 2026-11-20 11:05:01,785 INFO after a blank", "2026-11-20 10:05:01.785", 0, "INFO after"),
    # pdsh / clush host: stripped, the rest of the grammar applies after it; nothing recorded
    (
        "node03: Nov 20 11:05:01 node03 kernel: NVRM: Xid (PCI:0000:c1:00): 79",
        "2026-11-20 10:05:01",
        None,
        "node03 kernel: NVRM",
    ),
    ("gb-r12-n04.cluster.local: [Fri Nov 20 11:05:01 2026] NVRM: x", "2026-11-20 10:05:01", None, "NVRM: x"),
    ("node03: [rank2]:[E1120 11:05:01.123 ProcessGroupNCCL.cpp:1] x", "2026-11-20 10:05:01.123", 2, "[E1120"),
    ("node03: RuntimeError: CUDA error: uncorrectable NVLink error detected", None, None, "RuntimeError: CUDA"),
    # ... but not a time, a level, a program, an exception, a logger or a kernel device
    ("10:05:01 something", None, None, "10:05:01 something"),
    ("ERROR: something", None, None, "ERROR: something"),
    ("RuntimeError: x", None, None, "RuntimeError: x"),
    ("srun: error: node03: task 3: Exited with exit code 1", None, None, "srun: error"),
    ("torch.distributed.elastic.multiprocessing.api: [WARNING] x", None, None, "torch.distributed"),
    ("ib0: Lost carrier", None, None, "ib0: Lost carrier"),
    ("nvme0n1: I/O error", None, None, "nvme0n1: I/O"),
    ("vda0: 2001-01-02T00:00:00Z x", None, None, "vda0: 2001"),
    ("sdb1: rw=0, want=1, limit=2", None, None, "sdb1: rw"),
    ("md127: detected capacity change", None, None, "md127: detected"),
    ("enp65s0f1: Link is Down", None, None, "enp65s0f1: Link"),
    ("dm-0: x", None, None, "dm-0: x"),
    # ... while host names that merely begin like a device stay hosts
    ("srv01: [rank4]: x", None, 4, " x"),
    ("tapir3: [rank4]: x", None, 4, " x"),
    ("md-gpu7: [rank4]: x", None, 4, " x"),
    # ctime as GPFS prints it
    (
        "Mon Jun 25 16:11:16.123 2018: Close connection to 89.116.94.81 k155n01",
        "2018-06-25 14:11:16.123",
        None,
        "Close connection",
    ),
    ("plain continuation line", None, None, "plain"),
    # fields that make no time: '-infinity' (quarantined), never a time near it, never no stamp (the
    # line would take its neighbours' time)
    ("Feb 30 10:00:00 host impossible date", IMPOSSIBLE, None, "host"),
    ("2026-11-20T11:59:60Z host kernel: no leap second that day", IMPOSSIBLE, None, "host kernel"),
    ("2026-11-20T25:00:00Z host kernel: hour 25", IMPOSSIBLE, None, "host kernel"),
    ("2026-11-20T11:00:00.123456789012345Z host kernel: a 15-digit fraction", IMPOSSIBLE, None, "host kernel"),
    ("Nov 20 11:00:00.1234567890 host kernel: a 10-digit fraction", IMPOSSIBLE, None, "host kernel"),
    ("[rank3]:[E1120 11:59:60.5 ProcessGroupNCCL.cpp:607] x", IMPOSSIBLE, 3, "[E1120"),
    ("2016-12-31T23:59:60.5Z host kernel: the last leap second", IMPOSSIBLE, None, "host kernel"),  # none since
    (
        "1900-11-20T11:00:00Z host kernel: a time, out of range (normalising quarantines it)",
        "1900-11-20T11:00:00",
        None,
        "host",
    ),
    ("", None, None, ""),
]


@pytest.mark.parametrize("line,expected,rank,body", CASES)
def test_prefix_grammar(staging, line, expected, rank, body):
    got, impossible = staging.execute(
        "SELECT p, isinf(p['ts']) FROM (SELECT parse_log_line(?, 'Europe/Berlin', ?) AS p)", [line, REF]
    ).fetchone()
    ts = IMPOSSIBLE if impossible else str(got["ts"]) if got["ts"] else None
    assert ts == (expected if expected in (None, IMPOSSIBLE) else str(datetime.fromisoformat(expected)))
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


def test_a_forms_guard_never_hides_a_line_of_that_form(staging):
    """Each form's regex runs only behind a cheap test of a character or two (log_time_macros.sql):
    that test must hold for every line the regex itself matches. Checked on every line of the real
    corpus and the regression bundles, each also with its first 1..40 characters cut (a prefix
    already consumed leaves any of those), guarded macro against its bare regex."""
    import re
    from pathlib import Path

    from workload_attribution.staging.database import SQL_DIR

    root = Path(__file__).resolve().parents[1]
    lines = set()
    for f in [*root.glob("real/*/logs/**/*"), *root.glob("regression/*/logs/**/*")]:
        if f.is_file() and f.suffix not in (".gz", ".zst"):
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines()[:400]:
                lines.update(line[i:] for i in range(0, min(len(line), 40)))
    assert len(lines) > 20_000
    staging.execute("CREATE TEMP TABLE guard_lines AS SELECT unnest($l) AS s", {"l": sorted(lines)})
    text = (SQL_DIR / "log_time_macros.sql").read_text()
    guarded = re.findall(
        r"CREATE OR REPLACE MACRO (lt_\w+_re)\(s\) AS\s+CASE WHEN .*? THEN (regexp_extract\(s,.*?\)) (?:ELSE '' )?END;",
        text,
        re.S,
    )
    assert len(guarded) >= 11  # every form, the syslog header and class, pdsh, the rank prefix
    for name, bare in guarded:
        pattern = re.match(r"regexp_extract\(s,\s*('(?:[^']|'')*')", bare)
        assert pattern, bare
        hidden = staging.execute(
            f"SELECT count(*), any_value(s) FROM guard_lines "
            f"WHERE regexp_matches(s, {pattern.group(1)}) AND {name}(s) IS DISTINCT FROM {bare}"
        ).fetchone()
        assert hidden[0] == 0, f"{name} hides {hidden[0]} line(s) its regex matches, e.g. {hidden[1]!r}"


def test_a_stamp_that_is_no_time_quarantines_its_line(staging, tmp_path):
    """A line whose stamp is no time (a leap second on a day without one, a 15-digit fraction) or
    out of range (1969) keeps no time and never takes its neighbours': quarantined, counted per kind;
    a traceback line beside it still finds the real stamps around it."""
    from workload_attribution.staging.lines import Line, stage_lines
    from workload_attribution.staging.normalize import normalize

    text = [
        "2026-11-20T10:00:00Z n1 kernel: before",
        "2026-11-20T11:59:60Z n1 kernel: NVRM: Xid 79",
        "2026-11-20T13:30:00.123456789012345Z n1 kernel: NVRM: Xid 79",
        "1969-11-20T11:00:00Z n1 kernel: NVRM: Xid 79",
        "Traceback (most recent call last):",
        "2026-11-20T10:00:09Z n1 kernel: after",
    ]
    path = tmp_path / "n1.log"
    path.write_text("\n".join(text) + "\n")
    stage_lines(staging, "syslog", "bundle", "n1", "logs/syslog/n1.log", [Line(x, n) for n, x in enumerate(text, 1)])
    found = normalize(staging, "UTC", datetime(2026, 11, 20, 10, 0), {"logs/syslog/n1.log": path})
    got = {r[0]: r[1:] for r in staging.execute("SELECT lineno, time, time_quality, time_lo FROM log_lines").fetchall()}
    for n in (2, 3, 4):
        assert got[n] == (None, "quarantined", None), (n, got[n])
    assert got[5][:2] == (datetime(2026, 11, 20, 10, 0, 0), "inherited")
    assert (found.impossible, found.far) == ({"syslog": 2}, {"syslog": 1})
