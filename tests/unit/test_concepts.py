"""The concept layer (rules/concepts/*.yaml, extract/concept-meanings.yaml): meanings that catch the
wordings no catalog row has, the look-alikes they must not catch, how they give way to specific
readings, the confidence of a verdict resting on one, and the paraphrase test: every catalog row's
test line, rewritten as another vendor, release or prefix would print it, still lands in the row's
meaning."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import claims_on_each_engine
from workload_attribution.rules.claims import Probe, claims
from workload_attribution.rules.concepts import phrase_literals, phrase_regex
from workload_attribution.rules.pack import RULES_DIR, PackTest, default_pack, load_pack, validate_pack
from workload_attribution.rules.testing import run_concept_cases, run_pack_case
from workload_attribution.staging import prefilter


@pytest.fixture(scope="module")
def pack():
    return default_pack()


def test_every_concept_example_lands_in_it_and_no_look_alike_does(pack) -> None:
    results = run_concept_cases(pack)
    assert [r.message for r in results if not r.ok] == []
    assert len(pack.concepts) >= 14


def test_a_phrase_is_read_whatever_its_case_and_joins_but_not_inside_a_word() -> None:
    said = re.compile(phrase_regex("out of memory"))
    for line in ("CUDA out of memory", "OUT_OF_MEMORY", "hipErrorOutOfMemory: x", "Out-of-memory while"):
        assert said.search(line.replace("hipErrorOutOfMemory", "hip OutOfMemory")), line
    oom = re.compile(phrase_regex("OOM"))
    assert oom.search("Resource exhausted: OOM when allocating")
    assert not oom.search("adjusting oom_score_adj") and not oom.search("Reason: OOMKilled")
    # the scan keeps a line by one of the phrase's spellings
    assert {"out of memory", "Out of memory", "OUT OF MEMORY", "OutOfMemory", "OUT_OF_MEMORY"} <= set(
        phrase_literals("out of memory")
    )


def _events(pack, *lines: str, source: str = "app") -> list[list[dict]]:
    return claims(pack, [Probe(source, line) for line in lines], resolve=True).events


def test_a_specific_reading_wins_and_the_concept_beats_the_generic_exception(pack) -> None:
    known, hip, notice = _events(
        pack,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",  # python-exception's own
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB.",  # no rule knows HIP
        "W1120 10:00:00.000000 4211 bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of memory trying to "
        "allocate 2.25GiB with freed_by_count=0. The caller indicates that this is not a failure",
    )
    assert [(e["rule"], e["symptom"]) for e in known] == [("python-exception", "cuda_oom")]
    assert [(e["rule"], e["symptom"], e["attrs"]["concept"]) for e in hip] == [
        ("concept-meanings", "cuda_oom", "device-memory-exhausted")
    ]
    assert "HIP out of memory" not in str([e for e in hip if e["symptom"] == "python_exception"])
    assert all(e["rule"] != "concept-meanings" for e in notice)  # a row that calls it a notice knows it


def test_a_wrapper_notice_leaves_the_message_it_embeds_to_the_concepts(pack) -> None:
    (wrapped,) = _events(
        pack,
        "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/"
        "local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of memory while trying "
        "to allocate 5520758552 bytes.",
    )
    assert {e["symptom"] for e in wrapped} == {"framework_notice", "cuda_oom"}


def test_the_context_that_decides_may_sit_on_the_next_line_of_an_exception(pack) -> None:
    case = PackTest(
        name="a TF exception whose message goes on below it",
        attempt={"start": "2020-03-01T10:00:00Z", "end": "2020-03-01T11:00:00Z", "nodes": ["nc6"]},
        lines=[
            {"source": "app", "node": "nc6", "text": "ResourceExhaustedError: 2 root error(s) found."},
            {
                "source": "app",
                "node": "nc6",
                "text": "  (0) Resource exhausted: OOM when allocating tensor with "
                "shape[16,112,112,147] and type float on /job:localhost/replica:0/task:0/device:GPU:0 "
                "by allocator GPU_0_bfc",
            },
        ],
        records=[{"source": "scope", "kind": "attempt_scope", "text": "state: FAILED", "attrs": {"state": "FAILED"}}],
        expect={"terminal_state": "application_failure", "sub_domain": "gpu_oom", "affected_nodes": []},
    )
    result = run_pack_case(pack, case)
    assert result.ok, result.message


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
            ("application_failure", "host_oom", "medium"),
        ),
        (
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.",
            ("application_failure", "gpu_oom", "medium"),
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",  # python-exception: high
            ("application_failure", "gpu_oom", "high"),
        ),
    ],
)
def test_a_verdict_resting_on_a_concept_is_medium_confidence_at_most(pack, line, expect) -> None:
    state, sub, confidence = expect
    case = PackTest(
        name="one rank's exception",
        attempt={"start": "2026-11-20T10:00:00Z", "end": "2026-11-20T10:30:00Z", "nodes": ["n1", "n2"]},
        lines=[{"source": "app", "node": "n1", "text": f"2026-11-20 10:20:01,123 [rank3]: {line}"}],
        records=[{"source": "scope", "kind": "attempt_scope", "text": "state: FAILED", "attrs": {"state": "FAILED"}}],
        expect={"terminal_state": state, "sub_domain": sub, "confidence": confidence, "affected_nodes": []},
    )
    result = run_pack_case(pack, case)
    assert result.ok, result.message


def test_a_broken_concept_file_is_named_by_validate(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__pycache__"))
    (rules / "concepts" / "eviction.yaml").write_text(
        (rules / "concepts" / "eviction.yaml").read_text().replace("symptom: scheduler_evicted", "symptom: evictedd")
    )
    (rules / "concepts" / "bad-one.yaml").write_text("id: bad-one\ntitle: too short\n")
    pack, errors = validate_pack(rules)
    assert pack is None
    said = "\n".join(map(str, errors))
    assert "bad-one.yaml" in said and "title" in said
    (rules / "concepts" / "bad-one.yaml").unlink()
    pack, errors = validate_pack(rules)
    assert [e.field for e in errors] == ["symptom"] and "evictedd" in str(errors[0])
    # diagnosing, a broken concept file leaves the concept rule out and the rest of the pack decides
    (rules / "concepts" / "bad-one.yaml").write_text("id: bad-one\n")
    loaded = load_pack(rules, skip_broken=True)
    assert [b["rule"] for b in loaded.broken] == ["concept-meanings"]


# --- the paraphrase test -------------------------------------------------------------------------

# another vendor's runtime printing the same failure (only where the row names CUDA: NVIDIA's own
# driver, NVLink or NCCL messages have no other vendor's twin)
_FRAMEWORKS = ("pytorch", "jax", "tensorflow", "deepspeed", "megatron")  # run on either vendor's GPUs
_VENDOR = (("CUDA", "HIP"), ("Cuda", "Hip"), ("cuda", "hip"), ("cuBLAS", "hipBLAS"), ("CUBLAS", "HIPBLAS"))


def _vendor(line: str) -> str | None:
    out = line
    for a, b in _VENDOR:
        out = out.replace(a, b)
    return out if out != line else None


def _units(line: str) -> str | None:
    """Sizes as another release prints them: GiB as GB, a byte count changed."""
    out = re.sub(r"(\d+(?:\.\d+)?) ?([KMGT])iB", lambda m: f"{float(m.group(1)) * 1.07:.2f} {m.group(2)}B", line)
    out = re.sub(r"\b(\d+) bytes", lambda m: f"{int(m.group(1)) * 3 + 7} bytes", out)
    return out if out != line else None


def _prefix(line: str) -> str:
    """Another supervisor's envelope: a CRI stream prefix and a rank label."""
    return "2026-11-20T10:00:00.123456789Z stderr F [rank7]: " + line


