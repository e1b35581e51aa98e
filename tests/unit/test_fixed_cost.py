"""What a new process pays before its first line is read: `attribution diagnose BUNDLE --inline`
imports only what a bundle's diagnosis uses (issue 43), so the fixed cost cannot grow back unseen.

Not a timed test (this host is shared): what is checked is which modules a process loaded, which
no load average changes. tests/bench/fixed_cost.py measures the time.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from workload_attribution.flows.config import Config, ConfigError, load_config, said_elsewhere, settings_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "examples" / "xid149-worked"

# Each is a cost a bundle's diagnosis does not need: the orchestrator and the HTTP service (~1 s),
# httpx (its CLI pulls in click, rich and pygments: ~0.15 s), the configuration's cluster model and
# the action sinks (every registered source, scheduler and sink joined: ~0.1 s); with nothing stored, the
# warehouse's store.
NOT_IMPORTED = (
    "prefect",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "rich",
    "click",
    "workload_attribution.connectors.clusters",
    "workload_attribution.actions.registry",
    "workload_attribution.service",
    "workload_attribution.warehouse.store",  # with --no-warehouse: the store and its writer (~20 ms)
    # with no warehouse, nothing is archived nor compared: the archive's stores, zstd, the templates
    "workload_attribution.warehouse.objects",
    "zstandard",
    "workload_attribution.tasks.templates",
    "workload_attribution.warehouse.templates",
    "pydantic_settings",  # no file, no ATTRIBUTION_<key> variable: no settings source (~40 ms with asyncio)
    "subprocess",  # a bundle's scheduler module runs none of its tools (connectors/commands.py: ~2 ms)
)

PROBE = """
import contextlib, io, json, sys
from workload_attribution.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "terminal_state": json.loads(out.getvalue())["terminal_state"],
                  "modules": sorted(sys.modules)}))
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ATTRIBUTION_"))}


