"""`attribution rules suggest`: the fleet's insufficient_evidence attempts grouped by the messages they
logged that no completed attempt did, a catalog row drafted per group, and a candidate pack that
`rules validate` and `rules test` pass and whose `rules impact` names exactly the groups' attempts."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.helpers import diagnose
from tests.suggest_fleet import WORDS, Fleet, make_fleet
from workload_attribution.cli import main
from workload_attribution.rules.catalog import MIN_LITERAL, literals_of
from workload_attribution.rules.pack import default_pack
from workload_attribution.tasks import suggest

# attempts per message: unequal, so the order of the groups is known (the default tier: 11 attempts)
SMALL = (4, 3, 2, 1, 1)
LARGE = (60, 50, 40, 30, 20)  # 200 attempts: @slow


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def seeded(out: Path, per_message: tuple[int, ...], good: int = 2) -> tuple[Path, Fleet, dict[int, set[str]]]:
    """The fleet diagnosed into a warehouse with its evidence archived: the warehouse, the fleet and
    each message's attempts (diagnosis ids), each checked to be insufficient_evidence."""
    fleet = make_fleet(out / "bundles", per_message, good=good)
    wh = out / "w.duckdb"
    pack = default_pack()
    for path in fleet.good:
        assert diagnose(path, warehouse=wh, pack=pack, archive=True).terminal_state == "completed"
    by_message: dict[int, set[str]] = {}
    for path, message in fleet.doubtful:
        d = diagnose(path, warehouse=wh, pack=pack, archive=True)
        assert d.sub_domain == "insufficient_evidence", (path.name, d.terminal_state, d.sub_domain)
        assert not any(WORDS[message] in e.text for e in d.evidence), path.name  # no rule knows it
        by_message.setdefault(message, set()).add(d.diagnosis_id)
    return wh, fleet, by_message


def check_suggest_then_impact(tmp: Path, wh: Path, by_message: dict[int, set[str]], full_test: bool) -> None:
    candidate = tmp / "candidate"
    started = time.monotonic()
    code, out, err = cli("rules", "suggest", "--warehouse", str(wh), "--top", "5", "--out", str(candidate), "--json")
    took = time.monotonic() - started
    assert code == 0, err
    report = json.loads(out)
    assert report["drafted"] == 5 and report["candidate"] == str(candidate)
    groups = [g for g in report["groups"] if g["row"]]
    assert len(groups) == 5
    # one group per message, the largest first, each holding exactly that message's attempts
    sizes = [len(by_message[m]) for m in range(len(WORDS))]
    assert [g["attempts"] for g in groups] == sorted(sizes, reverse=True)
    seen = set()
    for g in groups:
        (message,) = [m for m, word in enumerate(WORDS) if word in g["first_line"]]
        seen.add(message)
        assert {a["diagnosis_id"] for a in g["changes"]} == by_message[message]
        row = g["row"]
        assert row["symptom"] == suggest.NEEDS_MEANING and g["needs_meaning"] and g["archived"]
        assert row["test_line"] == g["first_line"] and g["origin"]["diagnosis_id"] in by_message[message]
        assert row["test_line_origin"].startswith("log:https://") and g["origin"]["diagnosis_id"] in row["reference"]
        assert min(len(x) for x in literals_of(row["match"], row["pattern"])) >= MIN_LITERAL
        assert WORDS[message] in row["pattern"] and "{" in row["pattern"]  # masked parts as bounded classes
    assert seen == set(range(len(WORDS)))
    assert report["review"] and "a reviewer must set its meaning" in report["review"]
    written = list(csv.DictReader((candidate / "catalogs" / suggest.SUGGESTED_CSV).open()))
    assert [r["id"] for r in written] == [g["row"]["id"] for g in groups]

    code, out, err = cli("rules", "validate", "--rules-dir", str(candidate))
    assert code == 0 and "INVALID" not in out, out + err
    test = ["rules", "test", "--rules-dir", str(candidate)] + ([] if full_test else ["--rule", "catalog"])
    code, out, err = cli(*test)
    assert code == 0 and " 0 failed" in out, out + err

    started = time.monotonic()
    code, out, err = cli("rules", "impact", "--candidate", str(candidate), "--warehouse", str(wh), "--json")
    assert code == 0, err
    attempts = sum(len(v) for v in by_message.values())
    print(f"{attempts} attempts: rules suggest {took:.1f} s, rules impact {time.monotonic() - started:.1f} s")
    impact = json.loads(out)
    assert not impact["failed"]
    changed = {c["diagnosis_id"] for c in impact["changed"]}
    assert changed == set().union(*by_message.values())  # every attempt of the groups, none other
    assert all(c["new"]["root_symptom"] == suggest.NEEDS_MEANING for c in impact["changed"])


