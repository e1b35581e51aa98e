"""The bad-input corpus: hostile or broken bundles through the CLI, each with its exact outcome.

What a user sees is the contract: exit 0 with a diagnosis whose coverage says what was wrong, or
exit 2 with one line naming the problem; never a traceback, never a hang, never a file outside
the bundle read. Each case starts from the worked example (XID 149: an NVLink fault on gb-r12-n04)
and breaks one thing.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import WORKED
from workload_attribution.cli import main

HOST = "gb-r12-n04"


@pytest.fixture
def bundle(tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(WORKED, dst)
    return dst


def run(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["diagnose", "--inline", "--no-warehouse", "--json", *map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, (json.loads(out) if code == 0 else None), err


def coverage(d: dict, source: str) -> dict:
    return next(c for c in d["coverage"] if c["source"] == source)


def still_right(d: dict) -> None:
    """The planted root cause survives the damage."""
    assert (d["terminal_state"], d["sub_domain"]) == ("hardware_failure", "nvlink"), (
        d["terminal_state"],
        d["sub_domain"],
    )
    assert d["root_cause"]["node"] == HOST


def one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("attribution: "), err
    for w in words:
        assert w in err, (w, err)


# ---- log folders ---------------------------------------------------------------------------------


def test_binary_file_in_a_log_folder(bundle, capsys):
    (bundle / "logs" / "syslog" / "core.12345").write_bytes(bytes(range(256)) * 4000 + b"\n\x7fELF\x00\x00")
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    cov = coverage(d, "syslog")
    assert cov["status"] == "partial" and cov["details"]["lines_with_bad_bytes"] >= 1


def test_a_200_mb_single_line(bundle, capsys):
    with open(bundle / "logs" / "app" / f"{HOST}.log", "ab") as fh:
        for _ in range(200):
            fh.write(b"A" * (1 << 20))
        fh.write(b"\n")
    started = time.monotonic()
    code, d, _ = run(capsys, bundle)
    assert code == 0 and time.monotonic() - started < 60
    still_right(d)
    cov = coverage(d, "app")
    # kept whole in the file, stored cut at 16 KiB: nothing lost, so the source is still ok
    assert cov["status"] == "ok" and cov["details"]["long_lines"] == 1


def test_nul_bytes_and_mixed_encodings(bundle, capsys):
    log = bundle / "logs" / "syslog" / f"{HOST}.log"
    log.write_bytes(
        log.read_bytes()
        + "Nov 20 13:10:00 gb-r12-n04 kernel: Grüße aus Köln\n".encode("latin-1")
        + "Nov 20 13:10:01 gb-r12-n04 kernel: \u65e5\u672c\n".encode("utf-16")
        + b"Nov 20 13:10:02 gb-r12-n04 kernel: a\x00b\x00c\n"
    )
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    assert coverage(d, "syslog")["details"]["lines_with_bad_bytes"] >= 2


def test_symlink_outside_the_bundle_is_refused_and_not_read(bundle, tmp_path, capsys):
    secret = tmp_path / "secret.log"
    secret.write_text("Nov 20 13:00:00 evil kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")
    os.symlink(secret, bundle / "logs" / "syslog" / "evil.log")
    os.symlink(secret, bundle / "metrics" / "evil.prom")
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    assert any("evil.log" in r and "outside the bundle" in r for r in coverage(d, "syslog")["details"]["refused"])
    assert "evil" not in json.dumps(d["evidence"]) and "evil" not in d["affected_nodes"]


def test_directory_loop_in_a_log_folder_does_not_hang(bundle, capsys):
    os.symlink("..", bundle / "logs" / "app" / "loop")
    os.symlink(bundle / "logs", bundle / "logs" / "syslog" / "up")
    started = time.monotonic()
    code, d, _ = run(capsys, bundle)
    assert code == 0 and time.monotonic() - started < 30
    still_right(d)
    assert "loop/: a directory, not read" in " ".join(coverage(d, "app")["details"]["not_read"])


def test_bundle_path_with_dotdot_is_resolved_and_evidence_stays_relative(bundle, capsys):
    code, d, _ = run(capsys, bundle.parent / "bundle" / ".." / "bundle")
    assert code == 0
    still_right(d)
    assert all(not e["ref"].startswith(("/", "..")) and "/../" not in e["ref"] for e in d["evidence"])


# ---- attempt.yaml --------------------------------------------------------------------------------

GOOD = (
    "cluster: c\nscheduler: slurm\njob_id: 1\nattempt: 0\nnodes: [a]\nstart: 2026-01-01T00:00:00Z\n"
    "end: 2026-01-01T01:00:00Z\nstate: FAILED\n"
)


@pytest.mark.parametrize(
    "content,words",
    [
        (None, ["no attempt.yaml"]),
        (GOOD.replace("attempt: 0", "attempt: many"), ["field 'attempt'"]),
        (GOOD.replace("nodes: [a]", "nodes: a-string"), ["field 'nodes'"]),
        (GOOD.replace("end: 2026-01-01T01:00:00Z", "end: 2025-12-31T00:00:00Z"), ["end"]),
        (GOOD.replace("scheduler: slurm", "scheduler: sge"), ["field 'scheduler'"]),
        (GOOD.replace("start: 2026-01-01T00:00:00Z", "start: not-a-time"), ["field 'start'"]),
        ("cluster: &a [*a]\n", ["field 'cluster'"]),  # a self-referencing alias: loaded as a cycle, refused by type
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
            "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
            "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
            "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\nnodes: *h\n"
            + GOOD.replace("nodes: [a]\n", ""),
            ["field 'nodes"],
        ),
        ("!!python/object/apply:os.system ['touch /tmp/attribution-pwned']\n", ["YAML", "python/object/apply"]),
        (GOOD + "extra: !!python/name:os.system\n", ["YAML"]),
        ("\x00\x01binary", ["YAML"]),
        ("", ["mapping"]),
    ],
)
def test_bad_attempt_yaml_is_exit_2_with_the_reason(tmp_path, capsys, content, words):
    b = tmp_path / "b"
    b.mkdir()
    if content is not None:
        (b / "attempt.yaml").write_text(content)
    started = time.monotonic()
    code, _, err = run(capsys, b)
    one_line(code, err, *words)
    assert time.monotonic() - started < 10
    assert not Path("/tmp/attribution-pwned").exists()


def test_attempt_yaml_as_a_symlink_outside_is_refused(tmp_path, capsys):
    b = tmp_path / "b"
    b.mkdir()
    (tmp_path / "elsewhere.yaml").write_text(GOOD)
    os.symlink(tmp_path / "elsewhere.yaml", b / "attempt.yaml")
    code, _, err = run(capsys, b)
    one_line(code, err, "outside the bundle")


def test_not_a_directory(tmp_path, capsys):
    code, _, err = run(capsys, tmp_path / "nope")
    one_line(code, err, "no such bundle directory")


# ---- records, metrics, topology, time --------------------------------------------------------------


def test_sacct_of_another_job_is_refused_not_used(bundle, capsys):
    doc = json.loads((bundle / "scheduler" / "sacct.json").read_text())
    doc["jobs"][0]["job_id"] = 999
    (bundle / "scheduler" / "sacct.json").write_text(json.dumps(doc))
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    cov = coverage(d, "sacct")
    assert cov["status"] == "error" and "not job 4191701" in cov["error"]


def test_metrics_with_duplicate_and_out_of_order_samples(bundle, capsys):
    prom = bundle / "metrics" / "range-export.prom"
    lines = [x for x in prom.read_text().splitlines() if x and not x.startswith("#")]
    prom.write_text("\n".join(list(reversed(lines)) + lines[:5]) + "\n")
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    cov = coverage(d, "metrics")
    assert cov["status"] == "ok" and cov["details"]["duplicate_samples"] == 5
    assert cov["observations"] == len(lines)


def test_topology_naming_unknown_hosts(bundle, capsys):
    topo = bundle / "topology.yaml"
    topo.write_text(topo.read_text().replace(HOST, "host-nobody-knows", 1))
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    assert coverage(d, "topology")["details"]["hosts_outside_allocation"] >= 1


def test_timestamps_years_away_from_the_attempt_are_not_evidence(bundle, capsys):
    log = bundle / "logs" / "syslog" / "gb-r12-n01.log"
    log.write_text(
        log.read_text()
        + "2019-03-01T00:00:00Z gb-r12-n01 kernel: NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus.\n"
        + "2041-03-01T00:00:00Z gb-r12-n01 kernel: NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus.\n"
    )
    code, d, _ = run(capsys, bundle)
    assert code == 0
    still_right(d)
    assert "gb-r12-n01" not in [c["node"] for c in d["candidates"]]
    assert d["root_cause"]["node"] == HOST


def test_unreadable_file_is_an_error_not_a_crash(bundle, capsys):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    f = bundle / "logs" / "syslog" / f"{HOST}.log"
    f.chmod(0)
    code, d, _ = run(capsys, bundle)
    assert code == 0
    assert coverage(d, "syslog")["status"] in ("error", "partial")


# ---- rules ---------------------------------------------------------------------------------------


def _rules_copy(tmp_path: Path) -> Path:
    from workload_attribution.rules.pack import RULES_DIR

    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


SLOW_RULE = """id: slow-verdict
version: 1
phase: final
description: a verdict rule whose query never finishes in time
output: verdicts
sql: |
  SELECT 'unknown' AS terminal_state, 'hang' AS sub_domain
  FROM (SELECT sum(hash(i)) AS s FROM range(100000000000) t(i)) WHERE s = 0
