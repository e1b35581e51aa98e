"""The text scan (connectors/text.py) against a reference: the per-line SQL it replaced.

scan_files takes most of a piece's facts in Python (lines, blank or not, head and tail) and asks
DuckDB only for the pre-filter hits, and for lines with bad bytes or too long only of the pieces
that may have some. The reference below measures every line of every piece in SQL, as the scan
did before; on any file (blanks of every kind, CRs, NULs, bytes that are not UTF-8, characters of
several bytes, lines longer than the limit inside a piece and across pieces) both must agree on
every fact: lines, hits and their line numbers, lines with bad bytes, long lines and cut bytes,
blank files, head and tail. The limits are made small so that pieces and long lines are many.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workload_attribution.connectors import text
from workload_attribution.staging.database import contains_any
from workload_attribution.staging.files import ReadStats, read_pieces

PREFILTER = ["Xid", "a b", "é€", "\r\r"]

# The scan as it was: one statement measuring every line of each piece.
REFERENCE = """
WITH f AS (
    SELECT file_id, first, lenient, string_split(content, chr(10)) AS l FROM {pieces}
), m AS (
    SELECT *, list_transform(l, x -> {prefilter}) AS mask FROM f
)
SELECT
    len(l)                                                                           AS n_lines,
    len(list_filter(l, x -> trim(x, ' ' || chr(9) || chr(11) || chr(12) || chr(13)) = '')) AS n_blank,
    CASE WHEN lenient THEN len(list_filter(l, x -> contains(x, chr(65533)))) ELSE 0 END AS n_bad,
    len(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line}))      AS n_long,
    list_sum(list_transform(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line}),
                            x -> strlen(x) - strlen(left(x, {max_line}))))          AS cut_bytes,
    list_transform(l[1:{head}], x -> left(rtrim(x, chr(13)), 4096))                  AS head,
    list_transform(l[greatest(1, len(l) - {head} + 1):], x -> left(rtrim(x, chr(13)), 4096)) AS tail,
    list_where(range(first, first + len(l)), mask)                                   AS hit_lineno,
    list_transform(list_where(l, mask), x -> left(rtrim(x, chr(13)), {max_line}))    AS hit_line