def test_diagnose_inline_imports_only_what_a_bundle_uses(tmp_path: Path) -> None:
    args = ["diagnose", str(EXAMPLE), "--inline", "--no-warehouse", "--json"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=tmp_path,  # no ./attribution.yaml
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["code"] == 0 and seen["terminal_state"]  # it did diagnose
    loaded = {m for m in seen["modules"] if any(m == n or m.startswith(n + ".") for n in NOT_IMPORTED)}
    assert not loaded, f"a bundle's diagnosis imported {sorted(loaded)}: make the import lazy where it is used"


def test_the_defaults_and_flags_need_no_settings_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file and no variable naming a key: load_config gives what pydantic-settings would, without
    it; a variable naming a key (in any case, as pydantic-settings matches them) is read by it."""
    monkeypatch.chdir(tmp_path)  # no ./attribution.yaml
    for name in os.environ:
        if name.upper().startswith("ATTRIBUTION_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ATTRIBUTION_API_TOKEN", "not a key of the configuration")
    assert not said_elsewhere()
    plain = load_config(warehouse="w.duckdb")
    assert type(plain) is Config
    assert plain.model_dump() == settings_config()(warehouse="w.duckdb").model_dump()
    monkeypatch.setenv("attribution_rules__skew_tolerance_s", "45")
    assert said_elsewhere()
    read = load_config()
    assert type(read) is Config and read.rules.skew_tolerance_s == 45 and pickle.loads(pickle.dumps(read)) == read


def test_a_new_process_collects_again_once_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's own command line holds off cyclic garbage collection while the command starts:
    a diagnosis collects again from its first attempt on, and a command that fails before that
    leaves collection as it found it."""
    import atexit
    import gc

    from workload_attribution.cli import common, main

    monkeypatch.setattr(atexit, "register", lambda fn: fn)  # this is not the process's own exit
    monkeypatch.setattr(gc, "freeze", lambda: None)  # nor its objects to keep for good
    held_at_start: list[bool] = []
    started = common.started
    monkeypatch.setattr(common, "started", lambda: (held_at_start.append(not gc.isenabled()), started())[1])
    out = tmp_path / "out"
    monkeypatch.setattr(
        sys, "argv", ["attribution", "diagnose", str(EXAMPLE), "--inline", "--no-warehouse", "--out", str(out)]
    )
    assert main() == 0 and (out / f"{EXAMPLE.name}.json").is_file()
    assert held_at_start[0] and gc.isenabled()
    held_at_start.clear()
    monkeypatch.setattr(sys, "argv", ["attribution", "diagnose", str(tmp_path / "no-such-bundle"), "--inline"])
    assert main() == 2 and gc.isenabled()
    monkeypatch.setattr(sys, "argv", ["attribution", "--version"])
    with pytest.raises(SystemExit):
        main()
    assert gc.isenabled()


CLUSTER_TYPOS = """\
clusters:
  eos:
    scheduler: slurm
    slurm: {rest_url: "http://slurmrestd:6820", bogus: 1}
    actions: {sinks: [{kind: slurm}, {kind: nope}]}
service: {port: 0}
"""


def test_a_configured_cluster_is_checked_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster model is built when a cluster is configured: its problems keep their dotted
    locations, the keys allowed beside a typo, and their place among the others."""
    monkeypatch.setenv("ATTRIBUTION_CONFIG", "")  # load_config sets it: restored after
    path = tmp_path / "attribution.yaml"
    path.write_text(CLUSTER_TYPOS)
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    problems = err.value.problems
    assert problems[0] == (
        "clusters.eos.slurm.bogus: unknown key (allowed here: rest_url, sacct, timeout_s, token_env, user)"
    )
    assert problems[1].startswith("clusters.eos.actions.sinks.1: Input tag 'nope' found using 'kind'")
    assert problems[2] == "service.port = '0': Input should be greater than or equal to 1"
    assert len(problems) == 3


def test_clusters_from_the_environment_are_read_by_their_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ATTRIBUTION_CLUSTERS__<name>__<key>: a block is JSON, a value text, as the cluster model says."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTRIBUTION_CONFIG", "")  # load_config sets it: restored after
    monkeypatch.setenv("ATTRIBUTION_CLUSTERS__EOS__SCHEDULER", "slurm")
    monkeypatch.setenv("ATTRIBUTION_CLUSTERS__EOS__SLURM", '{"rest_url": "http://slurmrestd:6820"}')
    monkeypatch.setenv("ATTRIBUTION_CLUSTERS__EOS__TIMEZONE", "Europe/Paris")
    cfg = load_config()
    from workload_attribution.flows.config import ClusterConfig

    name, cluster = cfg.cluster(None)
    assert name == "eos" and isinstance(cluster, ClusterConfig)
    assert cluster.timezone == "Europe/Paris" and cluster.block("slurm").rest_url == "http://slurmrestd:6820"
    assert pickle.loads(pickle.dumps(cfg)) == cfg  # a flow run's configuration travels pickled
    monkeypatch.setenv("ATTRIBUTION_CLUSTERS__EOS__SCHEDULR", "slurm")
    with pytest.raises(ConfigError) as err:
        load_config()
    assert err.value.problems[0].startswith("clusters.eos.schedulr: unknown key (allowed here: actions, ")


def test_the_shipped_pack_is_kept_pickled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process unpickles the shipped pack a previous one kept: the same pack as loaded from its
    files; a cache entry that cannot be read is loaded again and rewritten; another pack's bytes are
    another key."""
    from workload_attribution.rules import pack as packs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from workload_attribution.rules import diff

    loaded = packs.load_pack(packs.RULES_DIR)
    loaded.warm_literals()  # a kept pack carries its sources' pre-filter literals and its tables, worked out once
    diff.warm_digests(loaded)  # and its rules' and files' digests (the archive's checkpoints are named by them)
    entry = packs._cache_file(packs.RULES_DIR)
    assert entry is not None and entry.is_relative_to(tmp_path)
    packs.default_pack.cache_clear()
    assert packs.default_pack() == loaded and entry.is_file()  # loaded, then kept
    packs.default_pack.cache_clear()
    kept = packs.default_pack()
    assert kept == loaded and kept.version == loaded.version  # from the cache
    with monkeypatch.context() as m:  # its digests come with it: none is made again
        m.setattr(diff, "rule_digest", lambda rule: pytest.fail(f"{rule.id} digested again"))
        m.setattr(diff, "_read_foundations", lambda pack: pytest.fail("the pack's files digested again"))
        assert diff.prefix_digest(kept, "roles", {}) == diff.prefix_digest(loaded, "roles", {})
    entry.write_bytes(b"not a pickle")
    packs.default_pack.cache_clear()
    assert packs.default_pack() == loaded and entry.read_bytes() != b"not a pickle"
    packs.default_pack.cache_clear()

    import shutil

    copy = tmp_path / "pack"
    shutil.copytree(packs.RULES_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    first = packs._cache_file(copy)
    rule = next((copy / "final").glob("*.yaml"))
    rule.write_text(rule.read_text() + "\n")
    assert first is not None and packs._cache_file(copy) not in (first, entry)


PLUGINS = """
import contextlib, io, json, os, sys
from workload_attribution.cli import main
sys.argv = ["attribution", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()):
    main()
from pydantic.plugin import _loader
print(json.dumps({"disabled": os.environ.get("PYDANTIC_DISABLE_PLUGINS"), "looked": _loader._plugins is not None}))
"""


@pytest.mark.parametrize(("given", "disabled", "looked"), [(None, "__all__", False), ("", "", True)])
def test_attribution_loads_no_pydantic_plugin_unless_asked(
    tmp_path: Path, given: str | None, disabled: str, looked: bool
) -> None:
    """The CLI's own process skips pydantic's search of every package's entry points for plugins
    (~25 ms), unless PYDANTIC_DISABLE_PLUGINS is set (empty: they are looked for and loaded)."""
    env = {k: v for k, v in _clean_env().items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    args = ["diagnose", str(EXAMPLE), "--inline", "--no-warehouse", "--json"]
    done = subprocess.run(
        [sys.executable, "-c", PLUGINS, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"disabled": disabled, "looked": looked}