tests:
  - name: t
"""
BAD_SQL_RULE = SLOW_RULE.replace("slow-verdict", "missing-table-verdict").replace(
    "FROM (SELECT sum(hash(i)) AS s FROM range(100000000000) t(i)) WHERE s = 0", "FROM no_such_table"
)


@pytest.mark.parametrize(
    "break_it,rule,words",
    [
        (
            lambda d: (d / "final" / "verdict-fallback.yaml").write_text("id: [verdict-fallback\n"),
            "verdict-fallback",
            ["not loaded", "YAML"],
        ),
        (
            lambda d: (d / "early" / "xid-meta-links.yaml").write_text(
                (d / "early" / "xid-meta-links.yaml").read_text().replace("phase: early", "phase: middle")
            ),
            "xid-meta-links",
            ["not loaded", "phase"],
        ),
        (
            lambda d: (d / "final" / "missing-table-verdict.yaml").write_text(BAD_SQL_RULE),
            "missing-table-verdict",
            ["no_such_table"],
        ),
        (lambda d: (d / "final" / "slow-verdict.yaml").write_text(SLOW_RULE), "slow-verdict", ["timed out after 1 s"]),
    ],
)
def test_a_broken_rule_is_reported_by_id_and_the_rest_of_the_pack_runs(
    bundle, tmp_path, capsys, monkeypatch, break_it, rule, words
):
    rules = _rules_copy(tmp_path)
    break_it(rules)
    monkeypatch.setenv("ATTRIBUTION_RULES__RULE_TIMEOUT_S", "1")
    started = time.monotonic()
    code, d, err = run(capsys, "--rules-dir", rules, bundle)
    assert code == 0 and time.monotonic() - started < 30
    failed = {f["rule"]: f["error"] for f in d["rules"]["failed"]}
    assert list(failed) == [rule], failed
    for w in words:
        assert w in failed[rule], failed
    assert d["terminal_state"] == "hardware_failure" and d["root_cause"]["node"] == HOST  # the rest ran
    assert len(d["rules"]["fired"]) > 5
    if "not loaded" in words:
        assert f"warning: rule {rule}" in err