FROM m
"""


def reference(con, path: Path, piece_bytes: int, max_line: int) -> dict:
    query = (
        REFERENCE.replace(
            "{pieces}",
            "(SELECT 0 AS file_id, $first AS first, $content AS content, $lenient AS lenient)",
        )
        .replace("{prefilter}", contains_any("x", PREFILTER))
        .replace("{max_line}", str(max_line))
        .replace("{head}", str(text.HEAD_LINES))
    )
    read = ReadStats()
    out = {"lines": 0, "blank": 0, "bad": 0, "long": 0, "cut": 0, "head": [], "tail": [], "hits": []}
    for p in read_pieces(path, read, piece_bytes, max_line):
        n, blank, bad, long, cut, head, tail, nos, hits = con.execute(
            query, {"first": p.first, "content": p.text, "lenient": p.lenient}
        ).fetchone()
        out["lines"] += n
        out["blank"] += blank
        out["bad"] += bad
        out["long"] += long
        out["cut"] += cut or 0
        if len(out["head"]) < text.HEAD_LINES:
            out["head"] = (out["head"] + head)[: text.HEAD_LINES]
        out["tail"] = (out["tail"] + tail)[-text.HEAD_LINES :]
        out["hits"] += list(zip(nos, hits, strict=True))
    out["long"] += read.cut_lines
    out["cut"] += read.cut_bytes
    return out


def scanned(con, paths: list[Path], piece_bytes: int, max_line: int, monkeypatch) -> tuple[text.ScanStats, dict]:
    monkeypatch.setattr(text, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(text, "MAX_LINE", max_line)
    con.execute("DELETE FROM raw_lines; DELETE FROM source_files")
    files = [text.TextFile(p, p.name, p.stem) for p in paths]
    stats = text.scan_files(con, files, "syslog", "bundle", PREFILTER)
    rows = {
        path: {"lines": lines, "bad": bad, "long": long, "head": head, "tail": tail, "id": fid}
        for fid, path, lines, bad, long, head, tail in con.execute(
            "SELECT file_id, path, lines, bad_lines, truncated_lines, head, tail FROM source_files"
        ).fetchall()
    }
    for row in rows.values():
        row["hits"] = [
            tuple(r)
            for r in con.execute(
                "SELECT lineno, line FROM raw_lines WHERE file_id = ? ORDER BY lineno", [row["id"]]
            ).fetchall()
        ]
    return stats, rows


def agree(con, paths: list[Path], piece_bytes: int, max_line: int, monkeypatch) -> None:
    stats, rows = scanned(con, paths, piece_bytes, max_line, monkeypatch)
    want_blank, want_cut, want_hits = [], 0, 0
    for p in paths:
        ref, got = reference(con, p, piece_bytes, max_line), rows[p.name]
        assert got["lines"] == ref["lines"], p.name
        assert got["bad"] == ref["bad"], p.name
        assert got["long"] == ref["long"], p.name
        assert got["head"] == ref["head"], p.name
        assert got["tail"] == ref["tail"], p.name
        assert got["hits"] == sorted(ref["hits"]), p.name
        if ref["lines"] == ref["blank"]:
            want_blank.append(p.name)
        want_cut += ref["cut"]
        want_hits += len(ref["hits"])
    assert sorted(stats.blank) == sorted(want_blank)
    assert stats.nodes == {p.stem for p in paths if p.name not in want_blank}
    assert stats.truncated_bytes == want_cut
    assert stats.hits == want_hits
    assert stats.lines == sum(r["lines"] for r in rows.values())


PARTS = [
    b"a",
    b"x",
    b"Xid",
    b"a b",
    "é€".encode(),
    "é".encode(),
    "€".encode(),
    "😀".encode(),
    "e\u0301".encode(),
    b" ",
    b"\t",
    b"\r",
    b"\x0b",
    b"\x0c",
    b"\x00",
    b"\xff",
    b"\xe2\x82",  # a character cut short
    b"\n",
    b"\r\n",
    b"\n\n",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(st.sampled_from(PARTS), max_size=120), min_size=1, max_size=4),
    run=st.integers(0, 80),
    at=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    piece_bytes=st.sampled_from([8, 23, 64, 4096]),
    max_line=st.sampled_from([5, 16, 37]),
)
def test_any_file_is_scanned_as_the_per_line_sql_did(
    staging, tmp_path_factory, monkeypatch, files, run, at, piece_bytes, max_line
):
    d = tmp_path_factory.mktemp("scan")
    paths = []
    for i, parts in enumerate(files):
        data = b"".join(parts)
        if run and i == 0:  # a long run of one character in the file: long lines within a piece
            cut = int(len(data) * at)
            data = data[:cut] + "é".encode() * run + b"Xid" + data[cut:]
        path = d / f"n{i}.log"
        path.write_bytes(data)
        paths.append(path)
    agree(staging, paths, piece_bytes, max_line, monkeypatch)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b" \t\x0b\x0c\r\n\r\n  \n",
        b"\n\n\nXid\n",
        b"\x00\n\x00\x00 Xid\n",
        b"ok\r\n" * 20 + b"Xid\r\r\n" + b"\r\r\r\n" * 10,
        "é".encode() * 100 + b"\nXid a b\n" + b"y" * 300,
        b"x" * 30 + "€".encode() * 30 + b"\n" + b"a b" * 40,
    ],
)
@pytest.mark.parametrize("piece_bytes", [7, 64, 1 << 20])
def test_edge_files(staging, tmp_path, monkeypatch, data, piece_bytes):
    path = tmp_path / "h1.log"
    path.write_bytes(data)
    agree(staging, [path], piece_bytes, 16, monkeypatch)


def test_the_real_limits_on_a_file_of_several_pieces(staging, tmp_path, monkeypatch):
    """At the real sizes: pieces of 8 MiB, lines cut at 1 MiB, a line of 2 MiB of two-byte
    characters inside a piece (more bytes than the limit, fewer characters), one of 3 Mi
    characters, blanks, and hits on both sides of a piece's end."""
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        for i in range(120_000):
            f.write(b"Nov 20 11:00:00 host kernel: a b %d\n" % i if i % 997 == 0 else b"noise line %d\n" % i)
        f.write("é".encode() * (1 << 20) + b"\n")
        f.write(b"y" * (3 << 20) + b" Xid\n")
        f.write(b" \t\r\n" * 1000)
        for i in range(200_000):
            f.write(b"more noise %d Xid\n" % i if i % 1013 == 0 else b"more noise %d\n" % i)
    agree(staging, [path], text.PIECE_BYTES, text.MAX_LINE, monkeypatch)


def _runtime_file(lines: list[str], cuts: list[int], docker: bool) -> tuple[str, list[tuple[int, str]]]:
    """A container runtime's log of `lines` on stderr, each split in parts at `cuts` (a "P"/partial
    record per part but the last), with a stdout record between the parts; and the stderr lines
    as the scan must join them (numbered at their first part)."""
    import json

    out, want = [], []
    t = "2026-11-20T10:00:02.123456789Z"

    def record(stream: str, part: str, last: bool) -> str:
        if docker:
            return json.dumps(
                {"log": part + ("\n" if last else ""), "stream": stream, "time": t},
                ensure_ascii=False,
                separators=(",", ":"),
            )
        return f"{t} {stream} {'F' if last else 'P'} {part}"

    for k, line in enumerate(lines):
        at = sorted({c % (len(line) + 1) for c in cuts[k : k + 2]})
        parts = [line[a:b] for a, b in zip([0, *at], [*at, len(line)])]
        want.append((len(out) + 1, record("stderr", line, True)))
        for i, part in enumerate(parts):
            out.append(record("stderr", part, i == len(parts) - 1))
            if i == 0:
                out.append(record("stdout", "progress 10%", True))
    return "\n".join(out) + "\n", want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cuts=st.lists(st.integers(0, 60), min_size=8, max_size=8),
    piece_bytes=st.sampled_from([16, 64, 200, 4096]),
    docker=st.booleans(),
)
def test_a_line_a_runtime_split_is_joined_before_the_prefilter(
    staging, tmp_path_factory, monkeypatch, cuts, piece_bytes, docker
):
    lines = ["[rank3]: Xid 79 on the bus", "noise", "a b c d e f", "[rank0]: ValueError: é€ bad value", "x"]
    data, want = _runtime_file(lines, cuts, docker)
    path = tmp_path_factory.mktemp("runtime") / "h1.log"
    path.write_text(data)
    stats, rows = scanned(staging, [path], piece_bytes, 1 << 20, monkeypatch)
    assert rows["h1.log"]["lines"] == data.count("\n")
    # every line holding a literal is kept whole, at its first part, wherever the runtime cut it
    kept = [(n, line) for n, line in want if any(p in line for p in PREFILTER)]
    assert rows["h1.log"]["hits"] == kept


