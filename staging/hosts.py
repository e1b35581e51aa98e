"""One identity per host: the names connectors staged (a log file's, a metric's host label, a
scheduler record's) in the allocation's own spelling, compared as DNS compares names
(contracts/identity.py, allocated_spelling). A name of no allocated host stays as written: the
early rule scope-attempt makes its events context (host_outside_allocation)."""

from __future__ import annotations

import duckdb

from workload_attribution.contracts.identity import allocated_spelling

TABLES = ("source_files", "samples", "records")


def spell_as_allocated(con: duckdb.DuckDBPyConnection, allocation: list[str]) -> dict[str, str]:
    """Rename the staged nodes that are an allocated host spelt otherwise; returns {as staged:
    as allocated} for those."""
    # one statement for the three tables (UNION: each name once), where one each cost three plans
    names = " UNION ".join(f"SELECT node FROM {table} WHERE node IS NOT NULL" for table in TABLES)
    seen = {r[0] for r in con.execute(names).fetchall()}
    allocated = set(allocation)
    renamed = {}
    for name in seen - allocated:
        spelt = allocated_spelling(name, allocation)
        if spelt is not None:
            renamed[name] = spelt
    if renamed:
        for table in TABLES:
            con.execute(
                f"UPDATE {table} SET node = m.to_name FROM (SELECT unnest($f) AS from_name, unnest($t) AS to_name) m "
                f"WHERE {table}.node = m.from_name",
                {"f": list(renamed), "t": list(renamed.values())},
            )
    return renamed
