"""Hunt flaky tests: run the suite (or a subset) N times in a row, each in a new random order, while
another process keeps one core busy, and report every test that ever failed.

    python -m tests.flake_hunt --runs 5                        # the whole suite, 5 times, one core hogged
    python -m tests.flake_hunt --runs 20 -- tests/unit -k lake  # a subset (pytest's own arguments after --)
    python -m tests.flake_hunt --runs 3 --no-hog                # without the CPU hog

Each run's order is pytest-randomly's (its seed is printed per run, so a failure can be replayed with
`python -m pytest -p randomly --randomly-seed=SEED ...`); JUnit reports and each run's output are kept
in --keep (default: a new temporary directory, printed). Exit status: 0 when no test failed in any
run, 1 otherwise. Rerunning failures until they pass is not a fix: a test listed here is a defect.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def cpu_hog(enabled: bool) -> Iterator[None]:
    """One process spinning on one core for the length of the block (what a busy CI host looks like)."""
    if not enabled:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def failures(report: Path) -> list[str]:
    """Test ids that failed or errored in a JUnit report (an unreadable report: the run itself failed)."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return ["<the run wrote no readable report>"]
    out = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return out


def one_run(n: int, keep: Path, seed: int, pytest_args: list[str]) -> tuple[int, list[str], float]:
    report, log = keep / f"run-{n}.xml", keep / f"run-{n}.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "randomly", f"--randomly-seed={seed}"]
    cmd += [f"--junitxml={report}", *pytest_args]
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy()).returncode
    took = time.monotonic() - started
    failed = failures(report) if code != 0 else []
    if code != 0 and not failed:
        failed = [f"<pytest exited {code} with no failed test: see {log}>"]
    return code, failed, took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.flake_hunt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="how many runs in a row (default 5)")
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog beside the runs")
    parser.add_argument("--keep", type=Path, help="where reports and logs go (default: a new temporary directory)")
    parser.add_argument("pytest_args", nargs="*", help="pytest's own arguments (after --): paths, -k, -n ...")
    args = parser.parse_args(argv)
    keep = args.keep or Path(tempfile.mkdtemp(prefix="flake-hunt-"))
    keep.mkdir(parents=True, exist_ok=True)
    seeds = [random.SystemRandom().randrange(1, 2**31) for _ in range(args.runs)]
    ever: dict[str, list[int]] = defaultdict(list)
    print(f"flake hunt: {args.runs} run(s), CPU hog {'off' if args.no_hog else 'on'}, reports in {keep}", flush=True)
    with cpu_hog(not args.no_hog):
        for n, seed in enumerate(seeds, 1):
            code, failed, took = one_run(n, keep, seed, args.pytest_args)
            for test in failed:
                ever[test].append(seed)
            print(f"run {n}/{args.runs}: seed {seed}, exit {code}, {len(failed)} failed, {took:.0f} s", flush=True)
    if not ever:
        print(f"no test failed in {args.runs} run(s)")
        return 0
    print(f"{len(ever)} test(s) failed in at least one of {args.runs} run(s):")
    for test, failed_seeds in sorted(ever.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(failed_seeds)}/{args.runs}  {test}  (seeds {', '.join(map(str, failed_seeds))})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
