"""Rule files: schema, loading and validation. Rules are data; see rules/README.md.

A rule is a YAML file under rules/<phase>/ with an id, a version, a phase, a description, what it
outputs, the SQL (or a Python function for what SQL cannot express) and test cases beside it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from workload_attribution.contracts.vocabulary import Action, Confidence, SubDomain, TerminalState, check_pair
from workload_attribution.rules.catalog import CatalogError, CatalogRow, load_catalog, read_catalog
from workload_attribution.rules.catalog import table_json as catalog_table_json
from workload_attribution.rules.concepts import Concept, ConceptError, load_concepts, read_concepts
from workload_attribution.rules.concepts import table_json as concepts_table_json
from workload_attribution.staging.user_cache import cache_dir, temporary_name

# libyaml's C loader when present: the same safe subset, ~15x faster than the pure-Python one.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

RULES_DIR = Path(__file__).resolve().parent
PHASES = ("extract", "early", "final", "report")
OUTPUTS = ("events", "annotations", "verdicts", "roles", "actions")
# Outputs whose rules change what other rules of the phase see: their order must be explicit.
ORDERED_OUTPUTS = ("annotations", "roles", "actions")
PACK_KEYS = ("version", "python", "precedence", "no_verdict")  # pack.yaml's
ROLE_HINTS = ("root_candidate", "cascade", "context", "benign", "fact", "scheduler")


class RuleFileError(Exception):
    """A rule file is broken. The message names the file, the rule and the field."""

    def __init__(self, path: Path | str, rule: str | None, field: str, message: str):
        self.path, self.rule, self.field = str(path), rule, field
        super().__init__(f"{path}: rule {rule or '?'}: field '{field}': {message}")


# The pack's models build their validators when first used, not at import: a process that
# unpickles the shipped pack (default_pack) validates none of them (~25 ms at every start).
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class SymptomDef(Strict):
    """What a symptom means when it is seen: its role by default and, as a root, the verdict.
    The words are the diagnosis vocabulary (contracts/vocabulary.py): a typo is refused here."""

    title: str
    role: Literal["root_candidate", "cascade", "context", "benign", "fact", "scheduler"]
    terminal_state: TerminalState | None = None
    sub_domain: SubDomain | None = None
    action: Action | None = None
    interesting: bool = False
    blame: Literal["node", "peer", "none"] = "none"
    generic: bool = Field(
        False,
        description="a reading of last resort (python-exception's user-code exception): a concept's meaning "
        "of the same line replaces it",
    )
    failure_signal: bool | None = Field(
        None,
        description="marks when the attempt began failing (the failure window ends its look-back there); "
        "default: what a cascade symptom does",
    )

    @model_validator(mode="after")
    def _belong_together(self) -> SymptomDef:
        if self.terminal_state is not None and self.sub_domain is not None:
            check_pair(self.terminal_state, self.sub_domain)
        return self


class RuleTest(Strict):
    name: str
    attempt: dict[str, Any] = Field(default_factory=dict)
    lines: list[dict[str, Any]] = Field(default_factory=list)
    records: list[dict[str, Any]] = Field(default_factory=list)
    samples: list[dict[str, Any]] = Field(default_factory=list)
    coverage: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list, description="pre-existing events (later phases)")
    verdict_root: int | None = Field(default=None, description="roles rules: event_id of the chosen root")
    verdict: dict[str, Any] = Field(default_factory=dict, description="actions rules: the chosen verdict's columns")
    expect: list[dict[str, Any]] = Field(default_factory=list)
    expect_count: int | None = None


# The sources whose observations are log lines (`log_lines`): what the scan keeps by the literals.
LOG_SOURCES = frozenset({"app", "syslog", "fabricmanager", "scheduler_log"})


class Rule(Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    version: int = Field(ge=1)
    phase: Literal["extract", "early", "final", "report"]
    description: str = Field(min_length=10)
    output: Literal["events", "annotations", "verdicts", "roles", "actions"]
    sources: list[str] = Field(default_factory=list)
    prefilter: list[str] = Field(default_factory=list)
    order: int = 100
    labels: dict[str, str] = Field(default_factory=dict)
    symptoms: dict[str, SymptomDef] = Field(default_factory=dict)
    sql: str | None = None
    python: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_]*:[a-zA-Z_]\w*$",
        description="module:function, the module a file of the pack's python/ folder that pack.yaml allows",
    )
    catalog: bool = Field(
        default=False,
        description="reads the message catalogs (catalogs/*.csv): its pre-filter is their rows' literals",
    )
    produces: dict[str, list[str]] = Field(
        default_factory=dict,
        description="the symptoms the rule's events carry, each with the kinds (attrs.kind) it gives them",
    )
    consumes: list[str] = Field(
        default_factory=list,
        description="what the rule reads of others' events: `symptom`, `symptom:kind`, `role:<role_hint>` or `*`",
    )
    requires: list[str] = Field(
        default_factory=list,
        description="of what it consumes, what it cannot find anything without: the engine runs the rule only when "
        "one of these is among the attempt's events (`symptom`, a wildcard, `role:<role_hint>`: an event of that "
        "role hint as it stands then); empty: it always runs",
    )
    overrides: list[str] = Field(
        default_factory=list,
        description="extract rules whose events on a line this rule also claims are dropped (specific beats generic)",
    )
    concepts: bool = Field(
        default=False,
        description="reads the failure concepts (concepts/*.yaml): its pre-filter is their words' spellings",
    )
    yields: bool = Field(
        default=False,
        description="its events on a line another extract rule also reads (any role; not one it overrides) are "
        "dropped: the generic reading gives way to every specific one",
    )
    tests: list[RuleTest] = Field(min_length=1)
    path: str = ""

    @field_validator("prefilter")
    @classmethod
    def _non_empty_literals(cls, value: list[str]) -> list[str]:
        if any(not v for v in value):
            raise ValueError("pre-filter literals must be non-empty strings")
        return value

    @model_validator(mode="after")
    def _one_body(self) -> Rule:
        if bool(self.sql) == bool(self.python):
            raise ValueError("exactly one of 'sql' or 'python' is required")
        if (
            self.phase == "extract"
            and set(self.sources) & LOG_SOURCES
            and not (self.prefilter or self.catalog or self.concepts)
        ):
            raise ValueError("extract rules reading log sources need a 'prefilter' (literal strings)")
        if (self.catalog or self.concepts or self.overrides or self.yields) and self.phase != "extract":
            raise ValueError("only extract rules read the catalogs or the concepts, override or yield to other rules")
        if self.requires and self.phase == "extract":
            raise ValueError("'requires' names events a rule reads: extract rules read observations")
        unread = [r for r in self.requires if r not in self.consumes]
        if unread:
            raise ValueError(f"'requires' lists what the rule consumes: {unread[0]!r} is not in 'consumes'")
        return self


class PackTest(Strict):
    """A test of the whole pack: raw lines of several sources (and records, samples) in, the verdict out."""

    name: str
    attempt: dict[str, Any] = Field(default_factory=dict)
    lines: list[dict[str, Any]] = Field(default_factory=list, description="{source, node, text}; files in order")
    records: list[dict[str, Any]] = Field(default_factory=list)
    samples: list[dict[str, Any]] = Field(default_factory=list)
    coverage: list[dict[str, Any]] = Field(
        default_factory=list, description="{source, status}; default: ok for every source with lines"
    )
    expect: dict[str, Any] = Field(
        description="terminal_state, sub_domain, affected_nodes, root_symptom, "
        "recommended_action, confidence: those given must match"
    )
    path: str = ""


class NoVerdict(Strict):
    """pack.yaml `no_verdict:`: the verdict that stands when no verdicts rule gives one (the pack's
    fallback rule failed, or it has none). It blames nobody and names no root."""

    terminal_state: TerminalState
    sub_domain: SubDomain
    confidence: Confidence
    action: Action
    reason: str = Field(min_length=1, description="the diagnosis's note saying why")

    @model_validator(mode="after")
    def _belong_together(self) -> NoVerdict:
        check_pair(self.terminal_state, self.sub_domain)
        return self


class Pack(BaseModel):
    model_config = ConfigDict(defer_build=True)  # as Strict

    version: str
    rules: list[Rule]
    precedence: list[str] = Field(default_factory=list, description="verdicts rules, the winner first")
    no_verdict: NoVerdict = Field(description="pack.yaml `no_verdict:`: the verdict when no verdicts rule gives one")
    tests: list[PackTest] = Field(default_factory=list, description="pack-level tests (tests/*.yaml)")
    path: str = Field("", description="the pack's directory")
    python_modules: list[str] = Field(
        default_factory=list, description="pack.yaml `python:`: modules of python/ that rules may call"
    )
    broken: list[dict[str, str]] = Field(
        default_factory=list, description="rule files left out (load_pack(skip_broken=True)): rule, error"
    )
    _memo: dict[tuple[Any, ...], list[str]] = PrivateAttr(default_factory=dict)
    _tables: dict[str, str] = PrivateAttr(default_factory=dict)  # see table_json
    _selects: set[str] = PrivateAttr(default_factory=set)  # see check_select
    _lines_only: dict[str, bool] = PrivateAttr(default_factory=dict)  # see reads_only_lines
    _derived: dict[str, tuple[tuple[Any, ...], Any]] = PrivateAttr(default_factory=dict)  # see derived
    catalog: list[CatalogRow] = Field(default_factory=list, description="the message catalogs' rows (catalogs/*.csv)")
    concepts: list[Concept] = Field(default_factory=list, description="the failure concepts (concepts/*.yaml)")

    @property
    def symptom_defs(self) -> dict[str, tuple[str, SymptomDef]]:
        out: dict[str, tuple[str, SymptomDef]] = {}
        for r in self.rules:
            for name, d in r.symptoms.items():
                out[name] = (r.id, d)
        return out

    def prefilter(self, source: str) -> list[str]:
        """The literals a line of the source must hold to be kept: the extract rules' own and,
        for rules reading the catalogs, their rows'. A literal holding another adds nothing."""
        return self._literals(None, source)

    def rule_literals(self, rule: Rule, source: str) -> list[str]:
        """One extract rule's literals for a source (its tests keep lines by these)."""
        return self._literals(rule, source)

    def _literal_inputs(self) -> tuple[Any, ...]:
        """What the catalogs' rows and the concepts give the literals from (part of their key)."""
        return (
            tuple((row.match, row.pattern, row.sources) for row in self.catalog),
            tuple((c.words, c.codes, c.patterns, c.sources) for c in self.concepts),
        )

    def warm_literals(self) -> None:
        """Every source's literals worked out now (default_pack keeps them with the pack), their
        keys sharing one copy of the rows' and concepts' inputs; and the catalog's and the concepts'
        tables (table_json)."""
        inputs = self._literal_inputs()
        for source in sorted({s for r in self.rules for s in r.sources}):
            self._literals(None, source, inputs)
        self.table_json("catalog")
        self.table_json("concepts")
        for rule in self.rules:  # each rule's SQL found one SELECT (check_select), kept with the pack
            if rule.sql:
                try:
                    self.check_select(rule.sql)
                except Exception:  # the rule fails when it runs, and says why then
                    pass
            self.reads_only_lines(rule)

    def derived(self, key: str, of: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """What derives from `of` (parts of this pack: its rules, its path and version), made once and
        kept with the pack: default_pack makes them before pickling it, so a new process finds them
        made (rules/diff.py: digesting the shipped pack's rules and files cost one ~15 ms). A copy of
        the pack (model_copy) starts with what was kept, so an entry counts only while `of` holds the
        very objects it was made of: a copy with other rules makes its own."""
        kept = self._derived.get(key)
        if kept is None or len(kept[0]) != len(of) or any(a is not b for a, b in zip(kept[0], of)):
            kept = (of, make())
            self._derived = {**self._derived, key: kept}  # a new dict: a copy's entries stay its own
        return kept[1]

    def reads_only_lines(self, rule: Rule) -> bool:
        """Whether an extract rule can find something only where a log line holds one of its own
        pre-filter literals (rule_literals): its SQL reads no table but `log_lines`, of log sources
        only. A rule's tests keep their lines by those literals alone, as the scan of a source keeps
        no line holding none of the pack's; so where no line holds one, the engine does not run it
        (rules/held.py). Its SQL is parsed once per version of the pack and kept with it."""
        if rule.phase != "extract" or not rule.sql or not rule.prefilter or rule.catalog or rule.concepts:
            return False
        if not rule.sources or not set(rule.sources) <= LOG_SOURCES or any("\n" in lit for lit in rule.prefilter):
            return False  # a literal holding a line break holds no line: the scan leaves it out
        found = self._lines_only.get(rule.sql)
        if found is None:
            from workload_attribution.rules.reads import reads_only

            found = self._lines_only[rule.sql] = reads_only(rule.sql, "log_lines")
        return found

    def check_select(self, sql: str) -> None:
        """sandbox.single_select: a rule's SQL is one SELECT. Parsing the pack's ~40 rules cost a new
        process ~11 ms: the SQL found one SELECT is kept with the pack (default_pack: pickled with
        it), so the shipped pack's rules are parsed once per version of the pack, not per process."""
        if sql in self._selects:
            return
        from workload_attribution.rules.sandbox import single_select

        single_select(sql)  # raises RuleRuntimeError: nothing kept
        self._selects.add(sql)

    def table_json(self, table: str) -> str:
        """The catalogs' rows (`catalog`) or the concepts (`concepts`) as the attempt's table of that
        name, JSON for from_json (rules/pack_data.py loads it into each attempt): built once per pack
        version (what derives from a pack is keyed by its version: a pack with other rows is another
        version) and kept with the pack, so the shipped pack's cache holds them built (deriving every
        row's literals from its pattern cost a new process ~15 ms)."""
        key = f"{table}@{self.version}"
        found = self._tables.get(key)
        if found is None:
            if table == "catalog":
                found = catalog_table_json(self.catalog)
            elif table == "concepts":
                roles = {name: d.role for name, (_, d) in self.symptom_defs.items()}
                found = concepts_table_json(self.concepts, roles)
            else:
                raise KeyError(table)
            self._tables[key] = found
        return found

    def _literals(self, rule: Rule | None, source: str, inputs: tuple[Any, ...] | None = None) -> list[str]:
        # Minimising a few thousand literals takes ~0.25 s for the shipped pack's sources and
        # every attempt asks for each of its sources: kept per pack, keyed by what the literals
        # come from (the rules, rows and concepts as they stand: a pack's lists may be replaced or
        # appended to after loading), not by the objects' ids, so the shipped pack's cache keeps
        # them too (default_pack: pickled with them, warm).
        rules = [rule] if rule is not None else [r for r in self.rules if r.phase == "extract" and source in r.sources]
        inputs = inputs or self._literal_inputs()
        key = (rule is None, source, inputs, *map(_literal_key, rules))
        found = self._memo.get(key)
        if found is None:
            if rule is None:
                lits = {lit for r in rules for lit in self._literals(r, source, inputs)}
            else:
                lits = set(rule.prefilter)
                if rule.catalog and source in rule.sources:
                    lits.update(lit for row in self.catalog if source in row.sources for lit in row.literals)
                if rule.concepts and source in rule.sources:
                    lits.update(lit for c in self.concepts if source in c.sources for lit in c.literals)
            found = self._memo[key] = _minimal(lits)
        return list(found)

    def by_phase(self, phase: str) -> list[Rule]:
        """A phase's rules in run order: by `order`, which validation makes unique where order
        matters (annotations, roles, actions); extract and verdicts rules do not see each other."""
        return sorted((r for r in self.rules if r.phase == phase), key=lambda r: (r.order, r.id))

    def rank(self, rule_id: str) -> int:
        """A verdicts rule's place in the precedence (0 wins)."""
        return self.precedence.index(rule_id) if rule_id in self.precedence else len(self.precedence)


def _literal_key(rule: Rule) -> tuple[Any, ...]:
    """What a rule's literals come from."""
    return (rule.id, tuple(rule.prefilter), tuple(rule.sources), rule.catalog, rule.concepts)


def _minimal(literals: set[str]) -> list[str]:
    """The literals without those that hold a shorter one (a line holding them holds it): the
    same lines kept, a smaller automaton for the scan."""
    out: list[str] = []
    for lit in sorted(literals, key=lambda x: (len(x), x)):
        if not any(kept in lit for kept in out):
            out.append(lit)
    return sorted(out)


def _field_of(err: Any) -> str:
    return ".".join(str(p) for p in err["loc"]) or "rule"


def load_rule(path: Path) -> Rule:
    try:
        doc = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise RuleFileError(
            path,
            None,
            "yaml",
            f"not valid YAML{f' (line {mark.line + 1})' if mark else ''}: "
            f"{str(getattr(exc, 'problem', None) or exc).splitlines()[0]}",
        ) from None
    if not isinstance(doc, dict):
        raise RuleFileError(path, None, "rule", "a rule file is a mapping of fields")
    rule_id = doc.get("id") if isinstance(doc.get("id"), str) else None
    try:
        rule = Rule.model_validate({**doc, "path": str(path)})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RuleFileError(path, rule_id, _field_of(err), err["msg"]) from None
    if path.stem != rule.id:
        raise RuleFileError(
            path, rule.id, "id", f"the file is named {path.name}: a rule's file is <id>.yaml ({rule.id}.yaml)"
        )
    expected_phase = path.parent.name
    if expected_phase in PHASES and rule.phase != expected_phase:
        raise RuleFileError(path, rule.id, "phase", f"is '{rule.phase}' but the file lives in rules/{expected_phase}/")
    return rule


def pack_meta(rules_dir: Path) -> dict[str, Any]:
    path = rules_dir / "pack.yaml"
    if not path.is_file():
        raise RuleFileError(path, None, "pack", "a rules pack has a pack.yaml (its version)")
    try:
        meta = yaml.load(path.read_text(), Loader=SAFE_LOADER) or {}
    except yaml.YAMLError as exc:
        raise RuleFileError(path, None, "yaml", f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(meta, dict):
        raise RuleFileError(path, None, "pack", f"pack.yaml is a mapping ({', '.join(PACK_KEYS)})")
    unknown = sorted(set(meta) - set(PACK_KEYS))
    if unknown:
        raise RuleFileError(path, None, unknown[0], f"unknown key (allowed: {', '.join(PACK_KEYS)})")
    mods = meta.get("python") or []
    if not isinstance(mods, list) or not all(isinstance(m, str) and m.isidentifier() for m in mods):
        raise RuleFileError(path, None, "python", "a list of module names in the pack's python/ folder")
    order = meta.get("precedence") or []
    if not isinstance(order, list) or not all(isinstance(r, str) for r in order) or len(set(order)) != len(order):
        raise RuleFileError(path, None, "precedence", "a list of verdicts rule ids, each once, the winner first")
    if "no_verdict" not in meta:
        raise RuleFileError(path, None, "no_verdict", "missing: the verdict when no verdicts rule gives one")
    try:
        meta["no_verdict"] = NoVerdict.model_validate(meta["no_verdict"])
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RuleFileError(path, None, ".".join(["no_verdict", *map(str, err["loc"])]), err["msg"]) from None
    return meta


def load_pack_tests(rules_dir: Path) -> list[PackTest]:
    out = []
    for p in sorted((rules_dir / "tests").glob("*.yaml")):
        try:
            doc = yaml.load(p.read_text(), Loader=SAFE_LOADER) or []
        except yaml.YAMLError as exc:
            raise RuleFileError(p, None, "yaml", f"not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(doc, list):
            raise RuleFileError(p, None, "tests", "a list of pack tests")
        for i, case in enumerate(doc):
            try:
                out.append(PackTest.model_validate({**case, "path": str(p)} if isinstance(case, dict) else case))
            except ValidationError as exc:
                err = exc.errors()[0]
                raise RuleFileError(p, None, f"[{i}].{_field_of(err)}", err["msg"]) from None
    return out


def check_pack_shape(pack: Pack) -> list[RuleFileError]:
    """What only the whole pack can say: every verdicts rule in the precedence (and only those),
    an explicit order where rules of a phase see each other's output."""
    meta = Path(pack.path) / "pack.yaml"
    errors: list[RuleFileError] = []
    verdict_rules = {r.id for r in pack.rules if r.output == "verdicts"}
    for rid in sorted(verdict_rules - set(pack.precedence)):
        errors.append(RuleFileError(meta, rid, "precedence", "a verdicts rule missing from the precedence list"))
    for rid in [r for r in pack.precedence if r not in verdict_rules]:
        errors.append(RuleFileError(meta, rid, "precedence", "names no verdicts rule of this pack"))
    for phase in PHASES:
        seen: dict[int, str] = {}
        for r in pack.by_phase(phase):
            if r.output not in ORDERED_OUTPUTS:
                continue
            if r.order in seen:
                errors.append(
                    RuleFileError(
                        r.path,
                        r.id,
                        "order",
                        f"{r.order} is also the order of {seen[r.order]} "
                        f"in phase {phase}: rules that change what others see need distinct orders",
                    )
                )
            seen[r.order] = r.id
    return errors


def _other_files(rules_dir: Path) -> list[Path]:
    """The pack's files besides its rule files: what its version covers with them."""
    return sorted(
        [
            *(rules_dir / "data").glob("*.csv"),
            *(rules_dir / "catalogs").glob("*.csv"),
            *(rules_dir / "concepts").glob("*.yaml"),
            *(rules_dir / "python").glob("*.py"),
            *(rules_dir / "tests").glob("*.yaml"),
            rules_dir / "pack.yaml",
        ]
    )


def pack_version(rules_dir: Path, files: list[Path]) -> str:
    meta = pack_meta(rules_dir)
    digest = hashlib.sha256()
    for f in sorted(files) + _other_files(rules_dir):
        digest.update(f.relative_to(rules_dir).as_posix().encode())
        digest.update(f.read_bytes())
    return f"{meta.get('version', '0')}+{digest.hexdigest()[:10]}"


def load_pack(rules_dir: str | Path | None = None, skip_broken: bool = False) -> Pack:
    """Load and validate every rule file. The first broken file raises RuleFileError, or, with
    `skip_broken` (diagnosing: one bad file must not stop every diagnosis), is left out and listed
    in `pack.broken` by rule id (the file's name when the id cannot be read), so each diagnosis
    says which rules did not run. The pack version covers every file, broken ones included."""
    rules_dir = Path(rules_dir or RULES_DIR)
    files = sorted(p for phase in PHASES for p in (rules_dir / phase).glob("*.yaml"))
    rules, broken = [], []
    seen: dict[str, str] = {}
    for p in files:
        try:
            r = load_rule(p)
            if r.id in seen:
                raise RuleFileError(r.path, r.id, "id", f"duplicate of the rule in {seen[r.id]}")
        except RuleFileError as exc:
            if not skip_broken:
                raise
            broken.append({"rule": exc.rule or p.stem, "error": f"not loaded: {exc}"})
            continue
        seen[r.id] = r.path
        rules.append(r)
    meta = pack_meta(rules_dir)
    catalog = _load_catalog(rules_dir, rules, broken, skip_broken)
    concepts = _load_concepts(rules_dir, rules, broken, skip_broken)
    return Pack(
        version=pack_version(rules_dir, files),
        rules=rules,
        broken=broken,
        catalog=catalog,
        concepts=concepts,
        path=str(rules_dir),
        python_modules=list(meta.get("python") or []),
        precedence=list(meta.get("precedence") or []),
        no_verdict=meta["no_verdict"],
        tests=load_pack_tests(rules_dir),
    )


def _load_catalog(
    rules_dir: Path, rules: list[Rule], broken: list[dict[str, str]], skip_broken: bool
) -> list[CatalogRow]:
    """The catalogs' rows. A broken row breaks the catalog, so the rules reading it."""
    try:
        return load_catalog(rules_dir / "catalogs")
    except CatalogError as exc:
        return _drop_readers(exc, _as_rule_error(exc), [r for r in rules if r.catalog], rules, broken, skip_broken)


def _load_concepts(
    rules_dir: Path, rules: list[Rule], broken: list[dict[str, str]], skip_broken: bool
) -> list[Concept]:
    """The failure concepts. A broken concept file breaks the rules reading them."""
    try:
        return load_concepts(rules_dir / "concepts")
    except ConceptError as exc:
        return _drop_readers(exc, _concept_error(exc), [r for r in rules if r.concepts], rules, broken, skip_broken)


def _drop_readers(
    exc: Exception,
    error: RuleFileError,
    readers: list[Rule],
    rules: list[Rule],
    broken: list[dict[str, str]],
    skip_broken: bool,
) -> list[Any]:
    """A broken table of the pack raises, or (diagnosing: `skip_broken`) leaves the rules reading it
    out, listed as broken, and the rest of the pack decides."""
    if not skip_broken:
        raise error from None
    for r in readers:
        rules.remove(r)
        broken.append({"rule": r.id, "error": f"not loaded: {exc}"})
    return []


def _as_rule_error(exc: CatalogError) -> RuleFileError:
    return RuleFileError(exc.path, f"catalog row {exc.row or '?'}", exc.column, str(exc).split(": ", 3)[-1])


def _concept_error(exc: ConceptError) -> RuleFileError:
    return RuleFileError(exc.path, f"concept {Path(exc.path).stem}", exc.field, str(exc).split(": ", 2)[-1])


def check_concepts(pack: Pack) -> list[RuleFileError]:
    """Each concept's symptom is defined by a rule of the pack; a rule reads the concepts."""
    defs = pack.symptom_defs
    errors: list[RuleFileError] = []
    for c in pack.concepts:
        if c.symptom not in defs:
            errors.append(
                RuleFileError(c.path, f"concept {c.id}", "symptom", f"{c.symptom!r} is defined by no rule's symptoms")
            )
    if pack.concepts and not any(r.concepts for r in pack.rules):
        errors.append(
            RuleFileError(Path(pack.path) / "concepts", None, "concepts", "no rule reads the concepts (concepts: true)")
        )
    return errors


def check_catalog(pack: Pack) -> list[RuleFileError]:
    """Each catalog row's symptom is defined by a rule of the pack, with the same role and, as a
    root, the same terminal_state/sub_domain (a symptom means one thing whoever finds it)."""
    defs = pack.symptom_defs
    errors: list[RuleFileError] = []
    folder = Path(pack.path) / "catalogs"
    for row in pack.catalog:
        where = f"catalog row {row.id}"
        if row.symptom not in defs:
            errors.append(
                RuleFileError(
                    folder / f"{row.family}.csv", where, "symptom", f"{row.symptom!r} is defined by no rule's symptoms"
                )
            )
            continue
        d = defs[row.symptom][1]
        said = (row.role, row.terminal_state, row.sub_domain)
        meant = (d.role, d.terminal_state, d.sub_domain)
        if said != meant:
            errors.append(
                RuleFileError(
                    folder / f"{row.family}.csv",
                    where,
                    "role",
                    f"{row.symptom} is {_words(meant)} ({defs[row.symptom][0]}), the row says {_words(said)}",
                )
            )
    return errors


def _words(t: tuple[Any, ...]) -> str:
    return "/".join(str(getattr(x, "value", x) or "-") for x in t)


def validate_pack(rules_dir: str | Path | None = None) -> tuple[Pack | None, list[RuleFileError]]:
    """Validate every file (not just the first broken one): for `attribution rules validate`."""
    rules_dir = Path(rules_dir or RULES_DIR)
    files = sorted(p for phase in PHASES for p in (rules_dir / phase).glob("*.yaml"))
    errors: list[RuleFileError] = []
    rules = []
    for p in files:
        try:
            rules.append(load_rule(p))
        except RuleFileError as exc:
            errors.append(exc)
    errors += [_as_rule_error(e) for e in read_catalog(rules_dir / "catalogs")[1]]
    errors += [_concept_error(e) for e in read_concepts(rules_dir / "concepts")[1]]
    if errors:
        return None, errors
    try:
        pack = load_pack(rules_dir)
    except RuleFileError as exc:
        return None, [exc]
    errors = check_pack_shape(pack) + check_catalog(pack) + check_concepts(pack)
    return (None, errors) if errors else (pack, [])


@lru_cache(maxsize=4)
def default_pack() -> Pack:
    """The shipped pack. Loading it (its YAML read, the catalogs' patterns checked) costs a new
    process ~90 ms; unpickling it a tenth of that. So it is kept, pickled, in the user's cache
    directory under a key covering every byte it is read from and the code that reads it (a pack
    or code changed is a new key; the entry it replaces, of the same copy of the pack, is removed).
    No cache directory to read or write: loaded as always."""
    cached = _cache_file(RULES_DIR)
    if cached is not None and cached.is_file():
        try:
            pack = pickle.loads(cached.read_bytes())
            if isinstance(pack, Pack):
                return pack
        except Exception:  # unreadable, or pickled by another version of a library: loaded again
            pass
    pack = load_pack(RULES_DIR)
    if cached is not None:
        from workload_attribution.rules.diff import warm_digests

        pack.warm_literals()  # kept with it: see Pack._literals
        warm_digests(pack)  # kept with it: see Pack.derived
        _keep(cached, pack)
    return pack


# What the key of a cached pack covers besides the pack's files: the code that builds a Pack.
_PACK_CODE = (
    Path(__file__),
    Path(__file__).with_name("catalog.py"),
    Path(__file__).with_name("concepts.py"),
    Path(__file__).with_name("reads.py"),  # Pack.reads_only_lines
    Path(__file__).resolve().parents[1] / "contracts" / "vocabulary.py",
)


def _cache_file(rules_dir: Path) -> Path | None:
    try:
        digest = hashlib.sha256(f"{sys.version}|{pydantic.VERSION}|{rules_dir}".encode())
        files = sorted(p for phase in PHASES for p in (rules_dir / phase).glob("*.yaml")) + _other_files(rules_dir)
        for f in [*files, *(p.resolve() for p in _PACK_CODE)]:
            digest.update(f"{f}\0".encode())
            digest.update(f.read_bytes())
    except OSError:  # a file the loader will name when it fails to read it
        return None
    place = hashlib.sha256(str(rules_dir).encode()).hexdigest()[:8]  # one entry per installed copy
    return cache_dir("packs") / f"shipped-{place}-{digest.hexdigest()[:24]}.pickle"


def _keep(path: Path, pack: Pack) -> None:
    """The pack pickled at `path` (written whole, then renamed into place), older entries removed."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = temporary_name(path)
        tmp.write_bytes(pickle.dumps(pack, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)
        for old in path.parent.glob(path.name.rpartition("-")[0] + "-*.pickle"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:  # a read-only home: nothing kept, the next process loads the pack again
        pass
