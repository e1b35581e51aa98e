"""What a rule runs in: an attempt's database that reaches nothing else, one SELECT per SQL rule,
Python only from the pack's own allowed modules, a deadline past which a rule is interrupted, and
the engine's heavier views held still while a rule reads them."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb

from workload_attribution.rules.pack import Pack, Rule


class RuleRuntimeError(Exception):
    """A rule did what the engine does not allow, or gave output that breaks the contract."""


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """From here on the attempt's database reaches nothing else: no file reads or writes, no ATTACH,
    no INSTALL/LOAD, settings locked. Rules are a pack's code; the sandbox is what they run in."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


@lru_cache(maxsize=512)
def single_select(sql: str) -> None:
    """A rule's SQL is one SELECT (or WITH ... SELECT): nothing a rule says can be a second statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise RuleRuntimeError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements)
        raise RuleRuntimeError(f"a rule's SQL is one SELECT, not {len(statements)} statement(s): {kinds}")


_PY_MODULES: dict[Path, ModuleType] = {}
# (the pack's folder, its allowed modules, `module:function`) -> the function: a module is imported
# once a process anyway, and finding its file again (two resolve() walks of the path, a stat) cost
# every Python rule ~0.4 ms at every attempt
_PY_FUNCTIONS: dict[tuple[str, tuple[str, ...], str], Callable[..., Any]] = {}
_PY_LOCK = threading.Lock()


def python_rule(pack: Pack, spec: str) -> Callable[..., Any]:
    """A Python rule's function: `module:function`, the module a file of the pack's own python/
    folder named in pack.yaml's `python:` list. Nothing else is importable by a rule."""
    key = (str(pack.path), tuple(pack.python_modules), spec)
    found = _PY_FUNCTIONS.get(key)
    if found is None:
        found = _PY_FUNCTIONS[key] = _find_python_rule(pack, spec)
    return found


def _find_python_rule(pack: Pack, spec: str) -> Callable[..., Any]:
    module, _, func = spec.partition(":")
    if module not in pack.python_modules:
        raise RuleRuntimeError(
            f"python module {module!r} is not allowed by the pack (pack.yaml python: {pack.python_modules})"
        )
    path = (Path(pack.path) / "python" / f"{module}.py").resolve()
    if not path.is_file() or not path.is_relative_to((Path(pack.path) / "python").resolve()):
        raise RuleRuntimeError(f"python module {module!r}: no file python/{module}.py in the pack")
    with _PY_LOCK:
        mod = _PY_MODULES.get(path)
        if mod is None:
            mod = _PY_MODULES[path] = _import_file(module, path)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise RuleRuntimeError(f"python module {module!r} has no function {func!r}")
    return fn


def _import_file(module: str, path: Path) -> ModuleType:
    """The pack's file imported under a name of its own: two packs' modules of one name never meet."""
    name = f"_attribution_rules_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{module}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise RuleRuntimeError(f"python module {module!r}: cannot be loaded")
    mod = importlib.util.module_from_spec(loader_spec)
    loader_spec.loader.exec_module(mod)
    return mod


class Watchdog:
    """Interrupts a connection whose rule runs past its deadline. One thread for the process, not a
    timer thread per rule: starting and stopping a thread cost about a millisecond, 46 times a
    diagnosis. A rule disarmed before its deadline is never interrupted."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, duckdb.DuckDBPyConnection]] = {}
        self._tokens = itertools.count()
        self._wakes_at: float | None = None  # when the thread looks next (None: when armed)
        self._thread: threading.Thread | None = None

    def arm(self, con: duckdb.DuckDBPyConnection, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = (deadline, con)
            if self._thread is None or not self._thread.is_alive():  # the first rule, or a forked child
                self._thread = threading.Thread(target=self._watch, name="rule-watchdog", daemon=True)
                self._wakes_at = None
                self._thread.start()
            elif self._wakes_at is None or deadline < self._wakes_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _watch(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (deadline, con) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        try:
                            con.interrupt()
                        except Exception:  # closed meanwhile: nothing left to interrupt
                            pass
                self._wakes_at = min((d for d, _ in self._armed.values()), default=None)
                self._cond.wait(None if self._wakes_at is None else self._wakes_at - now)


WATCHDOG = Watchdog()


class Snapshots:
    """The engine's views that final-phase rules read several times each (root_candidates over
    failure_window over events and every observation): DuckDB binds and plans a view wherever a
    query names it, which cost those rules 2-3 times their own planning. While events do not
    change, a view's rows do not either: a rule naming one reads it from a temp table of the same
    name (temp comes first in DuckDB's search path), made when first named and dropped as soon as
    anything may have changed events."""

    VIEWS = ("failure_window", "root_candidates", "scheduler_final")  # in dependency order

    def __init__(self) -> None:
        self.made: list[str] = []

    def before(self, con: duckdb.DuckDBPyConnection, rule: Rule) -> None:
        for view in _views_named(rule.sql or ""):
            if view not in self.made:
                con.execute(f"CREATE TEMP TABLE {view} AS SELECT * FROM {view}")
                self.made.append(view)

    def drop(self, con: duckdb.DuckDBPyConnection) -> None:
        if self.made:
            con.execute("; ".join(f"DROP TABLE IF EXISTS temp.main.{view}" for view in self.made))
            self.made = []


@lru_cache(maxsize=1024)
def _views_named(sql: str) -> tuple[str, ...]:
    # the word searched for only in a rule that holds the name at all: three case-blind regex scans
    # of each rule's SQL cost a new process's first attempt ~3-7 ms, the substring test ~0.2 ms
    lowered = sql.lower()
    return tuple(v for v in Snapshots.VIEWS if v in lowered and re.search(rf"\b{v}\b", sql, re.IGNORECASE))
