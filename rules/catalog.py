"""Message catalogs: rules/catalogs/<family>.csv, one row per message a tool really prints.

A row says where the message appears, how to recognise it (a literal or an RE2 regex, matched
wherever it sits in a line, after any log prefix), what it means (symptom, role, the verdict it
gives as a root, the action) and whom it blames (the logging host, a peer the message names, the
node the scheduler names, nobody), with its upstream reference and a verbatim test line. The
generic rule extract/catalog-messages.yaml reads every row; a new message is one row.

Here: the row model (every column checked when the pack loads), the literal each row is found by
(the scan's pre-filter and the matcher's router: written once, derived from the pattern), and the
tables the matcher needs. rules/catalogs/README.md describes the columns and the review.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import re._constants as sre_c  # the parse tree of a pattern: to find the literal every match contains
import re._parser as sre_parse
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workload_attribution.contracts.vocabulary import Action, SubDomain, TerminalState, check_pair

COLUMNS = (
    "id",
    "family",
    "sources",
    "match",
    "pattern",
    "symptom",
    "terminal_state",
    "sub_domain",
    "role",
    "blame",
    "action",
    "reference",
    "test_line",
    "test_line_origin",
    "false_positives",
)
FAMILIES = (
    "nccl",
    "ofi",
    "ucx",
    "mpi",
    "ib",
    "nvidia-driver",
    "kernel",
    "storage",
    "pytorch",
    "jax",
    "tensorflow",
    "deepspeed",
    "megatron",
    "slurm",
    "pbs",
    "lsf",
    "flux",
    "kubernetes",
)
# Where a message is looked for: log sources' lines, and `kueue` (Kubernetes and Kueue records:
# events, pod statuses, workload conditions, as the one-line text the connector gives them).
SOURCES = ("app", "syslog", "scheduler_log", "fabricmanager", "kueue")
RECORD_SOURCES = ("kueue",)
ROLES = ("root_candidate", "cascade", "context", "benign", "scheduler")
# whom a row blames -> the event's blame (contracts: node, peer, none)
BLAMES = {"host": "node", "peer": "peer", "scheduler_node": "peer", "none": "none"}
MIN_LITERAL = 4  # a shorter literal would keep too many lines at the scan
MAX_LITERAL = 40  # a prefix of a required literal is required too; short ones keep the scan's automaton small
# Characters a JSON log envelope escapes (Docker's json-file writes < > & as \u003c ...): a literal
# never holds one, so the scan, which reads lines as written, finds it in an envelope too.
_ESCAPED = frozenset('"\\<>&')
_RE2_UNSUPPORTED = re.compile(r"\(\?<[=!]|\(\?[=!]|\\[1-9]|\(\?P=")


class CatalogError(Exception):
    """A catalog file or row is broken: names the file, the row and the column."""

    def __init__(self, path: Path | str, row: str | None, column: str, message: str):
        self.path, self.row, self.column = str(path), row, column
        super().__init__(f"{path}: row {row or '?'}: column '{column}': {message}")


class CatalogRow(BaseModel):
    """One message. The words are the diagnosis vocabulary; role, terminal_state and sub_domain
    must also agree with the symptom's definition (checked with the pack: pack.check_catalog)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as rules/pack.py Strict

    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    family: Literal[FAMILIES]  # type: ignore[valid-type]
    sources: tuple[Literal[SOURCES], ...] = Field(min_length=1)  # type: ignore[valid-type]
    match: Literal["literal", "regex"]
    pattern: str = Field(min_length=MIN_LITERAL)
    symptom: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    terminal_state: TerminalState | None = None
    sub_domain: SubDomain | None = None
    role: Literal[ROLES]  # type: ignore[valid-type]
    blame: Literal["host", "peer", "scheduler_node", "none"]
    action: Action
    reference: str = Field(pattern=r"^https?://\S+", description="the upstream file or doc page, then its version")
    test_line: str = Field(min_length=1)
    test_line_origin: str = Field(pattern=r"^(?:log|format):https?://\S+")
    false_positives: str = ""

    @field_validator("sources", mode="before")
    @classmethod
    def _split_sources(cls, value: Any) -> Any:
        return tuple(value.split("|")) if isinstance(value, str) else value

    @field_validator("terminal_state", "sub_domain", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None

    @model_validator(mode="after")
    def _consistent(self) -> CatalogRow:
        if not self.id.startswith(f"{self.family}-"):
            raise ValueError(f"id {self.id!r} must start with its family ({self.family}-)")
        if self.role in ("cascade", "context", "benign") and (self.terminal_state or self.sub_domain):
            raise ValueError(f"a {self.role} row gives no terminal_state/sub_domain")
        if self.role == "root_candidate" and not (self.terminal_state and self.sub_domain):
            raise ValueError("a root_candidate row says the verdict it gives (terminal_state, sub_domain)")
        if self.terminal_state and self.sub_domain:
            check_pair(self.terminal_state, self.sub_domain)
        if "\n" in self.test_line or "\r" in self.test_line:
            raise ValueError("test_line is one line")
        _check_pattern(self)
        return self

    @property
    def regex(self) -> str:
        """The row as an RE2 pattern (a literal escaped)."""
        return re.escape(self.pattern) if self.match == "literal" else self.pattern

    @property
    def literals(self) -> tuple[str, ...]:
        """What the scan keeps a line by: every match of the row contains one of these."""
        return literals_of(self.match, self.pattern)

    @property
    def peer_group(self) -> int | None:
        """The index of the (?P<peer>...) group, as RE2 numbers groups (the same as Python)."""
        return _parsed(self.pattern)[1].get("peer") if self.match == "regex" else None


def _check_pattern(row: CatalogRow) -> None:
    """What is known without compiling the pattern (its parse tree; loading a pack does this for
    every row): `rules validate` then compiles each in DuckDB's RE2 and runs it on its test line."""
    if row.match == "regex":
        if row.pattern.startswith("^"):
            raise ValueError("a pattern matches wherever the message sits in a line: no ^ anchor")
        if _RE2_UNSUPPORTED.search(row.pattern):
            raise ValueError("RE2 has no lookaround or backreference")
        try:
            names = set(_parsed(row.pattern)[1])
        except re.error as exc:
            raise ValueError(f"pattern does not parse: {exc}") from None
        if names - {"peer"}:
            raise ValueError(f"the only named group is (?P<peer>...), not {sorted(names - {'peer'})}")
        if (row.blame in ("peer", "scheduler_node")) != ("peer" in names):
            raise ValueError("a row blaming a peer or the scheduler's node captures it as (?P<peer>...), and only then")
    elif row.blame in ("peer", "scheduler_node"):
        raise ValueError("a literal cannot capture the peer it blames: write a regex with (?P<peer>...)")
    found = literals_of(row.match, row.pattern)
    if not found or min(len(x) for x in found) < MIN_LITERAL:
        raise ValueError(
            f"every match must contain a literal of {MIN_LITERAL}+ characters (case-sensitive), the scan's pre-filter"
        )


@lru_cache(maxsize=4096)
def _parsed(pattern: str) -> tuple[Any, dict[str, int]]:
    """The pattern's parse tree and its named groups (parsing, not compiling: a third of the cost)."""
    tree = sre_parse.parse(pattern)
    return tree, dict(tree.state.groupdict)


@lru_cache(maxsize=4096)
def literals_of(match: str, pattern: str) -> tuple[str, ...]:
    """The literals (any of which) every match of the pattern contains, each cut at MAX_LITERAL;
    () when the pattern has none (case-insensitive, or only classes and repeats)."""
    if match == "literal":
        runs = [r for r in re.split(r'["\\<>&]', pattern) if r]
        return (max(runs, key=len)[:MAX_LITERAL],) if runs else ()
    try:
        parsed = _parsed(pattern)[0]
    except re.error:
        return ()
    if parsed.state.flags & re.IGNORECASE:
        return ()
    best = _required(list(parsed))
    return tuple(sorted({x[:MAX_LITERAL] for x in best})) if best else ()


def _required(seq: list[Any]) -> list[str] | None:
    """For a parsed sequence: literal alternatives one of which every match contains, the set
    whose shortest member is longest (runs of literal characters, a group's, a branch's)."""
    candidates: list[list[str]] = []
    run: list[str] = []

    def cut() -> None:
        if run:
            candidates.append(["".join(run)])
            run.clear()

    for op, av in seq:
        if op is sre_c.LITERAL and chr(av) not in _ESCAPED:
            run.append(chr(av))
        elif op is sre_c.AT:  # an anchor or \b takes no character: the run goes on
            continue
        elif (
            op is sre_c.SUBPATTERN
            and not (av[1] & re.IGNORECASE)
            and all(o is sre_c.LITERAL and chr(a) not in _ESCAPED for o, a in av[3])
        ):
            run.extend(chr(a) for _, a in av[3])
        else:
            cut()
            inner = _inner(op, av)
            if inner:
                candidates.append(inner)
    cut()
    return max(candidates, key=lambda c: (min(map(len, c)), -len(c))) if candidates else None


def _inner(op: Any, av: Any) -> list[str] | None:
    if op is sre_c.SUBPATTERN:
        return None if av[1] & re.IGNORECASE else _required(list(av[3]))
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        return _required(list(av[2])) if av[0] >= 1 else None
    if op is sre_c.BRANCH:
        alternatives = [_required(list(a)) for a in av[1]]
        if all(alternatives):
            return sorted({x for a in alternatives if a for x in a})
    return None


def load_catalog(folder: Path) -> list[CatalogRow]:
    """Every row of every <family>.csv in the folder, in file order; the first broken row raises
    CatalogError. Ids are unique across files."""
    rows, errors = read_catalog(folder)
    if errors:
        raise errors[0]
    return rows


def read_catalog(folder: Path) -> tuple[list[CatalogRow], list[CatalogError]]:
    """Every row and every problem (for `rules validate`: all of them, one line each)."""
    rows: list[CatalogRow] = []
    errors: list[CatalogError] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        for row in _read_file(path, errors):
            if row.id in seen:
                errors.append(CatalogError(path, row.id, "id", f"duplicate of the row in {seen[row.id]}"))
                continue
            seen[row.id] = path.name
            rows.append(row)
    return rows, errors


def _read_file(path: Path, errors: list[CatalogError]) -> list[CatalogRow]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            errors.append(CatalogError(path, None, "header", f"the columns are, in order: {','.join(COLUMNS)}"))
            return []
        out = []
        for record in reader:
            if None in record or any(v is None for v in record.values()):
                errors.append(CatalogError(path, record.get("id"), "row", f"{len(COLUMNS)} fields, RFC 4180 quoting"))
                continue
            try:
                out.append(CatalogRow.model_validate(record))
            except ValidationError as exc:
                err = exc.errors()[0]
                column = ".".join(str(p) for p in err["loc"]) or "row"
                errors.append(CatalogError(path, record.get("id"), column, err["msg"]))
        return out


def table_json(rows: list[CatalogRow]) -> str:
    """The rows as the attempt's `catalog` table (JSON for from_json, TABLE_SHAPE): what the
    matcher and the rules read."""
    return json.dumps(
        [
            {
                "row_no": i,
                "id": r.id,
                "family": r.family,
                "sources": list(r.sources),
                "literals": list(r.literals),
                "regex": r.regex,
                "peer_group": r.peer_group,
                "symptom": r.symptom,
                "role": r.role,
                "terminal_state": r.terminal_state and r.terminal_state.value,
                "sub_domain": r.sub_domain and r.sub_domain.value,
                "action": r.action.value,
                "blame": BLAMES[r.blame],
            }
            for i, r in enumerate(rows, 1)
        ]
    )


TABLE_SHAPE = json.dumps(
    [
        {
            "row_no": "INTEGER",
            "id": "VARCHAR",
            "family": "VARCHAR",
            "sources": "VARCHAR[]",
            "literals": "VARCHAR[]",
            "regex": "VARCHAR",
            "peer_group": "INTEGER",
            "symptom": "VARCHAR",
            "role": "VARCHAR",
            "terminal_state": "VARCHAR",
            "sub_domain": "VARCHAR",
            "action": "VARCHAR",
            "blame": "VARCHAR",
        }
    ]
)


def digest(rows: list[CatalogRow]) -> str:
    return hashlib.sha256("\n".join(r.model_dump_json() for r in rows).encode()).hexdigest()[:16]