def _casing(line: str) -> str | None:
    """Another release's casing of what starts a sentence ("Out of memory" for "out of memory", and
    back): the first plain word after `: ` or `. ` (identifiers and codes untouched)."""

    def flip(m: re.Match[str]) -> str:
        word = m.group(2)
        return m.group(1) + (word.capitalize() if word.islower() else word.lower())

    out = re.sub(r"((?:^|: |\. ))([a-z]{2,}|[A-Z][a-z]+)(?=[ ,:]|$)", flip, line)
    return out if out != line else None


def _meaning(row_or_def) -> tuple:
    v = lambda x: getattr(x, "value", x)  # noqa: E731
    return (row_or_def.role, v(row_or_def.terminal_state), v(row_or_def.sub_domain))


def test_every_row_paraphrased_lands_in_its_meaning(pack) -> None:
    """Each catalog row's test line behind another prefix, with sizes and a vendor rewritten, and
    (for a row whose meaning a concept carries) in another casing: a row that ends an attempt must
    still give its meaning, by its own pattern or by the concept; a notice or a cascade must not
    turn into a failure."""
    defs = {name: d for name, (_, d) in pack.symptom_defs.items()}
    conceptual = {c.symptom for c in pack.concepts}
    tries: list[tuple] = []
    for row in pack.catalog:
        variants = {"prefix": _prefix(row.test_line), "units": _units(row.test_line)}
        if row.family in _FRAMEWORKS:
            variants["vendor"] = _vendor(row.test_line)
        if row.symptom in conceptual:
            variants["casing"] = _casing(row.test_line)
        tries += [(row, how, line) for how, line in variants.items() if line]
    lines = [Probe(row.sources[0], row.test_line) for row in pack.catalog]
    lines += [Probe(row.sources[0], line) for row, _, line in tries]
    got = claims(pack, lines, resolve=True).events
    failures = {
        row.id: {m for m in map(_meaning, _defs(events, defs)) if m[0] in ("root_candidate", "scheduler")}
        for row, events in zip(pack.catalog, got, strict=False)
    }
    misses = set()
    for (row, how, _), events in zip(tries, got[len(pack.catalog) :], strict=True):
        meant = set(map(_meaning, _defs(events, defs)))
        if row.role in ("root_candidate", "scheduler"):
            ok = _meaning(row) in meant
        else:  # a notice, a cascade: no failure its own line does not already say
            ok = {m for m in meant if m[0] in ("root_candidate", "scheduler")} <= failures[row.id]
        if not ok:
            misses.add((row.id, how))
    assert len({row.id for row, _, _ in tries}) == len(pack.catalog)  # every row is tried
    assert sorted(misses - set(KNOWN_MISSES)) == []
    assert sorted(set(KNOWN_MISSES) - misses) == [], "a known miss now lands: take it off the list"


