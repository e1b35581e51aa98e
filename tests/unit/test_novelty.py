"""Novel log templates in doubtful diagnoses (tasks/novelty.py), the templates kept in the warehouse
(attempt_templates), `attribution diff ... --against last-good`, and the templates_new_this_week view."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.conftest import WORKED
from tests.helpers import diagnose
from tests.novel_jobs import FORMS, PLANTED_WORD, make_job
from workload_attribution.cli import main
from workload_attribution.cli.diagnose import summary
from workload_attribution.contracts.vocabulary import Confidence, SubDomain, TerminalState
from workload_attribution.dashboard import diagnosis_page
from workload_attribution.rules.pack import default_pack
from workload_attribution.tasks import novelty, templates
from workload_attribution.warehouse.store import Warehouse

FIRST = 3  # what `attribution diagnose` shows


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def planted_rank(d) -> int | None:
    """Where the planted message is among the diagnosis' novel templates (1-based), if it is."""
    for i, n in enumerate(d.novel_templates, 1):
        if PLANTED_WORD in n.line:
            return i
    return None


def unknown_to_the_rules(d) -> bool:
    return not any(PLANTED_WORD in e.text for e in d.evidence)


def test_a_planted_message_is_among_the_first_novel_templates_and_diff_shows_it(tmp_path):
    """The done-when, small: one job's good attempt diagnosed first (its templates kept once, a
    retry replacing them), then two doubtful attempts (insufficient_evidence, ambiguous) each with
    a message no rule knows; it is among the first 3 novel templates of each (and of `attribution
    diagnose`'s summary), and `attribution diff ATTEMPT --against last-good` lists it."""
    job = make_job(tmp_path, seed=1, classes=["insufficient_evidence", "ambiguous"], hosts=4)
    wh = tmp_path / "w.duckdb"
    pack = default_pack()
    good = diagnose(job.good, warehouse=wh, pack=pack)
    assert good.terminal_state == "completed" and good.novelty is None and good.novel_templates == []
    # the good attempt keeps its templates; diagnosed again (a retry), its rows are replaced, not added
    count = "SELECT count(*), count(DISTINCT template), max(templates_total) FROM attempt_templates"
    first = Warehouse(wh).query(count)[1]
    assert first[0][0] > 0 and first[0][0] == first[0][1] == first[0][2]
    diagnose(job.good, warehouse=wh, pack=pack)
    assert Warehouse(wh).query(count)[1] == first
    # with no good attempt and no fleet in its warehouse, a doubtful one says there is nothing to compare with
    alone = diagnose(job.doubtful[0], warehouse=tmp_path / "alone.duckdb", pack=pack)
    assert alone.novel_templates == [] and "nothing to compare with" in (alone.novelty.note or "")
    for path in job.doubtful:
        d = diagnose(path, warehouse=wh, pack=pack)
        assert novelty.doubtful(d) and unknown_to_the_rules(d), (path.name, d.sub_domain, d.confidence)
        assert d.novelty is not None and d.novelty.baseline_diagnosis_id == good.diagnosis_id
        rank = planted_rank(d)
        assert rank is not None and rank <= FIRST, (path.name, [n.line for n in d.novel_templates[:5]])
        assert d.novel_templates[rank - 1].why.startswith("not in the job's last good attempt")
        shown = [line for line in summary(d).splitlines() if line.startswith("  novel      :")]
        assert 1 <= len(shown) <= FIRST + 1 and any(PLANTED_WORD in line for line in shown)
        page = diagnosis_page(json.loads(d.model_dump_json()))  # the dashboard's page of it
        assert "New in its logs" in page and PLANTED_WORD in page
    code, out, err = cli("diff", str(job.doubtful[0]), "--against", "last-good", "--warehouse", str(wh), "--limit", "3")
    assert code == 0, err
    assert "(last-good)" in out.splitlines()[0] and PLANTED_WORD in out
    # an attempt the warehouse holds, by job and attempt, against the good one by its id
    named = f"{job.cluster}/{job.job_id}#1"
    code, out, err = cli("diff", named, "--against", good.diagnosis_id, "--warehouse", str(wh))
    assert code == 0, err
    assert PLANTED_WORD in out


