"""Counting line breaks (staging/files.py line_breaks): each block by bytes.count or bytes.replace,
chosen by the lines of the block before it. Whatever way a block is counted, the count is what
bytes.count says, at every block boundary, from any start to any end; and the pre-filter's line
numbers and line counts, which use it across the gaps between kept lines, stay exact."""

from __future__ import annotations

import random

import pytest

from workload_attribution.staging import prefilter
from workload_attribution.staging.files import BREAK_BLOCK, WRONG_GUESS_WAIT, line_breaks

B = BREAK_BLOCK
LONG = b"y" * 99 + b"\n"  # log-like lines: counted by replace after the first block
SHAPES = {
    "empty": b"",
    "one break": b"\n",
    "no break": b"x" * (3 * B + 5),
    "bare breaks": b"\n" * (3 * B + 1),
    "long lines": LONG * (5 * B // len(LONG)),
    "long lines then bare breaks": LONG * (2 * B // len(LONG)) + b"\n" * (2 * B),
    # a wrong guess, the blocks counted after it, and a return to replace
    "alternating": (b"z" * (B - 1) + b"\n" + b"\n" * B) * (WRONG_GUESS_WAIT + 3),
    "a break at each block's edge": b"".join(b"w" * (B - 1) + b"\n" for _ in range(6)),
    "one line over many blocks": b"v" * (4 * B) + b"\n" + b"v" * B,
}


@pytest.mark.parametrize("data", SHAPES.values(), ids=SHAPES.keys())
def test_every_shape_counts_as_bytes_count_says(data: bytes) -> None:
    n = len(data)
    edges = sorted({0, 1, B - 1, B, B + 1, n // 3, n // 2, n - 1, n, n + 7} - {-1})
    for start in edges:
        for end in [None, *edges]:
            want = data.count(b"\n", start, end if end is not None else n)
            assert line_breaks(data, start, end) == want, (start, end)


def test_random_mixtures_count_as_bytes_count_says() -> None:
    rnd = random.Random(20261207)
    pieces = [b"\n" * (B + 3), b"y" * (B // 2) + b"\n", LONG * 40, b"abc\n", b"x" * (2 * B)]
    for _ in range(300):
        data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 12)))
        start = rnd.randint(0, len(data))
        end = rnd.choice([None, rnd.randint(start, len(data) + 3)])
        assert line_breaks(data, start, end) == data.count(b"\n", start, end if end is not None else len(data))


needs_hyperscan = pytest.mark.skipif(
    prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here (the DuckDB path runs)"
)


@needs_hyperscan
def test_kept_lines_far_apart_keep_their_numbers_and_the_piece_its_count() -> None:
    """Gaps of many blocks between kept lines (counted by line_breaks), of a few bytes (by count),
    bare breaks and long lines: each kept line's index and the piece's lines as splitting says."""
    lines = (
        ["noise line of a training step, nothing to see"] * 900
        + ["Xid 79 here"]
        + [""] * 3000
        + ["Xid again", "and Xid once more"]
        + ["z" * 5000] * 20
        + ["last Xid"]
        + [""] * 7
    )
    data = "\n".join(lines).encode()
    kept, marked, count = prefilter.LineMatcher(("Xid",)).scan_bytes(data, clean=True)
    assert kept == [(i, line) for i, line in enumerate(lines) if "Xid" in line]
    assert count == len(lines) and not marked
