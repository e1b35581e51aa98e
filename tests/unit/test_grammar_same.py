"""The prefix grammar as staging runs it (parse_lines.sql: the table macro parse_log_lines over all
lines in one statement; and parse_log_line, one line) gives exactly what the grammar gave before it
was restructured for speed (tests/unit/log_time_macros_reference.sql: one correlated macro per
line): the same ts, rank and body for every line of the corpora, of the grammar's own tests, and
of variants made to probe what a faster parse could get wrong (digits changed, fractions of every
length, impossible dates, year-less lines around New Year, zones, hosts vs device names, ranks,
runtime and collector envelopes, long prefixes, blank lines, NUL and non-ASCII)."""

from __future__ import annotations

import ast
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from workload_attribution.staging.database import sql

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# (zone, reference time): a November attempt, and attempts either side of New Year
ATTEMPTS = [
    ("Europe/Berlin", datetime(2026, 11, 20, 11, 0, 0)),
    ("UTC", datetime(2027, 1, 1, 0, 30, 0)),
    ("America/Los_Angeles", datetime(2026, 12, 31, 23, 50, 0)),
]


def _corpus() -> list[str]:
    lines: set[str] = set()
    for top in (
        ROOT / "tests" / "real",
        ROOT / "tests" / "regression",
        ROOT / "tests" / "examples",
        ROOT.parent / "shared" / "examples",
    ):
        for f in top.glob("**/logs/**/*"):
            if f.is_file() and f.suffix not in (".gz", ".zst"):
                lines.update(f.read_text(encoding="utf-8", errors="replace").splitlines())
    return sorted(lines)


def _test_strings() -> list[str]:
    """Every string literal of the grammar's own tests (lines, and some that are not: all parsed)."""
    out: set[str] = set()
    for name in ("test_log_lines.py", "test_properties.py", "test_envelopes.py", "test_concepts.py"):
        path = HERE / name
        if path.exists():
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 2000:
                    out.add(node.value)
    return sorted(out)


SEEDS = [
    "2026-11-20T10:05:01.123456+00:00 node-02 kernel: NVRM: x",
    "2026-11-20T10:05:01+0000 node-02 kernel: x",
    "2026-11-20T11:05:01+01:00 node-02 kernel: x",
    "2026-11-20T10:05:01Z node-02 kernel: x",
    "2026-08-07T19:59:54.000Z hgx-r16-n2 kernel: [1000.000000] NVRM: GPU at PCI:0000:00:00: GPU-5c24",
    "2026-11-20 11:05:01,123 ERROR x",
    "[2026-11-20 11:05:01] node-02:3468:3905 [4] NCCL WARN x",
    "[2026-11-20T11:05:01.433] error: Nodes n3 not responding",
    "2026-11-20 10:05:01.123456: E tensorflow/core/x.cc:42] boom",
    "Fri 2026-11-20 10:05:01 UTC host kernel: x",
    "Fri 2026-11-20 10:05:01.123456 CET host kernel: x",
    "Nov 20 11:05:01 node-02 kernel: x",
    "Nov  2 11:05:01 node-02 kernel: x",
    "Nov 20 11:05:01.123456 node-02 kernel: x",
    "Dec 31 23:59:59 node-02 kernel: x",
    "Jan  1 00:00:01 node-02 kernel: x",
    "Feb 29 12:00:00 node-02 kernel: x",
    "[Fri Nov 20 11:05:01 2026] NVRM: x",
    "[Mon Nov  2 11:05:01 2026] NVRM: Xid (PCI:0000:c1:00): 79, pid=1234",
    "Mon Jun 25 16:11:16.123 2018: GPFS x",
    "[ 1234.567890] NVRM: x",
    "[1638351161.447102] [host:123:0] ucp x",
    "[Nov 20 2026 11:05:01] [ERROR] [tid 841] x",
    "[E1120 11:05:01.123456789 ProcessGroupNCCL.cpp:607] x",
    "E1120 11:05:01.690030210 139185760270418 torch/x.py:874] failed",
    "[E626 06:24:44.123] x",
    "I0626 06:24:44.123000 139 torch/api.py:680] [default] x",
    "12/20 10:05:01 - mmengine - INFO - x",
    "<30>1 2026-11-20T10:05:01.123Z node03 kernel 123 - - NVRM: x",
    '<30>1 2026-11-20T10:05:01+01:00 node03 app - ID47 [ex@1 a="b\\"]"] msg',
    "<30>1 - node03 - - - - msg",
    "<30>Nov 20 11:05:01 node03 kernel: x",
    "kern  :err   : [ 12.345678] NVRM: x",
    "local7:info  : Nov 20 11:05:01 h x",
    "local8:info  : Nov 20 11:05:01 h x",
    "node03: Nov 20 11:05:01 node03 kernel: x",
    "gb-r12-n04.cluster.local: [rank3]: x",
    "eth0: link down",
    "ib0: port 1 down",
    "nvme0n1: I/O error",
    "sda1: x",
    "dm-0: x",
    "md-gpu7: x",
    "2026-11-20T10:05:01.123456789Z stdout F [rank3]: 2026-11-20 11:05:01,785 INFO x",
    "2026-11-20T10:05:01.123456789Z stderr P partial",
    "2026-11-20T10:05:01.5Z 2026-11-20T11:05:00+01:00 [rank1]: x",
    "2026-11-20T10:05:01.570Z 12: Traceback (most recent call last):",
    "10: Traceback (most recent call last):",
    " 3: [rank3]: x",
    "[rank7]:[W626 06:24:44.123456789 ProcessGroupNCCL.cpp:1568] x",
    "[default0]:2026-11-20 11:05:01,785 INFO iteration",
    "[gb-r12-n04:3]:[E1120 11:05:01.1 P.cpp:607] x",
    "[1,3]<stdout>: x",
    "(pid=2361, ip=10.0.2.15) x",
    "(RayTrainWorker pid=2361, ip=10.0.2.15) x",
    "slurmstepd: error: *** JOB 123 ON node03 CANCELLED AT 2026-11-20T10:05:01 DUE TO TIME LIMIT ***",
    "slurmstepd: error: *** STEP 123.0 ON node03 CANCELLED AT 2026-02-30T10:05:01 ***",
    "2026-02-30T10:05:01Z x",
    "2026-11-20T24:00:00Z x",
    "2026-12-31T23:59:60Z x",
    "2026-11-20T10:05:01.1234567890Z x",
]


