"""Failure concepts: rules/concepts/<concept>.yaml, one meaning each (device memory exhausted, node
lost, time limit...), defined once as a small vocabulary that catches the wordings no catalog row
has yet: another vendor's runtime, another release, another supervisor.

A catalog row recognises one message; a concept recognises a meaning. Its file says:

- `words`: phrases that say it, matched whatever their case and whatever joins their words (a
  space, `_`, `-` or nothing: "out of memory", `OUT_OF_MEMORY`, `OutOfMemory`), never inside a
  longer word on the left (`room` is not `OOM`); a phrase of one short word (`OOM`, `NaN`) is a
  whole word.
- `codes`: error codes, exception classes and reasons that say it, case as written, whole
  identifiers (`hipErrorOutOfMemory`, `ResourceExhaustedError`, `DeadlineExceeded`).
- `where`: the context that decides between meanings: one of these must be said too (device
  words for device memory, a job or pod for an eviction). `unless`: none of these may be (another
  meaning, or not a failure at all).
- `symptom`: the pack's symptom of that meaning (its definition gives the role, the verdict and
  the action, as for a catalog row) and `blame`: `none`, `host` (the host whose log says it) or
  `named` (a host or address the text names, mapped to the allocation like a catalog peer).
- `examples` that must land in it and `looks_alike` lines that must not (benign warnings,
  advice, retry notices, documentation): `rules test` runs both.

Which lines are read (extract/concept-meanings.yaml, python/concepts.py): an exception, an
error-level line or a scheduler's, pod's or supervisor's reason text, never a line at a lower
level (`WARNING`, `INFO`, glog `W`/`I`) nor one that hedges before the words ("may run out of
memory", "retrying after ..."). Every concept event carries attrs.concept and the words matched;
a verdict resting on one is `medium` confidence at most (rules/phases.py choose_verdict): rows and
specific rules keep `high`. Any other rule's reading of the same line wins (`yields`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workload_attribution.rules.catalog import _RE2_UNSUPPORTED, MIN_LITERAL, literals_of

CONCEPTS_TABLE = "concepts"
# what a concept can read: log sources' lines, and the records' reason texts (pods, events,
# workload conditions, the scheduler's record of the attempt)
SOURCES = ("app", "syslog", "scheduler_log", "fabricmanager", "records")
BLAMES = {"none": "none", "host": "node", "named": "peer"}
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SHORT = 4  # a phrase of one word this short is a whole word: OOM, NaN, GPU
_JOIN = r"[\s_\-]*"
_IDENT = re.compile(r"^[A-Za-z_][\w.:]*$")


class ConceptError(Exception):
    """A concept file is broken: names the file and the field."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path, self.field = str(path), field
        super().__init__(f"{path}: field '{field}': {message}")


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as rules/pack.py Strict

    line: str = Field(min_length=1)
    source: Literal[SOURCES]  # type: ignore[valid-type]
    origin: str = Field("", description="where the line was seen or what it paraphrases")


