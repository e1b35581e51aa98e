"""The scan benchmark (tests/bench/bench.py, issue 27's measure of the catalogs' cost against one
`grep -F` pass) runs in CI at a small scale, so it cannot rot between the runs that measure: it
generates an attempt, times grep and the whole CLI, finds the planted fault and appends its row.
The figures themselves come from `python -m tests.bench.bench` on a quiet machine (docs/benchmarks.md);
nothing here asserts a time."""

from __future__ import annotations

import csv

from tests.bench import bench


def test_the_scan_benchmark_runs_and_finds_the_planted_fault(tmp_path, capsys):
    rows_file = tmp_path / "bench.csv"
    assert bench.main(["--scales", "4:20k", "--repeat", "1", "--csv", str(rows_file)]) == 0
    printed = capsys.readouterr().out
    assert "marginal / grep -F" in printed and "WRONG" not in printed
    (row,) = list(csv.DictReader(rows_file.open()))
    assert row["correct"] == "True" and int(row["lines"]) >= 20_000 and int(row["hits"]) > 0
    assert float(row["grep_f_s"]) > 0 and float(row["inline_s"]) > 0