def _digit_variants(line: str) -> set[str]:
    """The line with each of its first 40 digits changed to every other digit."""
    out = set()
    for i, c in enumerate(line[:40]):
        if c.isdigit():
            out.update(line[:i] + d + line[i + 1 :] for d in "0123456789" if d != c)
    return out


def _variants() -> list[str]:
    out: set[str] = set(SEEDS)
    for s in SEEDS:
        out |= _digit_variants(s)
        out.add(s.replace(" ", "  ", 1))
        out.add(s[:20])
        out.add("  " + s)
        out.add("\t" + s)
        out.add(s + " ")
        out.add(s.replace("x", "é\x00ü"))
        # the container runtime's and Docker's envelopes, and kubectl's time in front
        out.add("2026-11-20T10:05:01.123456789Z stdout F " + s)
        out.add(json.dumps({"log": s + "\n", "stream": "stderr", "time": "2026-11-20T10:05:01.5Z"}))
        out.add("2026-11-20T10:05:01.000000001+00:00 " + s)
        out.add("node03: " + s)
        out.add(" 0: " + s)
        out.add("[rank12]: " + s)
        # characters either side of what a form's guard tests (a character's place counts characters,
        # not bytes; blanks ltrim takes and those it leaves)
        for c in ("\u00a0", "\u3000", "\u2003", "\u0080", "\x0b", "`", "{", "/", ":", "@", "Z", "é", "日"):
            out |= {c + s, s[:2] + c + s[2:], s[:4] + c + s[5:], "[rank1]:" + c + s, " 0: " + c + s}
    for n in range(13):  # fractions of 0..12 digits in every form that takes one
        f = ("." + "123456789012"[:n]) if n else ""
        out |= {
            f"2026-11-20T10:05:01{f}Z x",
            f"2026-11-20 10:05:01{f},x",
            f"Nov 20 11:05:01{f} h k: x",
            f"[Fri Nov 20 11:05:01{f} 2026] x",
            f"E1120 11:05:01{f} 1 f.cc:1] x",
            f"[ 12.{'5' * max(n, 1)}] x",
            f"2026-11-20T10:05:01{f}Z stdout F Nov 20 11:05:01{f} h k: x",
            f"[1638351161{f or '.0'}] x",
        }
    for mo in range(1, 13):
        for d in (1, 9, 10, 28, 29, 30, 31, 32):
            mon = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()[mo - 1]
            out |= {
                f"2026-{mo:02d}-{d:02d}T23:59:59Z x",
                f"{mon} {d:2d} 23:59:59 h k: x",
                f"{mon} {d} 00:00:00 h k: x",
                f"E{mo}{d:02d} 23:59:59.5 1 f.cc:1] x",
                f"E{mo:02d}{d:02d} 00:00:00.5 1 f.cc:1] x",
                f"{mo:02d}/{d:02d} 23:59:59 - mmengine - x",
                f"[Fri {mon} {d:2d} 12:00:00 2024] x",
            }
    for z in ("Z", "+05:30", "-0800", "+01", "-00:00", "+1", "CET", "PST", "UTC", "GMT", "UT", "+05:3"):
        out |= {f"2026-11-20T10:05:01.5{z} x", f"2026-11-20T10:05:01{z} x", f"Fri 2026-11-20 10:05:01 {z} h k: x"}
    for h in ("23:59:60", "24:00:00", "25:00:00", "12:60:00", "00:00:00", "23:59:59"):
        out |= {f"2026-11-20T{h}Z x", f"Nov 20 {h} h k: x", f"E1120 {h}.1 1 f.cc:1] x"}
    long_prefix = "gb-r12-n04-" + "a1" * 60 + ": "  # a host prefix past any fixed width
    out |= {long_prefix + s for s in SEEDS[:8]}
    out |= {
        "",
        " ",
        "  ",
        "\t",
        "\x00",
        "\x00abc",
        "é",
        "日本語 2026-11-20T10:05:01Z",
        "[",
        "<",
        "{",
        '{"log":',
        '{"log": "x"',
        '{"log": 1, "time": "2026-11-20T10:05:01Z"}',
        "[rank",
        "0: ",
        "0:",
        "1234567: x",
    }
    return sorted(out)


