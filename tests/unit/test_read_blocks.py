"""A log file read as pieces of whole lines (staging/files.py read_blocks): a file that fits in one
piece and ends with a line break is yielded as its first read, without a copy; every other file
(longer, without a final break, grown since its size was taken) is cut at line breaks as before.
Whatever the way, the pieces joined are the file's lines, and a line past the limit is cut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workload_attribution.staging import files
from workload_attribution.staging.files import ReadStats, read_blocks

LINES = [b"2026-11-20T10:05:01Z node03 kernel: NVRM: Xid 79", b"", "é€ ünïcode".encode(), b"x" * 40, b"last"]


def pieces(path: Path, piece_bytes: int, max_line: int = 1 << 20) -> tuple[list[bytes], ReadStats]:
    stats = ReadStats()
    return list(read_blocks(path, stats, piece_bytes, max_line)), stats


@pytest.mark.parametrize("final_break", [True, False], ids=["ends-with-a-break", "no-final-break"])
@pytest.mark.parametrize("piece_bytes", [8, 64, 1 << 20], ids=["many-pieces", "a-few", "one-piece"])
def test_the_pieces_are_the_files_lines(tmp_path: Path, final_break: bool, piece_bytes: int) -> None:
    content = b"\n".join(LINES) + (b"\n" if final_break else b"")
    path = tmp_path / "node03.log"
    path.write_bytes(content)
    got, stats = pieces(path, piece_bytes)
    assert b"\n".join(got).split(b"\n") == LINES
    assert (stats.cut_lines, stats.cut_bytes) == (0, 0)


def test_a_file_of_one_piece_is_its_first_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as all but its last byte, then that byte (a break): the piece is that first read."""
    path = tmp_path / "node03.log"
    path.write_bytes(b"\n".join(LINES) + b"\n")
    reads: list[int] = []
    real = files.open_regular

    def counted(p: Path):  # each read's size, as the file object is asked
        fh = real(p)
        read = fh.read

        def sized(n: int = -1) -> bytes:
            reads.append(n)
            return read(n)

        fh.read = sized  # type: ignore[method-assign]
        return fh

    monkeypatch.setattr(files, "open_regular", counted)
    got, _ = pieces(path, 1 << 20)
    size = path.stat().st_size
    assert got == [b"\n".join(LINES)] and reads == [size - 1, 1, 1]


def test_a_file_grown_since_its_size_was_taken_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log being written: the size taken, then more lines appended before the read. What the
    first read took is not the whole file: the pieces are every line there is."""
    path = tmp_path / "node03.log"
    first = b"\n".join(LINES[:2]) + b"\n"
    path.write_bytes(first + b"\n".join(LINES[2:]) + b"\n")
    real = os.fstat

    def older(fd: int) -> os.stat_result:  # the size as it was before the last lines came
        st = list(real(fd))
        st[6] = len(first)
        return os.stat_result(st)

    monkeypatch.setattr(files.os, "fstat", older)
    got, _ = pieces(path, 1 << 20)
    assert b"\n".join(got).split(b"\n") == LINES


def test_a_line_past_the_limit_is_cut_whichever_way_the_file_is_read(tmp_path: Path) -> None:
    long = b"y" * 100
    path = tmp_path / "node03.log"
    path.write_bytes(b"short\n" + long)  # no final break: the long line is the carry
    got, stats = pieces(path, 1 << 20, max_line=30)
    assert got == [b"short", long[:30]] and (stats.cut_lines, stats.cut_bytes) == (1, 70)