def test_a_runtime_split_line_still_open_at_a_piece_end_is_carried_whatever_its_length() -> None:
    """Where a piece's open run of partial records starts (connectors/text.py _open_tail): only the
    piece's last OPEN_LOOKBACK lines are searched for a partial record first; a run that began
    further up is still found whole, and a partial record that far up with whole records after it
    opens nothing."""
    from workload_attribution.connectors.text import OPEN_LOOKBACK, _open_tail

    part = "2026-11-20T11:01:10.1Z stdout P part {}"
    plain = "2026-11-20T11:01:10.1Z kernel: plain line {}"
    run = [part.format(i) for i in range(OPEN_LOOKBACK + 50)]
    before = [plain.format(i) for i in range(10)]
    text = "\n".join(before + run)
    assert _open_tail(text) == len("\n".join(before)) + 1  # the run's first record
    closed = "\n".join([part.format(0)] + [plain.format(i) for i in range(OPEN_LOOKBACK + 5)])
    assert _open_tail(closed) is None  # far up, then no runtime record: nothing open
    tail = "\n".join([plain.format(i) for i in range(OPEN_LOOKBACK * 3)] + [part.format(1)])
    assert _open_tail(tail) == len(tail) - len(part.format(1))


MIXED = [
    b"plain noise line",
    b"kernel: NVRM: Xid 79 fell off the bus",
    "a b é€ in a line".encode(),
    b"bad \xff byte a b",
    b"nul \x00 Xid",
    b"crlf Xid\r",
    b"   ",
    b"",
    b"2026-11-20T10:00:02.1Z stderr P [rank3]: Xi",
    b"2026-11-20T10:00:02.1Z stderr F d 79 on the bus",
    b"2026-11-20T10:00:02.1Z stdout F progress 10%",
    b'{"log":"[rank0]: a ","stream":"stderr","time":"2026-11-20T10:00:02Z"}',
    b'{"log":"b c\\n","stream":"stderr","time":"2026-11-20T10:00:02Z"}',
    b'{"log":"Xid 48\\n","stream":"stdout","time":"2026-11-20T10:00:02Z"}',
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(st.sampled_from(MIXED), max_size=200), min_size=1, max_size=3),
    piece_bytes=st.sampled_from([16, 64, 200, 1000, 4096]),
    max_line=st.sampled_from([24, 1 << 20]),
)
# found by the search: a split line's two parts in two pieces with another runtime's part open
# between them; the pieces were cut between the parts, and whether they were joined then depended
# on which pieces a batch of the scan held (connectors/text.py _open_tail)
@example(files=[[MIXED[0], MIXED[0], MIXED[8], MIXED[11], MIXED[9]]], piece_bytes=64, max_line=1 << 20)
def test_hyperscan_reading_bytes_scans_as_the_duckdb_prefilter_reading_text(
    staging, tmp_path_factory, monkeypatch, files, piece_bytes, max_line
):
    """Hyperscan's path reads a file's pieces as bytes, counts their lines in its own pass, and
    decodes only what it keeps; a piece holding a runtime's partial records, and those after it
    while a run is open, go the way of text. Whatever the mix (plain lines between split records,
    bad bytes, NULs, CRLF, blanks, pieces of a few bytes), every file's lines, bad and long lines,
    head, tail and kept lines are those of DuckDB's path, which decodes every piece."""
    d = tmp_path_factory.mktemp("mixed")
    paths = []
    for i, lines in enumerate(files):
        path = d / f"n{i}.log"
        path.write_bytes(b"\n".join(lines) + (b"\n" if i % 2 == 0 else b""))
        paths.append(path)
    got = {}
    for engine in ("hyperscan", "duckdb"):
        monkeypatch.setenv("ATTRIBUTION_PREFILTER", engine)
        stats, rows = scanned(staging, paths, piece_bytes, max_line, monkeypatch)
        for row in rows.values():
            del row["id"]
        got[engine] = (stats.lines, stats.hits, stats.bad_lines, stats.long_lines, sorted(stats.blank), rows)
    assert got["hyperscan"] == got["duckdb"]