def _cases() -> list[str]:
    return sorted(set(_corpus()) | set(_test_strings()) | set(_variants()))


@pytest.fixture(scope="module")
def lines() -> list[str]:
    got = _cases()
    assert len(got) > 20_000
    return got


def _con(macros: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(macros)
    return con


def _reference(lines: list[str], tz: str, ref: datetime) -> list[tuple]:
    con = _con((HERE / "log_time_macros_reference.sql").read_text())
    try:
        return con.execute(
            "SELECT p['ts']::VARCHAR, p['rank'], p['body'] FROM (SELECT i, parse_log_line(l, $tz, $ref) AS p "
            "FROM unnest($l) WITH ORDINALITY t(l, i)) ORDER BY i",
            {"l": lines, "tz": tz, "ref": ref},
        ).fetchall()
    finally:
        con.close()


def _staged(lines: list[str], tz: str, ref: datetime) -> tuple[list[tuple], list[tuple]]:
    """parse_lines.sql's own statement over the lines as raw_lines (and the first three as a file's
    head and tail), and the one-line macro parse_log_line over each."""
    con = _con(sql("log_time_macros.sql"))
    try:
        con.execute(sql("staging_schema.sql"))
        con.execute(
            "INSERT INTO raw_lines (file_id, lineno, line) SELECT 1, i, l FROM unnest($l) WITH ORDINALITY t(l, i)",
            {"l": lines},
        )
        con.execute("INSERT INTO source_files (file_id, head, tail) VALUES (2, $h, $h)", {"h": lines[:3]})
        con.execute(sql("parse_lines.sql"), {"tz": tz, "ref": ref})
        table = con.execute(
            "SELECT stamp::VARCHAR, rank, body FROM parsed_lines WHERE kind = 'raw' ORDER BY lineno"
        ).fetchall()
        assert (
            con.execute(
                "SELECT list(stamp::VARCHAR ORDER BY kind, rowid) FROM parsed_lines WHERE kind <> 'raw'"
            ).fetchone()[0]
            == [r[0] for r in table[:3]] * 2
        )
        one = con.execute(
            "SELECT p['ts']::VARCHAR, p['rank'], p['body'] FROM (SELECT i, parse_log_line(l, $tz, $ref) AS p "
            "FROM unnest($l) WITH ORDINALITY t(l, i)) ORDER BY i",
            {"l": lines, "tz": tz, "ref": ref},
        ).fetchall()
        return table, one
    finally:
        con.close()


@pytest.mark.parametrize("tz,ref", ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
def test_the_grammar_gives_what_it_gave(lines, tz, ref):
    want = _reference(lines, tz, ref)
    table, one = _staged(lines, tz, ref)
    for name, got in (("parse_lines.sql", table), ("parse_log_line", one)):
        wrong = [(line, w, g) for line, w, g in zip(lines, want, got) if w != g]
        assert len(got) == len(want) and not wrong, f"{name}: {len(wrong)} lines differ, e.g. {wrong[:3]}"
    # the cases reach every form: times found, ranks found, impossible stamps, bodies changed
    assert sum(w[0] is not None for w in want) > 10_000
    assert sum(w[1] is not None for w in want) > 500
    assert any(w[2] != line for line, w in zip(lines, want))