class Concept(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as rules/pack.py Strict

    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    title: str = Field(min_length=10)
    symptom: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    blame: Literal["none", "host", "named"] = "none"
    sources: tuple[Literal[SOURCES], ...] = SOURCES  # type: ignore[valid-type]
    references: tuple[str, ...] = Field(min_length=1)
    words: tuple[str, ...] = ()
    patterns: tuple[str, ...] = Field(
        (), description="RE2, read case-insensitively, for what a phrase cannot say (`walltime \\d+ exceeded limit`)"
    )
    codes: tuple[str, ...] = ()
    where: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    any_level: bool = Field(
        False,
        description="read at any log level (a training loop reports its loss at INFO): hedges still do not count",
    )
    examples: tuple[Example, ...] = Field(min_length=1)
    looks_alike: tuple[Example, ...] = Field(min_length=1)
    path: str = ""

    @model_validator(mode="before")
    @classmethod
    def _lines(cls, doc: Any) -> Any:
        """An example is a line (or {line, source, origin}) of the concept's first source unless it says."""
        if not isinstance(doc, dict):
            return doc
        first = (doc.get("sources") or SOURCES)[0]
        for key in ("examples", "looks_alike"):
            if isinstance(doc.get(key), list):
                doc = {
                    **doc,
                    key: [{"source": first, **(v if isinstance(v, dict) else {"line": v})} for v in doc[key]],
                }
        return doc

    @field_validator("references")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.match(r"^https?://\S+", v)]
        if bad:
            raise ValueError(f"a reference starts with an http(s) address: {bad[0]!r}")
        return value

    @model_validator(mode="after")
    def _says_something(self) -> Concept:
        if not self.words and not self.codes and not self.patterns:
            raise ValueError("a concept says itself in `words`, `patterns` or `codes`")
        for p in self.patterns:
            if _RE2_UNSUPPORTED.search(p) or p.startswith("^"):
                raise ValueError(
                    f"a pattern is RE2 matched anywhere in a line (no ^, lookaround, backreference): {p!r}"
                )
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"pattern does not parse: {p!r}: {exc}") from None
            if not pattern_literals(p):
                raise ValueError(
                    f"a pattern holds a literal of {MIN_LITERAL}+ characters (the scan keeps lines by it): {p!r}"
                )
        for w in (*self.words, *self.where, *self.unless):
            if not w.strip() or "\n" in w:
                raise ValueError(f"a phrase is one non-empty line: {w!r}")
        bad = [c for c in self.codes if not _IDENT.match(c)]
        if bad:
            raise ValueError(f"a code is one identifier (letters, digits, _ . :): {bad[0]!r}")
        return self

    @property
    def says(self) -> str:
        """RE2 (case-insensitive parts inline): any of the words or codes."""
        return _any(
            [phrase_regex(w) for w in self.words]
            + [rf"(?i:(?:^|[^A-Za-z0-9])(?:{p}))" for p in self.patterns]
            + [code_regex(c) for c in self.codes]
        )

    @property
    def where_regex(self) -> str:
        return _any([_context(w) for w in self.where])

    @property
    def unless_regex(self) -> str:
        return _any([_context(w) for w in self.unless])

    @property
    def literals(self) -> tuple[str, ...]:
        """What the scan keeps a line by: every match of `says` holds one of these (case-sensitive)."""
        out = {v for w in self.words for v in phrase_literals(w)} | set(self.codes)
        out |= {v for p in self.patterns for v in pattern_literals(p)}
        return tuple(sorted(out))


def _any(parts: list[str]) -> str:
    return "|".join(f"(?:{p})" for p in parts) if parts else ""


def _context(w: str) -> str:
    """A `where`/`unless` entry: a phrase that may start an identifier (`CUDA` in `cudaMalloc`,
    `HIP` in `hipErrorOutOfMemory`), not end one."""
    return phrase_regex(w, whole=False)


@lru_cache(maxsize=4096)
def phrase_regex(phrase: str, whole: bool = True) -> str:
    """A phrase whatever its case and its joins, not inside a longer word on the left; a `whole`
    phrase of one short word not on the right either (`OOM`, not `OOMKilled`)."""
    tokens = phrase.split()
    body = _JOIN.join(re.escape(t) for t in tokens)
    if whole and _acronym(tokens):  # OOM as written: `oom_score_adj` is not an OOM
        return rf"(?:^|[^A-Za-z0-9]){body}(?:[^A-Za-z]|$)"
    right = r"(?:[^A-Za-z]|$)" if whole and len(tokens) == 1 and len(tokens[0]) <= _SHORT else ""
    return rf"(?i:(?:^|[^A-Za-z0-9]){body}{right})"


def _acronym(tokens: list[str]) -> bool:
    return len(tokens) == 1 and len(tokens[0]) <= _SHORT and tokens[0].isupper()


@lru_cache(maxsize=4096)
def code_regex(code: str) -> str:
    """A code as written, a whole identifier."""
    return rf"(?:^|[^A-Za-z0-9_]){re.escape(code)}(?:[^A-Za-z0-9_]|$)"


