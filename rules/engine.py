"""The rule engine: run the pack's phases over an attempt's staging database.

extract  -> events from observations (SQL over log_lines / samples / records)
early    -> annotations on events (catalog facts, decodes, address -> host mapping)
final    -> verdict candidates, then roles (root, cascade with demoted_by, context)
report   -> the Diagnosis (rules/report.py)

A rule that fails (bad SQL at run time, Python error) is recorded with its id and the rest of the
pack still runs; the diagnosis lists the failed rules.

This module is what other layers and the rules' own tools import; each part lives in a module of
its own: settings.py (Settings), pack_data.py (the pack's CSV tables and their cache), sandbox.py
(what a rule runs in: lock-down, one SELECT, allowed Python, the watchdog, view snapshots),
outputs.py (checking and applying one rule's output), runner.py (one rule run) and phases.py
(preparing the database, the phases in order, the verdict chosen, events renumbered).
"""

from __future__ import annotations

from workload_attribution.rules.outputs import check_columns
from workload_attribution.rules.pack_data import _CSV_TABLES, read_data_ahead
from workload_attribution.rules.phases import choose_verdict, prepare, renumber_events, run_phases
from workload_attribution.rules.runner import RunResult, run_rule
from workload_attribution.rules.sandbox import RuleRuntimeError, lock_down, python_rule, single_select
from workload_attribution.rules.settings import Settings

__all__ = [
    "_CSV_TABLES",  # the data cache, which a test empties to watch read_data_ahead fill it
    "RuleRuntimeError",
    "RunResult",
    "Settings",
    "check_columns",
    "choose_verdict",
    "lock_down",
    "prepare",
    "python_rule",
    "read_data_ahead",
    "renumber_events",
    "run_phases",
    "run_rule",
    "single_select",
]