@pytest.mark.skipif(prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here")
def test_the_lines_saying_a_concept_are_the_same_found_by_hyperscan_or_re2(pack, monkeypatch) -> None:
    """The staged lines are searched for the concepts' literals by Hyperscan, or without it by
    DuckDB's RE2 alternation (rules/python/concepts.py _stage): every example, look-alike, catalog
    test line and each behind a Docker json-file envelope, and records (a newline inside one), read
    the same."""
    examples = [ex for c in pack.concepts for ex in (*c.examples, *c.looks_alike)]
    probes = [Probe("kueue" if ex.source == "records" else ex.source, ex.line) for ex in examples]
    probes += [Probe(row.sources[0], row.test_line) for row in pack.catalog]
    found = claims_on_each_engine(pack, "concepts:match", probes, monkeypatch, resolve=True)
    assert found["hyperscan"] == found["duckdb"]
    assert sum(any(e["attrs"].get("concept") for e in events) for events in found["duckdb"]) > 50


def _defs(events: list[dict], defs: dict) -> list:
    return [defs[e["symptom"]] for e in events if e["symptom"] in defs]


# Paraphrases no concept's words catch yet, each with why: the list only shrinks.
KNOWN_MISSES = {
    ("storage-nfs-lost-locks", "casing"): "NFS's 'Lost N locks' has no general storage word",
    ("storage-beegfs-communication-error", "casing"): "'communication error' is a storage failure only for BeeGFS",
    ("storage-beegfs-unable-to-connect", "casing"): "'unable to connect' is a storage failure only for BeeGFS",
    ("lsf-term-cwd-notexist", "casing"): "LSF's word for a lost mount; the host-filesystem concept reads kernel logs",
}


REAL = Path(__file__).resolve().parents[1] / "real"


def _real_lines() -> list[str]:
    """Every line of tests/real's bundles (logs, scheduler records, attempt files): what tools print."""
    lines: list[str] = []
    for f in sorted(p for p in REAL.rglob("*") if p.is_file() and p.name != "expected.json"):
        lines += f.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line for line in dict.fromkeys(lines) if line.strip()]


