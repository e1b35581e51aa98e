"""Which of the pack's extract rules the attempt's log lines give something to read.

An extract rule that reads only log lines (Pack.reads_only_lines) finds something only on a line
holding one of its pre-filter literals: its tests keep their lines by those alone. Most attempts'
lines hold the literals of a few such rules, and each rule run costs its statement's binding
(~1-2.5 ms on a tiny attempt, whatever the lines: its regular expressions compiled) and, on a big
attempt, a pass over every kept line. So the literals of all of them are looked for at once, in
one pass over the attempt's lines (Hyperscan, each literal reported once), the first time such a
rule is next, and a rule none of whose literals a line holds is not run: it would find nothing.

The pass reads a line as written (`text`, what the scan kept it by) and, where it differs, its
body as the grammar left it (a Docker json-file envelope decoded, RFC 5424's header reshaped): a
literal in either runs the rule. Without Hyperscan (the fallback pre-filter) every rule runs.
"""

from __future__ import annotations

import duckdb

from workload_attribution.rules.pack import Pack, Rule
from workload_attribution.staging.prefilter import engine, held_by

# Lines read at a time: one text of ~1 MB a batch, whatever the attempt's size.
LINES_A_TEXT = 8_192


class Held:
    """The literals of the pack's line-reading extract rules that the attempt's lines hold, asked
    of the database once (extract rules do not change the lines)."""

    def __init__(self, pack: Pack) -> None:
        self.pack = pack
        self.found: set[str] | None = None

    def reads_nothing(self, con: duckdb.DuckDBPyConnection, rule: Rule) -> bool:
        """Whether the rule reads only log lines and no line holds one of its literals."""
        if not self.pack.reads_only_lines(rule) or engine() != "hyperscan":
            return False
        if self.found is None:
            self.found = self._find(con)
        return self.found.isdisjoint(rule.prefilter)

    def _find(self, con: duckdb.DuckDBPyConnection) -> set[str]:
        readers = [r for r in self.pack.rules if self.pack.reads_only_lines(r)]
        literals = tuple(sorted({lit for r in readers for lit in r.prefilter}))
        sources = sorted({s for r in readers for s in r.sources})
        texts = con.execute(
            "SELECT string_agg(CASE WHEN body IS NULL OR contains(coalesce(text, ''), body) THEN coalesce(text, '') "
            "ELSE coalesce(text, '') || chr(10) || body END, chr(10)) "
            f"FROM log_lines WHERE source IN (SELECT unnest($sources)) GROUP BY obs_id // {LINES_A_TEXT}",
            {"sources": sources},
        )
        return held_by(literals).among(text for (text,) in iter(texts.fetchone, None) if text)