def test_a_confident_diagnosis_reads_no_templates(tmp_path, monkeypatch):
    """The second pass over the bundle is for doubtful and completed attempts only: a confident
    failure diagnosis costs nothing more, and keeps no rows."""
    calls: list[Path] = []
    real = templates.templates_of

    def counted(bundle: Path, *args, **kwargs):
        calls.append(Path(bundle))
        return real(bundle, *args, **kwargs)

    monkeypatch.setattr(templates, "templates_of", counted)
    wh = tmp_path / "w.duckdb"
    d = diagnose(WORKED, warehouse=wh)
    assert d.confidence == "high" and not novelty.doubtful(d)
    assert calls == [] and d.novelty is None and d.novel_templates == []
    assert Warehouse(wh).query("SELECT count(*) FROM attempt_templates")[1] == [(0,)]


@pytest.mark.slow
def test_the_planted_message_is_among_the_first_three_in_95_percent_of_attempts(tmp_path):
    """The done-when at size: 5 jobs, one per application time stamp form (two of them stamp no
    line: the planted one among them), each with its good attempt diagnosed first and 10 doubtful
    attempts (insufficient_evidence and ambiguous), each with one message no rule knows."""
    pack = default_pack()
    ranks, names = [], []
    for seed, form in enumerate(FORMS, 10):
        job = make_job(tmp_path, seed=seed, classes=["insufficient_evidence", "ambiguous"] * 5, app_time=form)
        wh = tmp_path / f"w{seed}.duckdb"
        diagnose(job.good, warehouse=wh, pack=pack)
        for path in job.doubtful:
            d = diagnose(path, warehouse=wh, pack=pack)
            assert novelty.doubtful(d) and unknown_to_the_rules(d), (path, d.sub_domain, d.confidence)
            ranks.append(planted_rank(d))
            names.append(f"{form} {path.name}")
    hits = sum(1 for r in ranks if r is not None and r <= FIRST)
    missed = [(n, r) for n, r in zip(names, ranks) if r is None or r > FIRST]
    print(f"planted message among the first {FIRST}: {hits} of {len(ranks)}; missed (rank): {missed}")
    assert hits >= 0.95 * len(ranks), list(zip(names, ranks))


@pytest.fixture(scope="module")
def worked():
    """The worked example's diagnosis, not stored (a confident one)."""
    return diagnose(WORKED, warehouse=None)


def test_doubtful_without_a_bundle_or_a_warehouse_says_why_and_keeps_nothing(worked, tmp_path):
    """Live sources (no bundle) and --no-warehouse: an empty list and a note, no rows, no read."""
    doubt = worked.model_copy(update={"sub_domain": SubDomain.ambiguous, "confidence": Confidence.low})
    d, kept = novelty.read_templates(doubt, Warehouse(tmp_path / "w.duckdb"), {"syslog": ("loki", object())})
    assert kept is None and d.novel_templates == [] and "no bundle" in (d.novelty.note or "")
    d = novelty.without_warehouse(doubt)
    assert d.novel_templates == [] and "no warehouse" in (d.novelty.note or "")
    assert novelty.without_warehouse(worked).novelty is None  # a confident one carries none


def test_templates_new_this_week_lists_only_what_no_earlier_attempt_logged(worked, tmp_path):
    """The analyst view: a template logged this week and never before, by host, switch port and job;
    one an attempt of an earlier week logged too is not new. The ports are those the host of the
    template's first line was cabled to when that line was logged (both its HCAs' ports, not the one
    it was recabled to after, not another cluster's); a host the topology does not place has none."""
    from datetime import datetime, timedelta, timezone

    from workload_attribution.warehouse.templates import AttemptTemplates, TemplateRow

    d = worked
    now = datetime.now(timezone.utc)
    wh = Warehouse(tmp_path / "w.duckdb")

    def written(job: str, end: datetime, templates: list[tuple[str, str]]) -> None:
        rows = [
            TemplateRow(t, "error" if "failed" in t else "info", 2, "app", node, "logs/app/x.log", i, end, t)
            for i, (t, node) in enumerate(templates, 1)
        ]
        attempt = d.attempt.model_copy(update={"job_id": job, "start": end - timedelta(hours=1), "end": end})
        wh.write(d.model_copy(update={"diagnosis_id": job, "attempt": attempt}), None, AttemptTemplates(rows, 10, 2))

    host, cluster = "gb-r12-n02", d.attempt.cluster
    links = [("leaf-12", 18, host, "host", "mlx5_0"), ("leaf-13", 18, host, "host", "mlx5_1")]
    wh.load_topology(cluster, links, now - timedelta(days=30), "topology.yaml")
    wh.load_topology(cluster, [("leaf-12", 40, host, "host", "mlx5_0")], now + timedelta(hours=1), "recabled")
    wh.load_topology("elsewhere", [("leaf-99", 1, host, "host", "mlx5_0")], now - timedelta(days=30), "other")
    written("old", now - timedelta(days=10), [("step <*> done", host), ("shared <*> template", host)])
    written(
        "new",
        now,
        [("shared <*> template", host), ("queue <*> wedged, handshake failed", host), ("fan <*> slow", "gb-r99-n01")],
    )
    cols, rows = wh.query("templates_new_this_week")
    got = [dict(zip(cols, r)) for r in rows]
    assert [
        (r["template"], r["host"], r["switch_ports"], r["job_id"], r["level"], r["attempts_this_week"]) for r in got
    ] == [
        ("queue <*> wedged, handshake failed", host, ["leaf-12:18", "leaf-13:18"], "new", "error", 1),
        ("fan <*> slow", "gb-r99-n01", None, "new", "info", 1),
    ]
    assert got[0]["first"] == "logs/app/x.log:2"


