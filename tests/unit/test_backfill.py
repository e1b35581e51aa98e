"""Backfill planning and the inline backfill over a bundle tree: done, stale-rules and new attempts,
unreadable bundles reported, the window respected, a second run a no-op."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import duckdb
import pytest

from tests.conftest import EXAMPLES
from workload_attribution.contracts.identity import AttemptId, EndedAttempt, Target
from workload_attribution.flows.backfill import backfill_inline, parse_when, plan

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text, want",
    [
        ("now", NOW),
        ("26h", datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)),
        ("7d", datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)),
        ("90m", datetime(2026, 12, 2, 10, 30, tzinfo=timezone.utc)),
        ("2026-11-20T10:00:00Z", datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)),
        ("2026-11-20T10:00:00", datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)),
        ("2026-11-20T11:00:00+01:00", datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)),
    ],
)
def test_parse_when(text, want):
    assert parse_when(text, NOW) == want


@pytest.mark.parametrize("bad", ["yesterday", "7 days", "-3h", "", "2026-13-01"])
def test_parse_when_refuses(bad):
    with pytest.raises(ValueError, match="is not a time"):
        parse_when(bad, NOW)


def test_plan_sorts_done_stale_new_and_collapses_repeats():
    a, b, c = (
        EndedAttempt(AttemptId(cluster="eos", scheduler="slurm", job_id=str(i)), Target(cluster="eos", job_id=str(i)))
        for i in (1, 2, 3)
    )
    p = plan([a, b, c, a], {a.key: "v2", b.key: "v1"}, "v2")
    assert p.skipped == [a] and p.todo == [(b, "stale_rules"), (c, "new")]
    # a newer pack's diagnosis would be kept (warehouse/precedence.py): not redone by an older pack
    p = plan([a, b, c], {a.key: "2026.12.1+aaa", b.key: "2026.11.2+bbb", c.key: "2026.12.1+ccc"}, "2026.12.1+ccc")
    assert p.todo == [(a, "stale_rules"), (b, "stale_rules")] and p.skipped == [c]
    assert plan([a], {a.key: "2027.1.1+ddd"}, "2026.12.1+ccc").skipped == [a]
    assert plan([a, b], {a.key: "v2"}, "v2", force=True).todo == [(a, "forced"), (b, "forced")]


def test_inline_backfill_over_a_bundle_tree(tmp_path):
    tree = tmp_path / "tree"
    for name in ("xid79_offbus_cascade-1-0", "cuda_oom_one_rank-1-0", "slurm_time_limit-1-0", "completed_clean-1-0"):
        shutil.copytree(EXAMPLES / name, tree / "2026" / name)
    (tree / "broken").mkdir()
    (tree / "broken" / "attempt.yaml").write_text("cluster: [unclosed\n")
    wh = str(tmp_path / "w.duckdb")
    first = backfill_inline(since="3650d", bundles_dir=str(tree), warehouse=wh)
    # the completed attempt is not a failure: not found; the broken bundle is found and reported
    assert (first.found, first.diagnosed, first.skipped, first.failed) == (4, 3, 0, 1)
    assert first.failures[0]["attempt"].endswith("broken") and "attempt.yaml" in first.failures[0]["error"]
    assert sum(first.by_terminal_state.values()) == 3
    # the night's last step
    assert first.maintenance == {"backend": "duckdb", "checkpointed": True, "blame_history_sorted": 8}

    with duckdb.connect(wh) as con:
        old = con.execute("SELECT job_id FROM diagnoses ORDER BY job_id LIMIT 1").fetchone()[0]
        con.execute("UPDATE diagnoses SET rules_version = 'old' WHERE job_id = ?", [old])
    lines = []
    second = backfill_inline(
        since="3650d",
        bundles_dir=str(tree),
        warehouse=wh,
        progress=lambda i, n, a, outcome: lines.append((a.id.job_id, outcome)),
    )
    assert (second.diagnosed, second.skipped, second.redone_stale) == (1, 2, 1)
    assert lines == [(old, lines[0][1])] and lines[0][1].endswith("(rules changed)")
    with duckdb.connect(wh, read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT rules_version) FROM diagnoses").fetchone() == (3, 1)

    # a window that ends before every attempt finds nothing
    assert (
        backfill_inline(
            since="2000-01-01T00:00:00Z", until="2001-01-01T00:00:00Z", bundles_dir=str(tree), warehouse=wh
        ).found
        == 1
    )  # only the unreadable bundle, whose time is unknown


def test_backfill_cli_refuses_bad_windows(capsys, tmp_path):
    from workload_attribution.cli import main

    wh = ["--warehouse", str(tmp_path / "w.duckdb")]
    assert main(["backfill", "--inline", "--bundles", str(EXAMPLES), "--since", "soon", *wh]) == 2
    assert "--since" in capsys.readouterr().err
    # spans count back from now: 1h ago is after 2h ago
    assert main(["backfill", "--inline", "--bundles", str(EXAMPLES), "--since", "1h", "--until", "2h", *wh]) == 2
    assert "must be before" in capsys.readouterr().err


def test_a_failed_warehouse_maintenance_is_reported_and_fails_the_run(capsys, tmp_path, monkeypatch):
    """The diagnoses are written before maintenance; its failure is the summary's and exit 4 (a check failed)."""
    from workload_attribution.cli import main
    from workload_attribution.warehouse.store import Warehouse

    def broken(self, *a, **k):
        raise duckdb.IOException("IO Error: No space left on device")

    monkeypatch.setattr(Warehouse, "maintain", broken)
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES / "cuda_oom_one_rank-1-0", tree / "cuda_oom_one_rank-1-0")
    wh = tmp_path / "w.duckdb"
    args = ["backfill", "--inline", "--bundles", str(tree), "--since", "3650d", "--warehouse", str(wh)]
    assert main(args) == 4
    assert "WAREHOUSE MAINTENANCE FAILED: IOException: IO Error: No space left on device" in capsys.readouterr().out
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM diagnoses").fetchone() == (1,)
