"""The multi-writer warehouse for real: DuckLake with its catalog in a real PostgreSQL (Debian's
package, started by tests/services/postgres.py) and a data path on disk or in a real S3 server
(SeaweedFS, tests/services/seaweedfs.py). Three `attribution backfill` processes write at once,
two of them the same attempts, and each ends by maintaining the lake while the others may still
write; afterwards no row is lost or doubled and every analyst view answers exactly as the local
DuckDB file does for the same bundles. On S3, every command a deployment runs (diagnose, backfill,
query, serve) uses the same URL, with the credentials from the AWS variables and never shown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workload_attribution.warehouse.store import Warehouse, WarehouseConfigError, parse_lake, views

ROOT = Path(__file__).resolve().parents[2]


def test_lake_url_parsing():
    lake = parse_lake("ducklake+postgres://attr@db.example:5433/attribution?data_path=/shared/lake")
    assert (lake.dsn, lake.data_path) == ("host=db.example port=5433 dbname=attribution user=attr", "/shared/lake/")
    assert (
        parse_lake("ducklake+postgres://attr@db/attribution?data_path=s3://lake/fleet").data_path == "s3://lake/fleet/"
    )
    assert parse_lake("/var/lib/attribution/warehouse.duckdb") is None
    for bad in (
        "ducklake+postgres://h/db",
        "ducklake+mysql://h/db?data_path=/x",
        "ducklake+postgres://h/?data_path=/x",
        "ducklake+postgres://h/db?data_path=/x'y",
        "ducklake+postgres://h/db?data_path=gs://bucket/x",
    ):
        with pytest.raises(WarehouseConfigError):
            parse_lake(bad)
    # credentials belong in the environment: an option in the URL is refused, and not repeated
    with pytest.raises(WarehouseConfigError, match="unknown option s3_secret") as refused:
        parse_lake("ducklake+postgres://h/db?data_path=s3://b/x&s3_secret=hunter2")
    assert "hunter2" not in str(refused.value)


def test_s3_credentials_come_from_the_aws_variables_and_are_never_shown():
    from workload_attribution.contracts.errors import BadInput
    from workload_attribution.warehouse.object_store import secret_sql

    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr'et", "AWS_ENDPOINT_URL": "https://s3.lab:9000"}
    sql = secret_sql("s3://lake/fleet/", env)
    assert "SECRET 's3cr''et'" in sql and "ENDPOINT 's3.lab:9000'" in sql and "USE_SSL true" in sql
    assert "REGION 'us-east-1'" in sql and "SCOPE 's3://lake/fleet/'" in sql and "URL_STYLE 'path'" in sql
    aws = secret_sql("s3://lake/", {**env, "AWS_ENDPOINT_URL": "", "AWS_REGION": "eu-west-1"})
    assert "ENDPOINT" not in aws and "REGION 'eu-west-1'" in aws  # AWS itself: its own endpoint, by virtual host
    assert "ENDPOINT '127.0.0.1:8333'" in secret_sql("s3://l/", {**env, "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333"})
    with pytest.raises(BadInput, match="set AWS_SECRET_ACCESS_KEY") as missing:
        secret_sql("s3://lake/", {"AWS_ACCESS_KEY_ID": "AKID"})
    with pytest.raises(BadInput, match="AWS_ENDPOINT_URL:") as bad:
        secret_sql("s3://lake/", {**env, "AWS_ENDPOINT_URL": "s3.lab:9000"})
    assert "AKID" not in str(missing.value) + str(bad.value)


@pytest.mark.slow  # with test_lake_stress.py: the proof of one current diagnosis under concurrent writers
def test_concurrent_writers_lose_nothing_and_views_match_local(postgres, seeded_warehouse, tmp_path):
    from workload_attribution.flows.backfill import backfill_inline

    # a dozen of the seeded fleet's attempts, the planted port's among them
    every = sorted(p.parent for p in (seeded_warehouse.parent / "bundles").rglob("attempt.yaml"))
    bundles = [b for b in every if b.parent.name == "network_link"] + [
        b for b in every if b.parent.name != "network_link"
    ][::3]
    shards = [tmp_path / f"shard{i}" for i in range(3)]
    for i, b in enumerate(bundles):
        shutil.copytree(b, shards[i % 3] / b.name)
    for b in bundles[1:8:4]:  # two attempts written by two processes at the same time
        shutil.copytree(b, shards[(bundles.index(b) + 1) % 3] / b.name)
    local_wh = tmp_path / "local.duckdb"
    assert backfill_inline(since="3650d", bundles_dir=str(tmp_path), warehouse=str(local_wh)).failed == 0
    url = (
        f"ducklake+postgres://{postgres.user}@127.0.0.1:{postgres.port}/{postgres.db}"
        f"?data_path={tmp_path / 'lake-data'}"
    )
    env = {**os.environ, "PGPASSWORD": postgres.password}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workload_attribution",
                "backfill",
                "--inline",
                "--bundles",
                str(s),
                "--since",
                "3650d",
                "--warehouse",
                url,
                "--json",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in shards
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, [(o[0][-1500:], o[1][-1500:]) for o in outs]  # summary, stderr

    os.environ["PGPASSWORD"] = postgres.password
    try:
        lake, local = Warehouse(url), Warehouse(local_wh)
        n = sum(1 for b in bundles if "completed" not in b.name)
        count = "SELECT count(*), count(DISTINCT diagnosis_id) FROM diagnoses"
        assert lake.query(count)[1] == local.query(count)[1] == [(n, n)]
        for table in ("diagnosis_symptoms", "diagnosis_affected_nodes", "diagnosis_coverage", "diagnosis_evidence"):
            q = f"SELECT count(*) FROM {table}"
            assert lake.query(q)[1] == local.query(q)[1], table
        for name in views():
            cols, got = lake.query(name)
            cols_local, want = local.query(name)
            # any_value: either example is right; when a rules version was used: these runs' own times
            keep = [i for i, c in enumerate(cols) if c not in ("example_error", "first_used", "last_used")]
            norm = lambda rows, keep=keep: sorted(tuple(str(r[i]) for i in keep) for r in rows)  # noqa: E731
            assert cols == cols_local and norm(got) == norm(want), name
        _, top = lake.query("switch_port_patterns")
        assert (top[0][1], top[0][2], top[0][3]) == ("leaf-07", "17", 5)
    finally:
        os.environ.pop("PGPASSWORD", None)


def test_a_kept_writer_sees_another_writers_commits(postgres, tmp_path, monkeypatch):
    """A process keeps its attached connection to a lake between writes (store._LAKE_WRITERS).
    Another process's write of the same attempt in between must be seen by the next write here,
    which replaces it: one diagnosis per attempt, never two. A kept connection that has died is
    replaced, and the write goes through."""
    from tests.conftest import WORKED
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.warehouse import store

    monkeypatch.setenv("PGPASSWORD", postgres.password)
    db = postgres.create_database("kept_writer")  # a lake of its own (a catalog names its data path)
    url = f"ducklake+postgres://{postgres.user}@127.0.0.1:{postgres.port}/{db}?data_path={tmp_path / 'kept-lake'}"
    lake = Warehouse(url)
    d = diagnose(WORKED, pack=default_pack())
    lake.write(d)
    kept = store._LAKE_WRITERS[url]
    other = subprocess.run(  # another process writes the same attempt
        [
            sys.executable,
            "-c",
            "import sys; from tests.helpers import diagnose; from tests.conftest import WORKED; "
            "from workload_attribution.rules.pack import default_pack; "
            "from workload_attribution.warehouse.store import Warehouse; "
            "Warehouse(sys.argv[1]).write(diagnose(WORKED, pack=default_pack()))",
            url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 0, other.stderr[-2000:]
    key = "SELECT count(*) FROM diagnoses"
    assert lake.query(key)[1] == [(1,)]  # the other process replaced ours
    lake.write(d)  # through the kept connection: it must see the other's row to replace it
    assert store._LAKE_WRITERS[url] is kept
    assert lake.query(key)[1] == [(1,)]
    kept.close()  # a kept connection gone bad: dropped, a new one attached, the write done
    lake.write(d)
    assert store._LAKE_WRITERS[url] is not kept
    assert lake.query(key)[1] == [(1,)]
    store._drop_lake_writer(url)


@pytest.mark.slow  # 30 s of real PostgreSQL (and S3) work: the slow tier, which CI runs too
def test_writes_stay_in_the_catalog_until_maintenance_moves_them_to_files(postgres, tmp_path, monkeypatch):
    """Each write of a diagnosis is a few to a few hundred rows per table: a lake writer inlines them
    in the catalog (DuckLake's data inlining) instead of leaving small Parquet files behind per
    attempt. Warehouse.maintain (the nightly backfill's last step) moves them into files, merges
    and expires; every row, and every analyst view's answer, is the same before and after, and a
    write after maintenance still replaces its attempt's rows."""
    from datetime import timedelta

    from tests.conftest import WORKED
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack
    from workload_attribution.warehouse import store

    monkeypatch.setenv("PGPASSWORD", postgres.password)
    db = postgres.create_database("maintained")
    data = tmp_path / "maintained-lake"
    url = f"ducklake+postgres://{postgres.user}@127.0.0.1:{postgres.port}/{db}?data_path={data}"
    lake = Warehouse(url)
    d = diagnose(WORKED, pack=default_pack())

    def as_job(i: int):  # the same diagnosis as another attempt
        job = d.attempt.model_copy(update={"job_id": f"job-{i}"})
        return d.model_copy(update={"diagnosis_id": f"{d.diagnosis_id}-{i}", "attempt": job})

    for i in range(5):
        lake.write(as_job(i))
    files = lambda: sorted(data.rglob("*.parquet"))  # noqa: E731
    tables = ("diagnoses", "diagnosis_symptoms", "diagnosis_affected_nodes", "diagnosis_coverage", "diagnosis_evidence")
    counts = lambda: [lake.query(f"SELECT count(*) FROM {t}")[1][0][0] for t in tables]  # noqa: E731
    answers = lambda: {name: sorted(map(str, lake.query(name)[1])) for name in views()}  # noqa: E731
    before, seen = counts(), answers()
    assert before[0] == 5 and min(before[1:]) > 0
    assert files() == []  # nothing written to the data path yet: every row is in the catalog

    done = lake.maintain()
    # the diagnoses' rows, and the few of the lake's own tables (schema version, rules versions)
    assert done["backend"] == "ducklake" and done["rows_moved_to_files"] >= sum(before)
    assert files(), "maintenance wrote the inlined rows to Parquet files"
    assert counts() == before and answers() == seen

    expired = lake.maintain(snapshots_kept=timedelta(0))  # nothing left to move; the history goes
    assert expired["rows_moved_to_files"] == 0 and expired["snapshots_expired"] > 0
    assert counts() == before and answers() == seen

    lake.write(as_job(0))
    assert counts() == before  # the attempt's rows replaced, across files and catalog alike

    for i in range(5, 8):  # the next day's attempts: their flushed files and the first day's merge
        lake.write(as_job(i))
    again = lake.maintain()
    # the first day's files had rows deleted (job-0 again): rewritten, then merged with the new ones
    assert again["rows_moved_to_files"] > 0 and again["files_rewritten"] > 0 and again["files_merged"] >= 2, again
    assert counts()[0] == 8
    store._drop_lake_writer(url)


def attribution(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workload_attribution", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow  # 30 s of real PostgreSQL (and S3) work: the slow tier, which CI runs too
def test_a_lake_in_a_bucket_serves_diagnose_backfill_query_and_serve(postgres, s3, tmp_path):
    """DuckLake with its catalog in PostgreSQL and its data in a real S3 server: the commands a
    deployment runs take the same URL, the credentials come from the AWS variables (never the URL),
    and neither the credentials nor the URL's password-free form leak them into any output."""
    import httpx

    from tests.services.prometheus import free_port
    from tests.waiting import wait_http

    db = postgres.create_database("in_bucket")
    url = f"ducklake+postgres://{postgres.user}@127.0.0.1:{postgres.port}/{db}?data_path=s3://{s3.bucket}/fleet/"
    env = {**os.environ, "PGPASSWORD": postgres.password, **s3.env, "HOME": str(tmp_path)}
    said = []

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess:
        done = attribution(*args, env=env)
        said.append(done.stdout + done.stderr)
        assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    run("diagnose", "-q", "--inline", "tests/examples/xid149-worked", "--warehouse", url)
    for name in ("xid79_offbus_cascade-1-0", "ib_link_down_one_host-1-0", "cuda_oom_one_rank-1-0"):
        shutil.copytree(ROOT / "tests" / "regression" / name, tmp_path / "bundles" / name)
    backfill = run(
        "backfill", "--inline", "--bundles", str(tmp_path / "bundles"), "--since", "3650d", "--warehouse", url
    )
    assert "warehouse maintained" in backfill.stdout  # its last step moved the rows into the bucket
    counted = run(
        "query",
        "SELECT (SELECT count(*) FROM diagnoses) AS n, "
        "(SELECT count(*) FROM ducklake_list_files('warehouse', 'diagnoses')) AS files",
        "--warehouse",
        url,
        "--format",
        "csv",
    )
    n, files = map(int, counted.stdout.split()[-1].split(","))
    assert n == 4 and files >= 1, counted.stdout
    top = run("query", "failures_per_host", "--warehouse", url, "--format", "json")
    assert "gb-r12-n04" in top.stdout and "hgx-r06-n2" in top.stdout

    (tmp_path / "attribution.yaml").write_text(f"warehouse: '{url}'\n")
    port = free_port()
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workload_attribution",
            "serve",
            "--dashboard-only",
            "--insecure-no-auth",
            "--port",
            str(port),
            "--config",
            str(tmp_path / "attribution.yaml"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", "attribution serve", 90, serve, log)
        listed = httpx.get(f"http://127.0.0.1:{port}/v1/diagnoses", params={"limit": 1000}, timeout=60).json()
        assert len(listed["items"]) == n
        page = httpx.get(f"http://127.0.0.1:{port}/ui", timeout=60)
        assert page.status_code == 200
    finally:
        serve.terminate()
        serve.wait(30)
    said.append(log.read_text())

    # without the secret key: refused at once, naming the variable, not the other one's value
    env.pop("AWS_SECRET_ACCESS_KEY")
    refused = run("query", "SELECT 1", "--warehouse", url, code=2)
    assert "AWS_SECRET_ACCESS_KEY" in refused.stderr
    leaked = [i for i, text in enumerate(said) if s3.env["AWS_SECRET_ACCESS_KEY"] in text]
    assert not leaked, leaked