def test_a_warehouse_with_the_view_before_switch_ports_gets_them_on_a_writers_open(worked, tmp_path):
    """The view as the code before it had it (by host and job, no switch_ports) is replaced when a
    writer next opens the warehouse (its views' digest differs): no schema version needed."""
    import duckdb

    path = tmp_path / "w.duckdb"
    wh = Warehouse(path)
    wh.write(worked)
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE OR REPLACE VIEW templates_new_this_week AS SELECT template, level, node AS host, job_id "
        "FROM attempt_templates"
    )
    con.execute("UPDATE warehouse_meta SET value = 'before-switch-ports' WHERE key = 'views'")
    con.close()
    assert "switch_ports" not in wh.query("SELECT * FROM templates_new_this_week")[0]
    with wh.connect():
        pass
    cols = wh.query("SELECT * FROM templates_new_this_week")[0]
    assert cols[:4] == ["template", "level", "host", "switch_ports"] and "job_id" in cols


def test_last_good_is_the_same_jobs_latest_before_then_the_same_name_and_attempts_are_found_by_name(worked, tmp_path):
    """The baseline: the same job id before the same name, the latest that ended no later than the
    attempt, never the attempt itself; an attempt is named by id, JOB_ID, CLUSTER/JOB_ID, #ATTEMPT."""
    from datetime import timedelta

    from workload_attribution.warehouse.templates import AttemptTemplates, TemplateRow, find_attempt, last_good

    wh = Warehouse(tmp_path / "w.duckdb")
    a = worked.attempt
    row = TemplateRow("t <*>", "info", 1, "app", None, "logs/app/x.log", 1, None, "t 1")

    def good(diagnosis_id: str, job_id: str, attempt: int, days: int) -> None:
        scope = a.model_copy(update={"job_id": job_id, "attempt": attempt, "end": a.end + timedelta(days=days)})
        d = worked.model_copy(
            update={
                "diagnosis_id": diagnosis_id,
                "attempt": scope,
                "terminal_state": TerminalState.completed,
                "sub_domain": SubDomain.none,
                "root_cause": None,
            }
        )
        wh.write(d, None, AttemptTemplates([row], 1, 1))

    good("same-name", "other-job", 0, -1)
    good("same-job", a.job_id, 1, -3)
    good("same-job-later", a.job_id, 2, +1)
    good("ns/name", "team-a/train-7", 0, -5)

    def found(fn):
        return wh.read_templates(fn, None)

    assert found(lambda con: last_good(con, a)).diagnosis_id == "same-job"
    other = a.model_copy(update={"job_id": "never-good"})
    assert found(lambda con: last_good(con, other)).diagnosis_id == "same-name"  # resubmitted under a new id
    nameless = other.model_copy(update={"name": None})
    assert found(lambda con: last_good(con, nameless)) is None
    assert found(lambda con: find_attempt(con, "same-job")).attempt == 1
    assert found(lambda con: find_attempt(con, a.job_id)).diagnosis_id == "same-job-later"  # the latest
    assert found(lambda con: find_attempt(con, f"{a.cluster}/{a.job_id}#1")).diagnosis_id == "same-job"
    assert found(lambda con: find_attempt(con, "team-a/train-7")).diagnosis_id == "ns/name"
    assert found(lambda con: find_attempt(con, f"{a.cluster}/team-a/train-7#0")).diagnosis_id == "ns/name"
    assert found(lambda con: find_attempt(con, "nobody#x")) is None
