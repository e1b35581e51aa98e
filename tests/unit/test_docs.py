"""The documentation is executed: every fenced block of the README, docs/ and the folders' guides is
run, validated or compared as its marker says (tests/doc_blocks.py has the convention), and what
the prose names (commands, their options, files) exists. The blocks that need Prefect and the
service run in tests/integration/test_docs_services.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.doc_blocks import (
    DOCS,
    ROOT,
    Block,
    Sandbox,
    all_blocks,
    blocks,
    excerpt_missing,
    expected_exit,
    failure,
    output_diff,
    output_matches,
)

BLOCKS = all_blocks()
README_MAX_LINES = 300
# A few blocks cannot run here; each says why. More than this many is a documentation that drifted
# back to describing instead of showing.
MAX_NOT_RUN = 6


def of_kind(*kinds: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind in kinds]


def test_every_block_says_what_it_is() -> None:
    unmarked = [f"{b.where} ({b.lang or 'no language'})" for b in BLOCKS if not b.kind]
    assert unmarked == [], "fenced blocks without a <!-- doc: ... --> marker (tests/doc_blocks.py)"
    assert len(BLOCKS) > 20 and {b.kind for b in BLOCKS} >= {"run", "output", "config", "rule", "services"}


def test_an_output_follows_what_prints_it() -> None:
    wrong = []
    for doc in DOCS:
        before = ""
        for b in blocks(doc):
            if b.kind == "output" and before not in ("run", "python", "services"):
                wrong.append(f"{b.where}: an output block after a {before or 'nothing'} block")
            before = b.kind
    assert wrong == []


def test_blocks_not_run_here_are_few_and_say_why() -> None:
    not_run = of_kind("not run")
    assert all(len(b.arg) > 15 for b in not_run), [b.where for b in not_run if len(b.arg) <= 15]
    assert len(not_run) <= MAX_NOT_RUN, [b.where for b in not_run]
    listing = "; ".join(f"{b.where}: {b.arg}" for b in not_run)
    pytest.skip(f"{len(not_run)} block(s) not run here: {listing}")  # -ra lists it in every run's summary


# ---- shell and Python, run in a sandbox, outputs compared


def _docs_with(*kinds: str) -> list[Path]:
    return [doc for doc in DOCS if doc.exists() and any(b.kind in kinds for b in blocks(doc))]


# documents whose blocks take most of a minute (accuracy.md runs `attribution eval` over tests/real):
# in the slow tier, which CI runs after the default one
SLOW_DOCS = {"docs/accuracy.md"}


def _doc_params(*kinds: str) -> list:
    return [
        pytest.param(doc, marks=[pytest.mark.slow] if str(doc.relative_to(ROOT)) in SLOW_DOCS else [])
        for doc in _docs_with(*kinds)
    ]


@pytest.mark.parametrize("doc", _doc_params("run", "python"), ids=lambda d: str(d.relative_to(ROOT)))
def test_commands_run_and_print_what_the_document_shows(doc: Path, tmp_path: Path) -> None:
    """The document's run and python blocks, in order, in one sandbox (a later block may read what
    an earlier one wrote: the warehouse, a generated corpus); each output block compared with what
    the block above it printed."""
    sandbox = Sandbox(tmp_path)
    problems: list[str] = []
    printed: subprocess.CompletedProcess[str] | None = None
    for b in blocks(doc):
        if b.kind == "run":
            printed = sandbox.run(b.text)
            if printed.returncode != expected_exit(b):
                problems.append(failure(b, f"exited {printed.returncode}, expected {expected_exit(b)}", printed))
        elif b.kind == "python":
            printed = sandbox.python(b.text)
            if printed.returncode != 0:
                problems.append(failure(b, f"exited {printed.returncode}", printed))
        elif b.kind == "output" and printed is not None and not output_matches(b.text, printed.stdout):
            problems.append(f"{b.where}: the output differs\n{output_diff(b.text, printed.stdout)}")
        if b.kind not in ("run", "python", "output"):
            printed = None  # an output block shows the block right above it
    assert problems == [], "\n\n".join(problems)


# ---- configuration, rules, excerpts, CI


@pytest.fixture
def clean_config_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ATTRIBUTION_* variable and no ./attribution.yaml: a block is read alone."""
    for name in [k for k in os.environ if k.startswith("ATTRIBUTION_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ATTRIBUTION_CONFIG", str(tmp_path / "absent.yaml"))  # load_config sets it: restored after
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _leaves(tree: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() for leaf in _leaves(v, (*path, str(k)))]
    return [(path, tree)]


def _without(tree: object, keys: tuple[str, ...]) -> object:
    """A copy of a YAML tree without the leaf at `keys`."""
    if not isinstance(tree, dict) or not keys:
        return tree
    head, rest = keys[0], keys[1:]
    if not rest:
        return {k: v for k, v in tree.items() if k != head}
    return {k: (_without(v, rest) if k == head else v) for k, v in tree.items()}


def _at(dump: object, keys: tuple[str, ...]) -> object:
    for k in keys:
        dump = dump.get(k) if isinstance(dump, dict) else None
    return dump


@pytest.mark.parametrize("block", of_kind("config"), ids=lambda b: b.where)
def test_configuration_blocks_are_valid(block: Block, clean_config_env: Path) -> None:
    """Each block is a valid attribution.yaml; in a `defaults` block every value shown is the one
    the model takes when that key is left out (keys that cannot be left out, like a source's url,
    are skipped)."""
    from workload_attribution.flows.config import ConfigError, load_config

    path = clean_config_env / "attribution.yaml"

    def load(tree: object) -> dict:
        path.write_text(yaml.safe_dump(tree))
        return load_config(str(path)).model_dump()

    tree = yaml.safe_load(block.text)
    shown = load(tree)
    if block.arg != "defaults":
        return
    differ, checked = [], 0
    for keys, value in _leaves(tree):
        try:
            default = load(_without(tree, keys))
        except ConfigError:
            continue  # required
        checked += 1
        if _at(shown, keys) != _at(default, keys):
            differ.append(f"{'.'.join(keys)}: shown {value!r}, default {_at(default, keys)!r}")
    assert differ == [], f"{block.where} shows values that are not the defaults"
    assert checked >= len(_leaves(tree)) // 2, f"{block.where}: most keys shown could not be left out"


@pytest.mark.parametrize("block", of_kind("rule"), ids=lambda b: b.where)
def test_rule_blocks_validate_and_pass_their_tests(block: Block, tmp_path: Path) -> None:
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack, ignore=shutil.ignore_patterns("__pycache__"))
    rule = yaml.safe_load(block.text)
    (pack / rule["phase"] / f"{rule['id']}.yaml").write_text(block.text)
    cli = [sys.executable, "-m", "workload_attribution", "rules"]
    for args in (["validate"], ["test", "--rule", rule["id"]]):
        r = subprocess.run([*cli, *args, "--rules-dir", str(pack)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, failure(block, f"rules {' '.join(args)} exited {r.returncode}", r)
    assert rule["tests"], f"{block.where}: a rule shown without its tests"


@pytest.mark.parametrize("block", of_kind("excerpt"), ids=lambda b: b.where)
def test_excerpts_are_what_the_file_holds(block: Block) -> None:
    source = ROOT / block.arg
    assert source.is_file(), f"{block.where}: an excerpt of {block.arg}, which does not exist"
    assert excerpt_missing(block.text, source.read_text()) == [], f"{block.where}: lines not in {block.arg}"


@pytest.mark.parametrize("block", of_kind("ci"), ids=lambda b: b.where)
def test_ci_blocks_are_what_ci_runs(block: Block) -> None:
    ci = " ".join((ROOT / ".ci" / "run").read_text().split())
    commands = [" ".join(c.split()) for line in block.text.splitlines() if (c := re.sub(r"(^|\s+)#.*$", "", line))]
    assert commands and all(c in ci for c in commands), f"{block.where}: not in .ci/run: {commands}"


# ---- what the prose names


def _code_spans(doc: Path) -> list[str]:
    """Inline code spans outside fenced blocks."""
    text = re.sub(r"^\s*(`{3,}|~{3,}).*?^\s*\1\s*$", "", doc.read_text(), flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", text)]  # may wrap a line


def _cli_options() -> dict[str, set[str]]:
    """Each command's options (with the global ones), from the CLI's own parser."""
    import argparse

    from workload_attribution.cli import build_parser

    parser = build_parser()
    top = set(parser._option_string_actions)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: top | set(p._option_string_actions) for name, p in sub.choices.items()} | {"": top}


def _commands_named(doc: Path) -> list[str]:
    """Code spans, and the lines of blocks not run here: the commands the tests would not see run."""
    lines = [line for b in blocks(doc) if b.kind == "not run" for line in b.text.splitlines()]
    return _code_spans(doc) + [re.sub(r"\s+#.*$", "", line) for line in lines]


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__main__.py") if f.is_file()), None)


def test_commands_the_prose_names_exist_with_their_options() -> None:
    """`attribution COMMAND --option` and `python -m tests.MODULE --option` named in the prose (and
    in blocks not run here): the command exists and takes each option named."""
    options = _cli_options()
    wrong = []
    for doc in DOCS:
        for text in _commands_named(doc):
            words = text.split()
            flags = {w.split("=")[0] for w in words if re.fullmatch(r"--[a-z][\w-]*(=.*)?", w)}
            where = f"{doc.relative_to(ROOT)}: `{text.strip()}`"
            named = words[1:2] if words[:1] == ["attribution"] else words[2:3]
            if any(part.isupper() for w in named for part in w.split(".")):
                continue  # a placeholder: `attribution COMMAND --option`, `python -m tests.MODULE`
            if words[:1] == ["attribution"] and len(words) > 1:
                command = words[1] if not words[1].startswith("-") else ""
                if command not in options:
                    wrong.append(f"{where}: no command {command!r}")
                    continue
                wrong += [f"{where}: {f} is not an option" for f in sorted(flags - options[command])]
            elif words[:2] == ["python", "-m"] and len(words) > 2 and words[2].startswith("tests."):
                source = _module_file(words[2])
                if source is None:
                    wrong.append(f"{where}: no module {words[2]}")
                    continue
                declared = source.read_text()
                wrong += [f"{where}: {f} is not an option" for f in sorted(flags) if f'"{f}"' not in declared]
    assert wrong == []


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".") or p.name == ".ci"} - {".venv"}


