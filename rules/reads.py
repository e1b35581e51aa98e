"""Which rules of a pack read one of its tables (data/<table>.csv, or `catalog`: the rows of
catalogs/*.csv). A replay uses it to confine a table's change to the rules that can see it
(tasks/replay.py): a new row in xid_catalog.csv is then judged by the two early rules that read
xid_catalog, not by replaying all 46 rules of every attempt.

What a rule reads is found, not declared by hand: a SQL rule's table references as DuckDB parses
them (json_serialize_sql: the parser's own tree, no binding), a Python rule's module by the name in
its code (docstrings and comments left out), and the rules that declare `catalog: true` read the
catalogs. When the reads cannot be told (SQL that does not parse, a module that cannot be read or
is not a rule's own, the engine's SQL naming the table), the answer is None: any rule may read it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb

from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.pack_data import CATALOG_TABLE
from workload_attribution.rules.phases import engine_sql

# (pack path, pack version, table) -> the rules reading it, or None
_READERS: dict[tuple[str, str, str], frozenset[str] | None] = {}


def readers(pack: Pack, table: str) -> frozenset[str] | None:
    """The ids of the pack's rules that read `table`; None when that cannot be told."""
    key = (pack.path, pack.version, table)
    if key not in _READERS:
        if len(_READERS) > 256:  # packs come and go in a long-lived process
            _READERS.clear()
        _READERS[key] = _find_readers(pack, table)
    return _READERS[key]


def _find_readers(pack: Pack, table: str) -> frozenset[str] | None:
    if _names(engine_sql(), table):  # a view of the engine's: every rule may see it
        return None
    modules = _modules(pack)
    rule_modules = {(r.python or "").partition(":")[0] for r in pack.rules if r.python}
    if any(code is None or (_names(code, table) and m not in rule_modules) for m, code in modules.items()):
        return None  # a module that cannot be read, or one no rule names: whoever calls it reads the table
    found: set[str] = set()
    for rule in pack.rules:
        reads = _rule_reads(rule, table, modules)
        if reads is None:
            return None
        if reads:
            found.add(rule.id)
    return frozenset(found)


def module_users(pack: Pack, module: str) -> frozenset[str] | None:
    """The ids of the pack's rules that run a function of its Python module python/<module>.py;
    None when another module's code names it (it may import it: its rules would run it too)."""
    others = {m: code for m, code in _modules(pack).items() if m != module}
    if any(code is None or _names(code, module) for code in others.values()):
        return None
    return frozenset(r.id for r in pack.rules if r.python and r.python.partition(":")[0] == module)


def _rule_reads(rule: Rule, table: str, modules: dict[str, str | None]) -> bool | None:
    if rule.catalog and table == CATALOG_TABLE:
        return True
    if rule.sql:
        tables = sql_tables(rule.sql)
        return None if tables is None else table in tables
    code = modules.get((rule.python or "").partition(":")[0])
    return None if code is None else _names(code, table)


@lru_cache(maxsize=1024)
def sql_tables(sql: str) -> frozenset[str] | None:
    """The names a SELECT reads from as tables (a CTE's name among them), lower-cased; None when it
    does not parse."""
    tree = parse_sql(sql)
    if tree is None:
        return None
    found: set[str] = set()
    _walk(tree, found)
    return frozenset(found)


@lru_cache(maxsize=1024)
def reads_only(sql: str, table: str) -> bool:
    """Whether a SELECT reads from no table but `table` (its CTEs aside) and calls no table function
    (a table macro may read anything); False when it does not parse."""
    tree = parse_sql(sql)
    if tree is None:
        return False
    tables: set[str] = set()
    _walk(tree, tables)
    return tables - _cte_names(tree) <= {table.lower()} and not _holds(tree, "TABLE_FUNCTION")


def _cte_names(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for entry in (node.get("cte_map") or {}).get("map") or []:
            if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                found.add(entry["key"].lower())
        for value in node.values():
            found |= _cte_names(value)
    elif isinstance(node, list):
        for value in node:
            found |= _cte_names(value)
    return found


def _holds(node: Any, kind: str) -> bool:
    """Whether the parse tree has a node of that type."""
    if isinstance(node, dict):
        return node.get("type") == kind or any(_holds(v, kind) for v in node.values())
    if isinstance(node, list):
        return any(_holds(v, kind) for v in node)
    return False


def parse_sql(sql: str) -> dict[str, Any] | None:
    """DuckDB's parse tree of a statement (json_serialize_sql: no binding); None when it does not parse."""
    with _parser_lock:
        if not _parser:  # one in-memory instance for every parse: making one costs ~10 ms, a parse ~1
            _parser.append(duckdb.connect())
        row = _parser[0].execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    return None if tree.get("error") else tree


_parser: list[duckdb.DuckDBPyConnection] = []
_parser_lock = threading.Lock()
# a forked child has none of its parent's DuckDB threads: it makes its own instance
os.register_at_fork(after_in_child=_parser.clear)


def _walk(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
            found.add(node["table_name"].lower())
        for value in node.values():
            _walk(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, found)


def _modules(pack: Pack) -> dict[str, str | None]:
    """Each Python module of the pack's python/ folder: its code without docstrings and comments
    (a module's prose may mention a table it never reads), None when it cannot be read."""
    folder = Path(pack.path) / "python" if pack.path else Path(__file__).resolve().parent / "python"
    return {f.stem: _code(f) for f in sorted(folder.glob("*.py"))}


def _code(path: Path) -> str | None:
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, _HAS_DOCSTRING) and node.body and _is_docstring(node.body[0]):
            node.body.pop(0)
    return ast.unparse(tree)  # comments are not in the tree


_HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _names(text: str, table: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(table)}(?!\w)", text, re.IGNORECASE) is not None