def _respelled(line: str) -> list[str]:
    """The line as other tools, or a hostile input, might spell it: cased otherwise, joined by a
    vertical tab, a no-break space or `_`, with the Kelvin sign and the long s (RE2 folds them into
    k and s), behind a letter beyond ASCII, with a final line break."""
    return [
        line.upper(),
        line.lower(),
        line.replace(" ", "\x0b"),
        line.replace(" ", "\u00a0"),
        line.replace(" ", "_"),
        line.replace("k", "\u212a").replace("K", "\u212a").replace("s", "\u017f"),
        "\u00e9" + line,
        line + "\n",
    ]


@pytest.mark.skipif(prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here")
def test_hyperscan_hears_a_concept_on_the_lines_re2_does(pack) -> None:
    """Each concept's words (`says`) are found by Hyperscan (the alternatives it reads alike, and
    RE2 for the rest: rules/python/concepts.py _stage_scanned) on exactly the lines DuckDB's RE2
    finds them: every example and look-alike, every catalog test line, every line of tests/real,
    each respelled."""
    from tests.unit.test_prefilter import hyperscan_matches, re2_matches

    base = [ex.line for c in pack.concepts for ex in (*c.examples, *c.looks_alike)]
    base += [row.test_line for row in pack.catalog]
    lines = list(dict.fromkeys(base + [v for line in base for v in _respelled(line)] + _real_lines()))
    says = [c.says for c in pack.concepts]
    want = re2_matches(says, lines)
    got = hyperscan_matches(says, lines)
    for c, w, g in zip(pack.concepts, want, got, strict=True):
        assert [t for t, yes in zip(lines, g) if yes] == [t for t, yes in zip(lines, w) if yes], c.id
    heard = [sum(w) for w in want]
    assert min(heard) > 0 and sum(heard) > 500  # each concept is heard, on many lines ...
    assert sum(not any(col) for col in zip(*want)) > len(lines) // 2  # ... and most lines say none


@pytest.mark.skipif(prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here")
def test_the_concepts_read_tests_real_the_same_on_both_engines(pack, monkeypatch) -> None:
    """The claims of the concepts (heard by Hyperscan, or by RE2 without it) on tests/real's lines
    and the examples respelled, each on the source its bundle read it from."""
    base = [(ex.source, ex.line) for c in pack.concepts for ex in (*c.examples, *c.looks_alike)]
    probes = [Probe("kueue" if s == "records" else s, v) for s, line in base for v in _respelled(line)]
    for f in sorted(REAL.glob("*/logs/*/*")):
        source = f.parent.name if f.parent.name in ("app", "syslog", "fabricmanager") else "scheduler_log"
        probes += [Probe(source, line) for line in f.read_text(encoding="utf-8", errors="replace").splitlines()]
    found = claims_on_each_engine(pack, "concepts:match", probes, monkeypatch, resolve=True)
    assert found["hyperscan"] == found["duckdb"]
    said = sum(any(e["attrs"].get("concept") for e in events) for events in found["duckdb"])
    assert 100 < said < len(probes) // 2


def test_what_precedes_the_words_is_what_a_capture_group_takes(pack) -> None:
    """_said reads what precedes a line's first words (its level, a hedge) from two matches, not a
    capture group (RE2's slowest engine): the same text for every concept on every line saying it,
    whatever its characters (combining, beyond the BMP) or line breaks."""
    import json

    import duckdb

    from workload_attribution.rules.sandbox import python_rule

    lead = python_rule(pack, "concepts:match").__globals__["LEAD"]
    base = [ex.line for c in pack.concepts for ex in (*c.examples, *c.looks_alike)]
    base += [row.test_line for row in pack.catalog]
    odd = [f"{pre}{line}" for line in base[:150] for pre in ("e\u0301 ", "\U0001f600 x ", "a\nb ")]
    odd += [line + "\nout of memory" for line in base[:100]] + [" OOMa OOM", "first line\nOut of memory"]
    lines = list(dict.fromkeys(base + odd + [v for line in base for v in _respelled(line)] + _real_lines()))
    con = duckdb.connect()
    con.execute("CREATE TABLE l AS SELECT unnest(from_json($j, '[\"VARCHAR\"]')) AS text", {"j": json.dumps(lines)})
    q = lambda s: "'" + s.replace("'", "''") + "'"  # noqa: E731
    captured: list[str] = []
    for c in pack.concepts:
        rows = con.execute(
            f"""SELECT text, captured, {lead} FROM (
                    SELECT text, regexp_extract(text, {q("^(.*?)(?:" + c.says + ")")}, 1) AS captured,
                           regexp_extract(text, {q("^(?:.*?)(?:" + c.says + ")")}) AS upto,
                           regexp_extract_all(text, {q(c.says)}) AS words
                    FROM l WHERE regexp_matches(text, {q(c.says)}))"""
        ).fetchall()
        assert [r[0] for r in rows if r[1] != r[2]] == [], c.id
        captured += [r[1] for r in rows]
    assert len(captured) > 2000 and "" in captured  # words first on a line, or past its first line
    assert sum(len(x) > 10 for x in captured) > 1000


@pytest.mark.skipif(prefilter._hyperscan() is None, reason="the hyperscan wheel is not installed here")
def test_words_hyperscan_leaves_to_re2_are_read_the_same(pack, monkeypatch) -> None:
    """A concept's alternative Hyperscan may read otherwise (device-code-fault's `assertion
    `...` failed`: a repeat of 200 characters) is RE2's on either engine: said with its context,
    not without it, and counted in characters (200 CJK characters are 600 bytes)."""
    from workload_attribution.rules.sandbox import python_rule

    says = {c.id: c.says for c in pack.concepts}["device-code-fault"]
    rest = python_rule(pack, "concepts:match").__globals__["patterns"](tuple(c.says for c in pack.concepts)).rest
    assert [r for r in rest if r] == ["(?:(?i:(?:^|[^A-Za-z0-9])(?:assertion `[^`]{1,200}` failed)))"]
    assert rest[[c.id for c in pack.concepts].index("device-code-fault")] in says
    at = "IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion `{}` failed."
    lines = [at.format(x) for x in ("index < sizes[i]", "\u4e2d" * 200, "\u4e2d" * 201, "")]
    lines.append("python3: main.c:12: main: Assertion `n > 0' failed.")  # no device context
    found = claims_on_each_engine(pack, "concepts:match", [Probe("app", line) for line in lines], monkeypatch)
    assert found["hyperscan"] == found["duckdb"]
    concept = [[e["attrs"].get("concept") for e in events] for events in found["duckdb"]]
    said = ["device-code-fault" in c for c in concept[1 : 1 + len(lines)]]  # after the helper's kueue probe
    assert said == [True, True, False, False, False]