def test_files_the_documents_name_exist() -> None:
    """Paths in code spans that start at a folder of the checkout, and relative links."""
    top = _top_level()
    missing = []
    for doc in DOCS:
        named = [s for s in _code_spans(doc) if re.fullmatch(r"[\w.-]+/[\w./-]*(:\S+)?", s)]
        for span in named:
            path = span.split(":")[0]
            if path.split("/")[0] in top and not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: `{span}`")
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if not re.match(r"\w+:", link) and not (doc.parent / link).exists():
                missing.append(f"{doc.relative_to(ROOT)}: link {link}")
    assert missing == []


# ---- the README: a manual, and its picture of the layers


def test_the_readme_is_a_manual_not_a_notebook() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES


def _layer_table() -> list[list[str]]:
    """The README's table with the columns folder, import as, layer, may import."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| folder |") and "may import" in line)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
    return rows


def test_the_readme_names_each_folder_its_layer_and_what_it_may_import() -> None:
    from tests.unit.test_layers import LAYER

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    layer_of_folder = {
        folder: (name.split(".")[1] if "." in name else "interfaces") for name, folder in mapping.items()
    }
    rows = _layer_table()
    shown = {r[0].rstrip("/"): r for r in rows}
    assert set(layer_of_folder) <= set(shown), "every folder the package maps is in the table"
    for folder, layer in layer_of_folder.items():
        _, import_as, number, may_import = shown[folder][:4]
        package = "workload_attribution" + ("" if layer == "interfaces" else f".{layer}")
        assert import_as == package, folder
        assert int(number) == LAYER[layer], folder
        below = {name for name, n in LAYER.items() if n < LAYER[layer]}
        assert {w.strip() for w in may_import.split(",") if w.strip() not in ("", "nothing")} == below, folder
    others = set(shown) - set(layer_of_folder)
    assert others <= _top_level(), f"the table names folders the checkout does not have: {others - _top_level()}"


def test_the_benchmarks_page_has_a_place_for_each_part_of_the_bench() -> None:
    from tests.bench.__main__ import parts, section_name

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for name, _ in parts(quick=False, storm=True, keep="/tmp/unused"):
        assert f"<!-- bench: {section_name(name)} -->" in text and f"<!-- /bench: {section_name(name)} -->" in text


def test_a_bench_table_replaces_its_section_and_nothing_else() -> None:
    from tests.bench.__main__ import last_table, splice

    printed = "scan\n| a | b |\n| ---: | --- |\n| 1 | 2 |\n\nrows appended\n\n| x |\n| --- |\n| 9 |\n"
    assert last_table(printed) == "| x |\n| --- |\n| 9 |"
    assert last_table("no table here\n| not one\n") is None
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    written = splice(page, "latency", "`python -m tests.bench.diagnose_latency`, today\n\n| x |\n| --- |\n| 9 |")
    before, _, rest = page.partition("<!-- bench: latency -->")
    after = rest.partition("<!-- /bench: latency -->")[2]
    assert written.startswith(before) and written.endswith(after)
    assert "today\n\n| x |\n| --- |\n| 9 |\n<!-- /bench: latency -->" in written
    assert "0.68 s" not in written.partition("<!-- bench: latency -->")[2].partition("<!-- /bench")[0]
    with pytest.raises(KeyError):
        splice(page, "no-such-part", "| x |")
