"""Which symptoms a rule can emit, read from its code without running it (`rules validate` checks
them against the rule's `produces:`; `rules test` only sees what its test lines reach).

A SQL rule: the string constants its top-level SELECT's `symptom` column can take, as DuckDB parses
it (json_serialize_sql, rules/reads.py): a constant, each branch of a CASE, the arguments of
coalesce, `'xid_' || code` (a prefix: xid_*), every branch of a UNION, and a column passed on from a
CTE or a subquery, followed there. What the tree does not show (a column of a table, a function's
result) is left unchecked. A Python rule: the constants its function (and the module's functions it
calls) puts under "symptom" in a dict literal ({"symptom": "k8s_node_not_ready", ...}); a symptom
built any other way (a catalog row's, a variable) is left to `rules test`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.rules.reads import parse_sql

SYMPTOM = "symptom"
# how deep a column is followed through CTEs and subqueries (a cycle cannot go on for ever)
MAX_DEPTH = 16


@dataclass(frozen=True)
class Emitted:
    """The names a rule's symptom column can take ('xid_*' for a prefix), and whether some of its
    values are not constants the code shows (`opaque`: those are not checked)."""

    names: frozenset[str]
    opaque: bool = False

    def __or__(self, other: Emitted) -> Emitted:
        return Emitted(self.names | other.names, self.opaque or other.opaque)


_NOTHING = Emitted(frozenset())
_OPAQUE = Emitted(frozenset(), True)


def rule_symptoms(pack: Pack, rule: Rule) -> Emitted | None:
    """What the rule's code can emit as a symptom; None when that cannot be read (SQL that does not
    parse, no symptom column, a module that cannot be read)."""
    if rule.sql:
        return sql_symptoms(rule.sql)
    if rule.python:
        return python_symptoms(pack, rule.python)
    return None


def sql_symptoms(sql: str) -> Emitted | None:
    tree = parse_sql(sql)
    statements = (tree or {}).get("statements") or []
    if len(statements) != 1:
        return None
    return _column(statements[0]["node"], SYMPTOM, {}, 0)


def _ctes(node: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    entries = ((node.get("cte_map") or {}).get("map")) or []
    return {**scope, **{e["key"].lower(): e["value"]["query"]["node"] for e in entries}}


def _column(node: dict[str, Any], name: str, scope: dict[str, Any], depth: int) -> Emitted | None:
    """The values a query node's output column `name` can take; None when it has no such column."""
    if depth > MAX_DEPTH:
        return _OPAQUE
    scope = _ctes(node, scope)
    kind = node.get("type")
    if kind == "SET_OPERATION_NODE":
        if "BY_NAME" in str(node.get("setop_type")):
            found = [_column(b, name, scope, depth + 1) for b in _branches(node)]
            return None if all(f is None for f in found) else _union([f or _OPAQUE for f in found])
        # the first branch names the columns; the others give theirs by position
        first = _branches(node)[0]
        while first.get("type") == "SET_OPERATION_NODE":
            first = _branches(first)[0]
        at = _position(first, name)
        if at is not None:
            return _union([_nth(b, at, scope, depth + 1) for b in _branches(node)])
        # the first branch passes it on from what it reads (SELECT *): the others read by name
        found = [_column(b, name, scope, depth + 1) for b in _branches(node)]
        return None if found[0] is None else _union([f or _OPAQUE for f in found])
    if kind != "SELECT_NODE":
        return _OPAQUE
    at = _position(node, name)
    if at is not None:
        return _expr(node["select_list"][at], node, scope, depth)
    if any(e.get("class") == "STAR" for e in node.get("select_list") or []):
        return _from(node.get("from_table"), name, scope, depth) or _OPAQUE
    return None


def _branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A set operation's branches (left and right, or children as newer parsers write them)."""
    return [node[k] for k in ("left", "right") if node.get(k)] + list(node.get("children") or [])


def _position(node: dict[str, Any], name: str) -> int | None:
    """Where a SELECT gives the column `name` (its alias, or a column it passes on as is)."""
    for i, e in enumerate(node.get("select_list") or []):
        alias = (e.get("alias") or "").lower()
        if alias == name or (not alias and e.get("class") == "COLUMN_REF" and e["column_names"][-1].lower() == name):
            return i
    return None