@lru_cache(maxsize=4096)
def phrase_literals(phrase: str) -> tuple[str, ...]:
    """The spellings of a phrase the scan keeps lines by: as written, with its first word or every
    word capitalised, in upper and in lower case, its words joined by a space, `_` (upper and
    lower) or nothing (CamelCase); a word written with capitals (`NaN`, `I/O`) keeps them in all
    but the upper and lower forms. A short acronym (`OOM`) only as written."""
    tokens = phrase.split()
    if _acronym(tokens):
        return (tokens[0],)

    def cap(t: str) -> str:
        return t if t != t.lower() else t[:1].upper() + t[1:]

    written = tokens
    first = [cap(tokens[0]), *tokens[1:]]
    title = [cap(t) for t in tokens]
    out = {
        " ".join(written),
        " ".join(first),
        " ".join(title),
        " ".join(tokens).upper(),
        " ".join(tokens).lower(),
        "_".join(tokens).lower(),
        "_".join(tokens).upper(),
        "".join(title),
    }
    return tuple(sorted(out))


@lru_cache(maxsize=4096)
def pattern_literals(pattern: str) -> tuple[str, ...]:
    """A pattern's required literals (rules/catalog.py literals_of) in the cases a tool prints them."""
    found = literals_of("regex", pattern)
    if not found or min(len(x) for x in found) < MIN_LITERAL:
        return ()
    return tuple(sorted({v for lit in found for v in (lit, lit.lower(), lit.upper(), lit[:1].upper() + lit[1:])}))


def load_concepts(folder: Path) -> list[Concept]:
    """Every concept of the folder, in file-name order; the first broken file raises ConceptError."""
    concepts, errors = read_concepts(folder)
    if errors:
        raise errors[0]
    return concepts


def read_concepts(folder: Path) -> tuple[list[Concept], list[ConceptError]]:
    concepts: list[Concept] = []
    errors: list[ConceptError] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
        except yaml.YAMLError as exc:
            errors.append(ConceptError(path, "yaml", f"not valid YAML: {str(exc).splitlines()[0]}"))
            continue
        if not isinstance(doc, dict):
            errors.append(ConceptError(path, "concept", "a mapping of the concept's fields"))
            continue
        try:
            concept = Concept.model_validate({**doc, "path": str(path)})
        except ValidationError as exc:
            err = exc.errors()[0]
            errors.append(ConceptError(path, ".".join(str(p) for p in err["loc"]) or "concept", err["msg"]))
            continue
        if concept.id != path.stem:
            errors.append(ConceptError(path, "id", f"{concept.id!r} is not the file's name ({path.stem})"))
        elif concept.id in seen:
            errors.append(ConceptError(path, "id", f"duplicate of the concept in {seen[concept.id]}"))
        else:
            seen[concept.id] = path.name
            concepts.append(concept)
    return concepts, errors


def table_json(concepts: list[Concept], roles: Mapping[str, str]) -> str:
    """The concepts as the attempt's `concepts` table (TABLE_SHAPE): of the concepts a line says,
    one that ends an attempt (a root or the scheduler's word: `decides`) before a cascade, then
    file order."""
    return json.dumps(
        [
            {
                "concept_no": i,
                "decides": roles.get(c.symptom) in ("root_candidate", "scheduler"),
                "id": c.id,
                "symptom": c.symptom,
                "sources": list(c.sources),
                "says": c.says,
                "where_": c.where_regex,
                "unless_": c.unless_regex,
                "any_level": c.any_level,
                "blame": BLAMES[c.blame],
                "literals": list(c.literals),
            }
            for i, c in enumerate(concepts, 1)
        ]
    )


TABLE_SHAPE = json.dumps(
    [
        {
            "concept_no": "INTEGER",
            "decides": "BOOLEAN",
            "id": "VARCHAR",
            "symptom": "VARCHAR",
            "sources": "VARCHAR[]",
            "says": "VARCHAR",
            "where_": "VARCHAR",
            "unless_": "VARCHAR",
            "any_level": "BOOLEAN",
            "blame": "VARCHAR",
            "literals": "VARCHAR[]",
        }
    ]
)


def digest(concepts: list[Concept]) -> str:
    return hashlib.sha256("\n".join(c.model_dump_json() for c in concepts).encode()).hexdigest()[:16]
