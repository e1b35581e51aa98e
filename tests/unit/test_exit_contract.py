"""One exit-code contract, per command: each code a command can end with, brought about for real
(a bad flag, a failing rule test, an endpoint that does not answer), through `main` as the console
script calls it. The codes: 0 done, 1 a bug, 2 bad input or configuration, 3 diagnosed but not
stored, 4 checks ran and failed, 5 a dependency did not answer. README's table and every --help
say the same."""

from __future__ import annotations

import importlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import EXAMPLES, ROOT, WORKED
from tests.services.prometheus import free_port
from workload_attribution.cli import COMMANDS, main
from workload_attribution.cli.common import EXIT_CODES

CODES = {0: "done", 1: "a bug", 2: "bad input", 3: "not stored", 4: "checks", 5: "did not answer"}


def closed_url() -> str:
    """An address where nothing listens: connection refused at once."""
    return f"http://127.0.0.1:{free_port()}"


def slurm_cluster(tmp: Path, url: str) -> Path:
    cfg = tmp / "attribution.yaml"
    cfg.write_text(
        f"warehouse: {tmp / 'w.duckdb'}\nclusters:\n  eos:\n    scheduler: slurm\n    slurm: {{rest_url: '{url}'}}\n"
    )
    return cfg


def failing_rule_pack(tmp: Path) -> Path:
    pack = tmp / "pack"
    shutil.copytree(ROOT / "rules", pack, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copytree(ROOT / "rules" / "python", pack / "python", dirs_exist_ok=True)
    rule = pack / "extract" / "hung-task.yaml"
    rule.write_text(rule.read_text().replace("expect_count: 3", "expect_count: 4", 1))
    return pack


def eval_dir(tmp: Path, right: bool) -> Path:
    bundle = tmp / "labelled" / "oom"
    shutil.copytree(EXAMPLES / "cuda_oom_one_rank-1-0", bundle)
    if not right:  # a label the diagnosis will not match
        label = json.loads((bundle / "expected.json").read_text())
        label["sub_domain"] = "nvlink"
        label.pop("also_acceptable", None)
        (bundle / "expected.json").write_text(json.dumps(label))
    return bundle.parent


def not_duckdb(tmp: Path) -> Path:
    path = tmp / "w.duckdb"
    path.write_text("a text file where the warehouse should be\n")
    return path


def empty_duckdb(tmp: Path) -> Path:
    """A DuckDB file with nothing in it (no diagnosis written yet)."""
    import duckdb

    path = tmp / "empty.duckdb"
    duckdb.connect(str(path)).close()
    return path


def broken_bundle_tree(tmp: Path) -> Path:
    tree = tmp / "tree"
    shutil.copytree(EXAMPLES / "cuda_oom_one_rank-1-0", tree / "ok")
    (tree / "broken").mkdir()
    (tree / "broken" / "attempt.yaml").write_text("cluster: [unclosed\n")
    return tree


# command -> [(code, args built in a temporary directory, words the output must hold)]
Case = tuple[int, Callable[[Path], list[str]], str]
CASES: dict[str, list[Case]] = {
    "diagnose": [
        (0, lambda t: ["diagnose", str(WORKED), "--no-warehouse", "-q"], "hardware_failure / nvlink"),
        (2, lambda t: ["diagnose", str(t / "nope")], "no such bundle directory"),
        (3, lambda t: ["diagnose", str(WORKED), "--warehouse", str(not_duckdb(t))], "not stored"),
        (5, lambda t: ["diagnose", str(WORKED), "--remote", closed_url()], "ConnectError"),
    ],
    "rules": [
        (0, lambda t: ["rules", "validate"], "valid"),
        (2, lambda t: ["rules", "test", "--rules-dir", str(t / "nope")], "no such directory"),
        (4, lambda t: ["rules", "test", "--rules-dir", str(failing_rule_pack(t)), "--rule", "hung-task"], "1 failed"),
        (0, lambda t: ["rules", "suggest", "--warehouse", str(empty_duckdb(t))], "keeps no log templates"),
        (2, lambda t: ["rules", "suggest", "--warehouse", str(t / "missing.duckdb")], "no warehouse at"),
        (2, lambda t: ["rules", "suggest", "--warehouse", str(empty_duckdb(t)), "--since", "yesterday"], "not a time"),
        (2, lambda t: ["rules", "suggest", "--warehouse", str(empty_duckdb(t)), "--top", "0"], "at least 1"),
        (2, lambda t: ["rules", "suggest", "--warehouse", str(empty_duckdb(t)), "--out", str(t)], "not an empty"),
        (2, lambda t: ["rules", "list", "--top", "3"], "of `rules suggest` only"),
    ],
    "eval": [
        (0, lambda t: ["eval", str(eval_dir(t, right=True))], "1 bundle(s)"),
        (2, lambda t: ["eval", str(t), "--min-exact", "95"], "--min-exact"),
        (4, lambda t: ["eval", str(eval_dir(t, right=False))], "under --min-exact 1"),
    ],
    "diff": [
        (0, lambda t: ["diff", str(WORKED), "--against", str(WORKED)], "xid149-worked"),
        (2, lambda t: ["diff", str(t / "nope"), "--against", str(WORKED)], "not a bundle"),
        (2, lambda t: ["diff", str(WORKED), "--against", "last-good", "--warehouse", str(t / "w")], "ended well"),
    ],
    "query": [
        (0, lambda t: ["query", "--list"], "failures_per_host"),
        (2, lambda t: ["query", "SELECT 1", "--warehouse", str(t / "missing.duckdb")], "no warehouse yet"),
        (2, lambda t: ["query", "SELECT 1", "--warehouse", str(not_duckdb(t))], "not a DuckDB database file"),
    ],
    "actions": [
        (0, lambda t: ["actions", "list", "--warehouse", str(t / "w.duckdb")], "(0 actions)"),
        (2, lambda t: ["actions", "undo"], "name the diagnosis"),
    ],
    "backfill": [
        (
            0,
            lambda t: [
                "backfill",
                "--inline",
                "--bundles",
                str(EXAMPLES),
                "--since",
                "1d",
                "--warehouse",
                str(t / "w"),
            ],
            "found 0",
        ),
        (2, lambda t: ["backfill", "--inline", "--bundles", str(t / "nope")], "no such directory"),
        (
            4,
            lambda t: [
                "backfill",
                "--inline",
                "--bundles",
                str(broken_bundle_tree(t)),
                "--since",
                "3650d",
                "--warehouse",
                str(t / "w"),
            ],
            "FAILED",
        ),
        (5, lambda t: ["backfill", "--inline", "--config", str(slurm_cluster(t, closed_url()))], "DISCOVERY FAILED"),
    ],
    "topology": [
        (
            0,
            lambda t: [
                "topology",
                "load",
                str(EXAMPLES / "ib_link_down_one_host-1-0" / "topology.yaml"),
                "--cluster",
                "c",
                "--warehouse",
                str(t / "w"),
            ],
            "link(s)",
        ),
        (2, lambda t: ["topology", "load", str(t / "nope.yaml"), "--cluster", "c"], "no such file"),
    ],
    "config": [
        (0, lambda t: ["config", "check"], "warehouse:"),
        (2, lambda t: ["config", "check", "--config", str(t / "nope.yaml")], "does not exist"),
        (4, lambda t: ["config", "check", "--config", str(slurm_cluster(t, closed_url()))], "FAIL slurm"),
    ],
    "serve": [(2, lambda t: ["serve", "--tls-cert", str(t / "cert.pem")], "--tls-key")],
    "deploy": [
        (0, lambda t: ["deploy", "--print-yaml"], "work_queue_name: backfill"),
        (2, lambda t: ["deploy"], "set PREFECT_API_URL"),
    ],
    "worker": [(2, lambda t: ["worker"], "set PREFECT_API_URL")],
    "archive": [
        (0, lambda t: ["archive", "usage", "--warehouse", str(t / "w.duckdb")], "0 attempt(s)"),
        (2, lambda t: ["archive", "prune", "--warehouse", str(t / "w.duckdb"), "--max-age-days", "-3"], "above 0"),
    ],
    "token": [
        (0, lambda t: ["token", "create", "ci", "--scope", "read", "--print-line"], "ci read scrypt$"),
        (2, lambda t: ["token", "create", "CI!", "--scope", "read", "--print-line"], "token name"),
    ],
}


def test_every_command_has_its_cases():
    assert set(CASES) == set(COMMANDS)


@pytest.mark.parametrize(
    "command, code, build, words",
    [(cmd, code, build, words) for cmd, cases in CASES.items() for code, build, words in cases],
    ids=[f"{cmd}-{code}" for cmd, cases in CASES.items() for code, _, _ in cases],
)
def test_exit_code(command, code, build, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no attribution.yaml of the checkout's
    monkeypatch.delenv("ATTRIBUTION_CONFIG", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("ATTRIBUTION_WAREHOUSE_LOCK_WAIT_S", "1")
    assert main(build(tmp_path)) == code
    out = capsys.readouterr()
    assert words in out.out + out.err, (out.out[-2000:], out.err[-2000:])
    if code in (2, 3, 5):  # one line saying what, no traceback
        assert "Traceback" not in out.err and out.err.startswith("attribution: "), out.err


@pytest.mark.parametrize("command", [["config", "check"], ["diagnose", str(WORKED)], ["query", "failures_per_host"]])
def test_a_config_file_named_by_the_environment_must_exist(command, tmp_path, monkeypatch, capsys):
    """ATTRIBUTION_CONFIG naming a missing file is refused as --config naming it is (it was ignored)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(tmp_path / "atribution.yaml"))
    assert main(command) == 2
    out = capsys.readouterr()
    assert f"config file {tmp_path / 'atribution.yaml'} (ATTRIBUTION_CONFIG) does not exist" in out.out + out.err


def test_a_prefect_server_that_does_not_answer_is_5_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PREFECT_API_URL", closed_url() + "/api")
    for args in (["diagnose", str(WORKED), "--no-warehouse"], ["deploy"], ["backfill", "--bundles", str(EXAMPLES)]):
        assert main(args) == 5, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "the Prefect server at" in err and "does not answer" in err, err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bug_is_1_in_one_line_for_every_command(command, monkeypatch, capsys):
    module = importlib.import_module(f"workload_attribution.cli.{command}")

    def bug(args):
        raise KeyError("a bug planted in " + command)

    monkeypatch.setattr(module, "run", bug)
    required = {"rules": ["list"], "eval": ["."], "topology": ["load", "f", "--cluster", "c"], "config": ["check"]}
    required |= {"token": ["list"], "actions": ["list"], "archive": ["usage"], "diff": [".", "--against", "."]}
    assert main([command, *required.get(command, [])]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attribution: internal error: KeyError:") and "--debug" in err and err.count("\n") == 1


def test_an_action_undo_that_failed_is_4(monkeypatch, tmp_path, capsys):
    from workload_attribution.actions import act
    from workload_attribution.contracts.actions import Outcome

    failed = SimpleNamespace(sink="slurm", operation="resume", outcome=Outcome.failed, node="n1", reason="refused")
    monkeypatch.setattr(act, "undo", lambda *a, **k: [failed])
    assert main(["actions", "undo", "d-1", "--warehouse", str(tmp_path / "w.duckdb")]) == 4
    assert "slurm resume: failed n1 (refused)" in capsys.readouterr().out


def test_help_and_readme_state_the_same_codes(capsys):
    for args in (["--help"], *([c, "--help"] for c in COMMANDS)):
        with pytest.raises(SystemExit):
            main(list(args))
        assert EXIT_CODES in capsys.readouterr().out, args
    table = re.findall(r"^\| `(\d)` \| (.+) \|$", (ROOT / "README.md").read_text(), re.M)
    assert [int(c) for c, _ in table] == list(CODES)
    for (code, meaning), (_, words) in zip(table, CODES.items(), strict=True):
        assert words in meaning, (code, meaning)