def _nth(node: dict[str, Any], at: int, scope: dict[str, Any], depth: int) -> Emitted:
    """The values of a branch's at-th column (a UNION's columns after the first are by position)."""
    scope = _ctes(node, scope)
    if node.get("type") == "SET_OPERATION_NODE":
        return _union([_nth(b, at, scope, depth + 1) for b in _branches(node)])
    items = node.get("select_list") or []
    if node.get("type") != "SELECT_NODE" or depth > MAX_DEPTH:
        return _OPAQUE
    if len(items) == 1 and items[0].get("class") == "STAR":  # SELECT * FROM one CTE or subquery
        source = _source(node.get("from_table"), scope)
        return _OPAQUE if source is None else _nth(source, at, scope, depth + 1)
    if any(e.get("class") == "STAR" for e in items[: at + 1]) or at >= len(items):
        return _OPAQUE
    return _expr(items[at], node, scope, depth)


def _source(table: dict[str, Any] | None, scope: dict[str, Any]) -> dict[str, Any] | None:
    """The query a FROM reads when it is one CTE or one subquery."""
    if table and table.get("type") == "SUBQUERY":
        return table["subquery"]["node"]
    if table and table.get("type") == "BASE_TABLE" and not table.get("schema_name"):
        return scope.get(table["table_name"].lower())
    return None


def _union(parts: list[Emitted]) -> Emitted:
    out = _NOTHING
    for p in parts:
        out = out | p
    return out


def _expr(e: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], depth: int) -> Emitted:
    cls, kind = e.get("class"), e.get("type")
    if cls == "CONSTANT":
        value = e["value"]
        if value.get("is_null"):
            return _NOTHING
        return Emitted(frozenset([str(value["value"])])) if value["type"]["id"] == "VARCHAR" else _OPAQUE
    if cls == "CASE":
        branches = [c["then_expr"] for c in e.get("case_checks") or []] + [e.get("else_expr")]
        return _union([_expr(b, node, scope, depth) for b in branches if b])
    if kind == "OPERATOR_COALESCE":
        return _union([_expr(c, node, scope, depth) for c in e.get("children") or []])
    if cls == "CAST":
        return _expr(e["child"], node, scope, depth)
    if cls == "FUNCTION" and e.get("function_name") == "nullif" and e.get("children"):
        return _expr(e["children"][0], node, scope, depth)
    if cls == "FUNCTION" and e.get("function_name") in ("||", "concat") and e.get("children"):
        return _prefix(e["children"][0], node, scope, depth)
    if cls == "COLUMN_REF":
        return _from(node.get("from_table"), e["column_names"][-1].lower(), scope, depth) or _OPAQUE
    return _OPAQUE


def _prefix(first: dict[str, Any], node: dict[str, Any], scope: dict[str, Any], depth: int) -> Emitted:
    """A concatenation's values as prefixes: 'xid_' || code is xid_*."""
    head = _expr(first, node, scope, depth)
    return Emitted(frozenset(f"{n}*" for n in head.names), head.opaque)


def _from(table: dict[str, Any] | None, name: str, scope: dict[str, Any], depth: int) -> Emitted | None:
    """A column of what a SELECT reads from: a CTE's or a subquery's, either side of a join."""
    if not table:
        return None
    if table.get("type") == "JOIN":
        found = [x for x in (_from(table.get(k), name, scope, depth) for k in ("left", "right")) if x is not None]
        return _union(found) if found else None
    source = _source(table, scope)
    if source is not None:
        return _column(source, name, scope, depth + 1)
    return None  # a table of the staging schema: its values are not the rule's to say


def python_symptoms(pack: Pack, ref: str) -> Emitted | None:
    """The constants a Python rule's function, and the module's functions it calls, put under
    "symptom" in a dict literal; opaque, as a symptom may be built otherwise."""
    module, _, function = ref.partition(":")
    folder = Path(pack.path) / "python" if pack.path else Path(__file__).resolve().parent / "python"
    try:
        tree = ast.parse((folder / f"{module}.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    functions = {f.name: f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo, seen = [function], set()
    names: set[str] = set()
    while todo:
        f = functions.get(todo.pop())
        if f is None or f.name in seen:
            continue
        seen.add(f.name)
        for n in ast.walk(f):
            if isinstance(n, ast.Dict):
                names |= {
                    v.value
                    for k, v in zip(n.keys, n.values)
                    if isinstance(k, ast.Constant)
                    and k.value == SYMPTOM
                    and isinstance(v, ast.Constant)
                    and isinstance(v.value, str)
                }
            elif isinstance(n, ast.Name) and n.id in functions:
                todo.append(n.id)
    return Emitted(frozenset(names), True)
