"""The rule graph: which rule produces each symptom (with its kinds, attrs.kind) and which rules read
it, as each rule declares (`produces:`, `consumes:`) and its SQL confirms.

`rules validate` fails on a symptom or kind a rule uses but nobody declares (a consumer of a name
nobody produces, a rule's SQL naming a symptom it neither produces nor consumes, a symptom defined
by no rule) and warns of producers nobody reads and of two rules claiming the same line (as
`promtool check rules` reports duplicates); `rules graph` prints the lineage. A rule reading the
catalogs produces every catalog row's symptom, the row's id its kind; one reading the concepts,
every concept's symptom.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from workload_attribution.rules.pack import ROLE_HINTS, Pack, Rule, RuleFileError

# a symptom compared with a literal in a rule's SQL: = 'x', <> 'x', IN ('a', 'b'), LIKE 'x%', = 'xid_' || code
_EQUALS = re.compile(r"\bsymptom\s*(?:=|<>|!=)\s*'([^']*)'(\s*\|\|)?", re.IGNORECASE)
_IN = re.compile(r"\bsymptom\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.IGNORECASE)
_LIKE = re.compile(r"\bsymptom\s+(?:NOT\s+)?LIKE\s+'([^']*)'", re.IGNORECASE)
_KINDS = re.compile(r"'\$\.kind'\)\s*(?:=\s*'([^']*)'|(?:NOT\s+)?IN\s*\(([^)]*)\))", re.IGNORECASE)
_QUOTED = re.compile(r"'([^']*)'")


@dataclass
class Graph:
    """symptom (or a wildcard such as xid_*) -> producing rule ids, its kinds, consuming rule ids."""

    producers: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, set[str]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    consumers: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # symptom -> (rule, how)

    def names(self, pattern: str) -> list[str]:
        """Produced symptoms a name or wildcard means (xid_13 is one of xid_*)."""
        return [s for s in self.producers if fnmatch.fnmatchcase(s, pattern) or fnmatch.fnmatchcase(pattern, s)]


def produces(pack: Pack, rule: Rule) -> dict[str, set[str]]:
    out = {name: set(kinds) for name, kinds in rule.produces.items()}
    if rule.catalog:
        for row in pack.catalog:
            out.setdefault(row.symptom, set()).add(row.id)
    if rule.concepts:
        for c in pack.concepts:
            out.setdefault(c.symptom, set())
    return out


def build(pack: Pack) -> Graph:
    g = Graph()
    defs = pack.symptom_defs
    for rule in pack.rules:
        for name, kinds in produces(pack, rule).items():
            g.producers.setdefault(name, []).append(rule.id)
            g.kinds.setdefault(name, set()).update(kinds)
            g.roles[name] = defs[name][1].role if name in defs else "?"
    for rule in pack.rules:
        for entry in rule.consumes:
            for name in _meant(g, entry):
                g.consumers.setdefault(name, []).append((rule.id, entry))
    return g


def _meant(g: Graph, entry: str) -> list[str]:
    if entry == "*":
        return list(g.producers)
    if entry.startswith("role:"):
        return [s for s, role in g.roles.items() if role == entry[5:]]
    return g.names(entry.partition(":")[0])


def check(pack: Pack) -> tuple[list[RuleFileError], list[str]]:
    """(errors, warnings) of the pack's graph."""
    g = build(pack)
    defs = pack.symptom_defs
    errors: list[RuleFileError] = []
    for rule in pack.rules:
        made = produces(pack, rule)
        for name in sorted(set(rule.symptoms) - set(made)):
            errors.append(
                RuleFileError(rule.path, rule.id, "produces", f"defines {name} but does not say it produces it")
            )
        for name in sorted(n for n in made if "*" not in n and n not in defs):
            errors.append(RuleFileError(rule.path, rule.id, "produces", f"{name} is defined by no rule's symptoms"))
        errors += _check_consumes(g, rule)
        errors += _check_sql(g, rule, made)
        errors += _check_emitted(pack, rule, made)
        extract = {r.id for r in pack.by_phase("extract")}
        for other in rule.overrides:
            if other not in extract or other == rule.id:
                errors.append(RuleFileError(rule.path, rule.id, "overrides", f"{other!r} is not another extract rule"))
    return errors, _unread(g)


def _check_consumes(g: Graph, rule: Rule) -> list[RuleFileError]:
    errors = []
    for entry in rule.consumes:
        name, _, kind = entry.partition(":")
        if entry == "*":
            continue
        if name == "role":
            if kind not in ROLE_HINTS or not _meant(g, entry):
                errors.append(
                    RuleFileError(rule.path, rule.id, "consumes", f"{entry}: no produced symptom has role {kind!r}")
                )
        elif not g.names(name):
            errors.append(RuleFileError(rule.path, rule.id, "consumes", f"{name} is produced by no rule"))
        elif kind and not any(kind in g.kinds.get(n, set()) for n in g.names(name)):
            errors.append(RuleFileError(rule.path, rule.id, "consumes", f"no rule produces {name} of kind {kind!r}"))
    return errors