def test_five_unknown_messages_become_five_rows_whose_impact_is_exactly_their_attempts(tmp_path):
    """The done-when, small: 11 insufficient_evidence attempts sharing 5 messages no rule knows
    (4, 3, 2, 1 and 1 of them) beside 2 completed attempts."""
    wh, _, by_message = seeded(tmp_path, SMALL)
    check_suggest_then_impact(tmp_path, wh, by_message, full_test=False)

    # the table: one line per group with its attempts, hosts and first line, then its meaning
    code, out, err = cli("rules", "suggest", "--warehouse", str(wh), "--top", "2")
    assert code == 0, err
    assert out.startswith("rules suggest: 11 insufficient_evidence attempt(s) since ")
    assert "5 message(s) logged by no completed attempt, 2 drafted" in out
    header = next(line for line in out.splitlines() if "first line / proposed meaning" in line)
    assert re.search(r"#\s+attempts\s+hosts", header)
    first = out.splitlines()[out.splitlines().index(header) + 1]
    assert re.match(r"\s+1\s+4\s+\d+\s+\S", first) and WORDS[0] in first
    assert out.count("meaning: needs a meaning") == 2 and "a reviewer must set its meaning" in out
    # a window no attempt ended in: nothing to group, still done
    code, out, err = cli("rules", "suggest", "--warehouse", str(wh), "--since", "now", "--json")
    assert code == 0 and json.loads(out)["attempts"] == 0 and json.loads(out)["groups"] == []


@pytest.mark.slow
def test_two_hundred_attempts_sharing_five_messages(tmp_path):
    """The done-when at size: 200 insufficient_evidence attempts sharing 5 unknown messages; the
    candidate passes every test of the pack."""
    wh, _, by_message = seeded(tmp_path, LARGE, good=3)
    check_suggest_then_impact(tmp_path, wh, by_message, full_test=True)


def test_a_line_a_concept_reads_gets_the_concepts_meaning(tmp_path):
    """A message only a failure concept reads (HIP's out of memory, which no row knows) is drafted
    with the concept's symptom and verdict, not the placeholder; a line a row already reads is
    known and drafted nowhere."""
    pack = default_pack()
    a = suggest.AttemptRef("d-1", "c", "slurm", "1", 0, None)
    oom = "[rank3]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"
    known = "RuntimeError: CUDA error: out of memory on device 3"
    groups = []
    for text in (oom, known):
        key = suggest.message_keys([(text, None, [])])[0]
        g = suggest.Group(key[1], [suggest.Line(a, "app", "n1", "logs/app/n1.log", 1, None, text, [], *key)])
        groups.append(g)
    suggest.probe(pack, groups)
    assert groups[1].read_by == "catalog-messages: cuda_oom"
    g = groups[0]
    assert g.read_by is None and g.concept == "device-memory-exhausted:cuda_oom"
    suggest.draft(g, pack, set(), None)
    assert g.row is not None and not g.needs_meaning
    assert (g.row["symptom"], g.row["role"], g.row["terminal_state"]) == (
        "cuda_oom",
        "root_candidate",
        "application_failure",
    )
    assert re.search(g.row["pattern"], oom)
    # the candidate holding it validates: the row and the concept do not both claim the line
    written = suggest.write_candidate(Path(pack.path), tmp_path / "candidate", [g])
    assert "needs_a_meaning" not in (tmp_path / "candidate" / "extract" / "catalog-messages.yaml").read_text()
    code, out, err = cli("rules", "validate", "--rules-dir", str(written.parent.parent))
    assert code == 0 and "INVALID" not in out, out + err


def test_the_pattern_bounds_each_masked_part_by_what_the_group_logged():
    """Numbers, hex, ids and paths each become the narrowest bounded class holding every line's
    value; nothing masked is a literal; a message with no literal of 4+ characters is no row."""
    a = suggest.AttemptRef("d-1", "c", "slurm", "1", 0, None)

    def group(*texts: str) -> suggest.Group:
        keys = suggest.message_keys([(t, None, ["node7"]) for t in texts])
        lines = [suggest.Line(a, "app", "n1", "f", 1, None, t, ["node7"], b, k) for t, (b, k) in zip(texts, keys)]
        assert len({k for _, k in keys}) == 1, keys
        return suggest.Group(keys[0][1], lines)

    g = group("fizzbuzz relay 12 on node7 said 0x1f at /a/b/c", "fizzbuzz relay 3 on node7 said 0xff at /x/y")
    assert suggest.pattern_of(g) == (
        "regex",
        r"fizzbuzz relay [0-9]{1,20} on [\w.:@+~-]{1,128} said (?:0[xX])?[0-9a-fA-F]{1,40} at \S{1,256}",
    )
    assert suggest.pattern_of(group("the quuxer stopped")) == ("literal", "the quuxer stopped")
    assert suggest.pattern_of(group("a 1 b 2 c 3")) is None
