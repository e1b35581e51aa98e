"""`attribution eval --leave-out`: a bundle whose only evidence is a catalog row answers otherwise
once that row's family (or the row citing the bundle's source) is left out, and exactly those
rows go. The mechanism is shown on a pack without its concepts (which would read the same
meaning in the row's absence: that is what the measure is for); docs/accuracy.md shows the whole
measure on tests/real with the shipped pack (slow tier)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workload_attribution.flows.leave_out import Variants, address, case_origins, cited_sections, evaluate_left_out
from workload_attribution.rules.pack import RULES_DIR, Pack, default_pack, load_pack

REAL = ROOT / "tests" / "real"
JAX_OOM = "app-jax-xla-oom-bufferassignment-1"  # one line, read only by a jax row: gpu_oom
JAX_ROW = "jax-xla-resource-exhausted-oom"
CLEAN = "gpu-xid79-offbus-rtx4090-threestones"  # read by no catalog row: nothing to leave out


@pytest.fixture(scope="module")
def rules_without_concepts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rules = tmp_path_factory.mktemp("pack") / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__pycache__"))
    for f in (rules / "concepts").glob("*.yaml"):
        f.unlink()
    return rules


@pytest.fixture(scope="module")
def bare_pack(rules_without_concepts: Path) -> Pack:
    return load_pack(rules_without_concepts)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    for name in (JAX_OOM, CLEAN):
        shutil.copytree(REAL / name, tmp_path / name)
    return tmp_path


def _cite(bundle: Path, source: str) -> None:
    exp = json.loads((bundle / "expected.json").read_text())
    (bundle / "expected.json").write_text(json.dumps({**exp, "source": source}))


def test_a_bundle_read_by_one_family_answers_otherwise_without_it(corpus: Path, bare_pack: Pack) -> None:
    report = evaluate_left_out(corpus, bare_pack, "family")
    by = {Path(o.bundle).name: o for o in report.outcomes}
    jax, clean = by[JAX_OOM], by[CLEAN]
    assert jax.full is not None and jax.full.exact and jax.full.got["catalog_families"] == ["jax"]
    assert (jax.family, jax.left_out) == ("jax", ["jax"])
    assert jax.got is not None and jax.got["sub_domain"] != "gpu_oom" and not jax.exact
    assert JAX_ROW not in json.dumps(jax.got)  # the family's rows were not there to match
    # nothing read the clean bundle: reported under `none`, its full-pack outcome stands
    assert (clean.family, clean.left_out, clean.got) == ("none", [], clean.full.got)
    table = report.table()
    assert table.startswith("catalog family") and table.splitlines()[0].endswith("full")
    assert any(line.split()[:2] == ["jax", "1"] and line.split()[2] == "0.0%" for line in table.splitlines())
    assert "wrong with high confidence:" in table


def test_origin_leaves_out_exactly_the_rows_citing_the_bundle_source(corpus: Path, bare_pack: Pack) -> None:
    pack = bare_pack
    row = next(r for r in pack.catalog if r.id == JAX_ROW)
    cited = row.test_line_origin.removeprefix("log:").replace("https://", "http://www.") + "/#issuecomment-1"
    _cite(corpus / JAX_OOM, cited)
    _cite(corpus / CLEAN, "https://example.org/nothing/a/row/cites")
    report = evaluate_left_out(corpus, pack, "origin")
    by = {Path(o.bundle).name: o for o in report.outcomes}
    same_origin = sorted(r.id for r in pack.catalog if address(r.test_line_origin) == address(cited))
    assert by[JAX_OOM].left_out == same_origin == [JAX_ROW]
    assert by[JAX_OOM].got["sub_domain"] != "gpu_oom"
    assert by[CLEAN].left_out == [] and by[CLEAN].got == by[CLEAN].full.got


def test_a_bundle_cites_its_sources_md_section_but_not_the_logs_it_quotes(tmp_path: Path) -> None:
    (tmp_path / "SOURCES.md").write_text(
        "# Sources\n\n### case-a\n\nSource: https://github.com/o/r/issues/1 (a comment)\n"
        "Lines added from https://www.example.org/post/.\n\n```\nsee https://quoted.example/in/the/log\n```\n\n"
        "### case-b\n\nSource: https://github.com/o/r/issues/2\n\n"
        "## Sources for the next cases\n\nConventions from https://example.org/not/case-b.\n\n"
        "### case-c (extra, benign)\n\n#### What it shows\n\nSource: https://github.com/o/r/issues/4\n"
    )
    sections = cited_sections(tmp_path)
    assert sections["case-a"] == {"github.com/o/r/issues/1", "example.org/post"}
    assert sections["case-c"] == {"github.com/o/r/issues/4"}  # its name is the heading's first word
    origins = case_origins(tmp_path / "case-b", {"source": "https://github.com/o/r/pull/3#top"}, sections)
    assert origins == {"github.com/o/r/issues/2", "github.com/o/r/pull/3"}


def test_a_variant_lacks_the_rows_and_is_built_once() -> None:
    pack = default_pack()
    variants = Variants(pack)
    ids = variants.of_families({"jax"})
    variant = variants.without(ids)
    assert variants.without(ids) is variant and variants.without(frozenset()) is pack
    assert {r.id for r in variant.catalog} == {r.id for r in pack.catalog} - ids and JAX_ROW in ids
    assert variant.version != pack.version and variant.rules is pack.rules
    assert len(pack.catalog) > len(variant.catalog)  # the full pack keeps its rows
    row = next(r for r in pack.catalog if r.id == JAX_ROW)
    # the full pack's scan keeps the row's lines (by its literals or a shorter one holding them)
    assert all(any(k in lit for k in pack.prefilter("app")) for lit in row.literals)


def test_the_command_says_what_it_left_out_and_holds_min_exact(
    corpus: Path, rules_without_concepts: Path, capsys: pytest.CaptureFixture
) -> None:
    from workload_attribution.cli import main

    bare = ["--rules-dir", str(rules_without_concepts)]
    assert main(["eval", str(corpus), "--leave-out", "family", "--json", *bare]) == 4  # the jax bundle misses
    records = {Path(r["bundle"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert (records[JAX_OOM]["family"], records[JAX_OOM]["left_out"]) == ("jax", ["jax"])
    assert records[JAX_OOM]["full"]["exact"] and not records[JAX_OOM]["exact"]
    assert records[CLEAN]["left_out"] == [] and records[CLEAN]["exact"]
    assert {"wrong_with_high_confidence", "healthy_blamed"} <= set(records[JAX_OOM])
    assert main(["eval", str(corpus), "--leave-out", "family", "--min-exact", "0.5", *bare]) == 0
    printed = capsys.readouterr().out
    assert "catalog family (the first row read)" in printed and "left out families jax" in printed


def test_with_its_concepts_the_pack_reads_the_meaning_the_left_out_row_read(corpus: Path) -> None:
    """What the concepts are for: the JAX OOM stays a GPU OOM with every jax row gone, at medium."""
    report = evaluate_left_out(corpus, default_pack(), "family")
    jax = {Path(o.bundle).name: o for o in report.outcomes}[JAX_OOM]
    assert jax.left_out == ["jax"] and jax.exact
    assert (jax.got["sub_domain"], jax.got["confidence"]) == ("gpu_oom", "medium")