def _check_sql(g: Graph, rule: Rule, made: dict[str, set[str]]) -> list[RuleFileError]:
    """Every symptom and kind the rule's SQL names is one it produces or consumes (a name
    nobody declares is a hidden coupling: found here, not by reading every rule)."""
    sql = rule.sql or ""
    declared = set(made) | {e.partition(":")[0] for e in rule.consumes if not e.startswith("role:")}
    named = [m.group(1) + ("*" if m.group(2) else "") for m in _EQUALS.finditer(sql)]
    named += [q for m in _IN.finditer(sql) for q in _QUOTED.findall(m.group(1))]
    named += [m.group(1).replace("\\_", "_").replace("%", "*") for m in _LIKE.finditer(sql)]
    errors = []
    for name in dict.fromkeys(named):
        if "*" in declared or any(fnmatch.fnmatchcase(name, d) or fnmatch.fnmatchcase(d, name) for d in declared):
            continue
        errors.append(
            RuleFileError(rule.path, rule.id, "sql", f"names symptom {name!r}, which it neither produces nor consumes")
        )
    kinds = {k for m in _KINDS.finditer(sql) for k in ([m.group(1)] if m.group(1) else _QUOTED.findall(m.group(2)))}
    known = set().union(*(made.values() or [set()]))
    known |= {e.partition(":")[2] for e in rule.consumes if ":" in e and not e.startswith("role:")}
    for kind in sorted(kinds - known):
        errors.append(
            RuleFileError(rule.path, rule.id, "sql", f"names kind {kind!r}, which it neither produces nor consumes")
        )
    return errors


def _check_emitted(pack: Pack, rule: Rule, made: dict[str, set[str]]) -> list[RuleFileError]:
    """Every symptom the rule's code can emit (rules/emits.py: a constant of its symptom column, in
    any CASE or UNION branch) is one it says it produces: found without running its tests."""
    from workload_attribution.rules.emits import rule_symptoms

    if rule.output != "events":
        return []
    emitted = rule_symptoms(pack, rule)
    if emitted is None:
        return []
    return [
        RuleFileError(
            rule.path,
            rule.id,
            "produces",
            f"its {'SQL' if rule.sql else 'code'} emits {name!r}, which it does not declare",
        )
        for name in sorted(emitted.names)
        if not any(fnmatch.fnmatchcase(name, d) or fnmatch.fnmatchcase(d, name) for d in made)
    ]


def _unread(g: Graph) -> list[str]:
    """Producers whose symptom no rule reads by name, wildcard or role (context, benign and facts
    are for the diagnosis to show; '*' readers such as role-context do not count)."""
    out = []
    for name, rules in sorted(g.producers.items()):
        if g.roles.get(name) in ("context", "benign", "fact"):
            continue
        readers = [r for r, how in g.consumers.get(name, []) if how != "*"]
        if not readers:
            out.append(f"{name} ({g.roles.get(name)}) is produced by {', '.join(rules)} but read by no rule")
    return out


def duplicate_claims(pack: Pack) -> list[str]:
    """Lines of the pack's tests and catalogs that two extract rules both turn into events (after
    the declared overrides): each a warning naming the rules and the line."""
    from workload_attribution.rules.claims import Probe, claims

    probes: list[Probe] = []
    for rule in pack.by_phase("extract"):
        for case in rule.tests:
            probes += [Probe(x["source"], x["text"]) for x in case.lines]
    probes += [Probe(row.sources[0], row.test_line) for row in pack.catalog]
    probes = list(dict.fromkeys(probes))
    got = claims(pack, probes, resolve=True)
    out = []
    for probe, events in zip(probes, got.events, strict=True):
        by_rule = sorted({e["rule"]: e["symptom"] for e in events}.items())
        if len(by_rule) > 1:
            who = ", ".join(f"{r} ({s})" for r, s in by_rule)
            out.append(f"two rules claim one line: {who}: {probe.text[:120]}")
    return out


def lineage(pack: Pack) -> list[dict[str, Any]]:
    """Per symptom: its role, the rules producing it (with kinds) and those reading it by name
    (or kind, or wildcard), by its role, or as every event."""
    g = build(pack)
    out = []
    for name, rules in sorted(g.producers.items()):
        readers = g.consumers.get(name, [])
        out.append(
            {
                "symptom": name,
                "role": g.roles.get(name),
                "produced_by": rules,
                "kinds": sorted(g.kinds.get(name, set())),
                "read_by_name": sorted({r for r, how in readers if how != "*" and not how.startswith("role:")}),
                "read_by_role": sorted({r for r, how in readers if how.startswith("role:")}),
                "read_as_every_event": sorted({r for r, how in readers if how == "*"}),
            }
        )
    return out
