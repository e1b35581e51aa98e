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
    assert bench.main(["--scales", "4:20k", "--repeat", "2", "--csv", str(rows_file)]) == 0
    printed = capsys.readouterr().out
    assert "marginal / grep -F" in printed and "WRONG" not in printed
    (row,) = list(csv.DictReader(rows_file.open()))
    assert row["correct"] == "True" and int(row["lines"]) >= 20_000 and int(row["hits"]) > 0
    assert float(row["grep_f_s"]) > 0 and float(row["inline_s"]) > 0
    # the marginal is the median of the (tiny, large) pairs' differences, in wall and CPU time
    marginals = [float(x) for x in row["marginals_s"].split()]
    assert len(marginals) == 2  # each written to the ms: their mean may round a ms away from the median's
    assert abs(float(row["marginal_s"]) - max(0.0, sum(marginals) / 2)) <= 0.0015
    assert float(row["marginal_cpu_s"]) >= 0


def test_the_marginal_is_the_median_of_pairs_run_back_to_back():
    """The tiny and the large attempt alternate, each large run's marginal is against the tiny run
    just before it (on a machine slowing down a tick a run, each difference holds one tick, not
    the drift over the whole scale), in wall and in CPU time."""
    clock = iter(range(100))
    order = []

    def run(kind, base):
        def go():
            t = next(clock)
            order.append(kind)
            answer = (base + t * 0.1, 1, "")
            bench.CPU[id(answer)] = base
            return answer

        return go

    pairs = bench.paired(3, run("tiny", 0.5), run("large", 0.7))
    assert order == ["tiny", "large"] * 3
    assert [round(m, 3) for m in pairs.marginals] == [0.3, 0.3, 0.3]  # 0.2 of work + one tick of drift
    assert round(pairs.marginal, 3) == 0.3 and round(pairs.cpu_marginal, 3) == 0.2
    assert pairs.best[0] == 0.7 + 0.1
