"""NVLink5 XID 144-150 IntrInfo decode: bit masks are awkward in SQL, plain in Python.

Message anatomy (NVIDIA catalog, WORKFLOW_NVLINK5_ERR):
    <xid>, <subcode> <Fatal|Nonfatal> XC<n> i<n> Link <nn> (<IntrInfo> <errorStatus> <debug0..4>)
Masks in rules/data/nvlink5_decode.csv are 32-character patterns over IntrInfo (bit 31 first,
'-' = don't care): V1 for drivers < R575, V2 for >= R575.
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

    from workload_attribution.rules.engine import Settings

MESSAGE = re.compile(
    r"(?P<sub>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\s+XC(?P<xc>\d)\s+i(?P<inj>\d)\s+"
    r"Link\s+(?P<link>-?\d+)(?:\s*\((?P<intr>0x[0-9a-fA-F]+)\s+(?P<status>0x[0-9a-fA-F]+))?"
)
ACTIONS = {
    "RESET_GPU": "drain_and_reset_gpu",
    "IGNORE": "none",
    "RESTART_BM": "reboot_node",
    "CONTACT_SUPPORT": "drain_node",
    "RESTART_APP": "restart_job",
}


@lru_cache(maxsize=1)
def table() -> list[dict[str, str]]:
    path = Path(__file__).resolve().parent.parent / "data" / "nvlink5_decode.csv"
    with path.open() as f:
        return list(csv.DictReader(f))


def _matches(mask: str, bits: str) -> bool:
    return len(mask) == 32 and all(m == "-" or m == b for m, b in zip(mask, bits))


def decode(xid: int, detail: str) -> dict[str, Any] | None:
    m = MESSAGE.search(detail or "")
    if not m:
        return None
    out: dict[str, Any] = {
        "subcode_printed": m["sub"],
        "printed_severity": m["sev"],
        "cross_contain": m["xc"] == "1",
        "injected": m["inj"] == "1",
        "link": int(m["link"]),
    }
    if not m["intr"]:
        return out
    intr, status = int(m["intr"], 16), int(m["status"], 16)
    bits = format(intr, "032b")
    out.update(intrinfo=m["intr"], error_status=m["status"], reason_bits=bits[6:12])
    found: dict[str, list[dict[str, str]]] = {"V1": [], "V2": []}
    for row in table():
        if int(row["xid"]) != xid:
            continue
        if row["error_status"] and int(row["error_status"], 16) != status:
            continue
        for layout, col in (("V1", "v1_mask"), ("V2", "v2_mask")):
            if _matches(row[col], bits):
                found[layout].append(row)
    layouts = [k for k, v in found.items() if v]
    if not layouts:
        out["layout"] = "unknown"
        return out
    if len(layouts) == 2:  # both layouts fit: the printed subcode name decides, else the older layout
        named = [k for k in layouts if any(m["sub"] in r["subcode"] for r in found[k])]
        layouts = named or ["V1"]
    layout = layouts[0]
    row = found[layout][0]
    out.update(
        layout=layout,
        subcode=row["subcode"],
        immediate_action=row["immediate_action"],
        investigatory_action=row["investigatory_action"],
        severity=row["severity"],
        hw_sw=row["hw_sw"],
        impact=row["impact"],
    )
    return out


def decode_events(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    rows = con.execute("""
        SELECT event_id, component, TRY_CAST(json_extract(attrs, '$.xid') AS INTEGER),
               json_extract_string(attrs, '$.detail')
        FROM events WHERE symptom IN ('xid_144','xid_145','xid_146','xid_147','xid_148','xid_149','xid_150')
    """).fetchall()
    out = []
    for event_id, component, xid, detail in rows:
        d = decode(xid or 0, detail or "")
        if d is None:
            continue
        ann: dict[str, Any] = {"event_id": event_id, "attrs": {"decode": d}}
        if d.get("link", -1) >= 0 and component:
            ann["component"] = f"{component} NVLink {d['link']:02d}"
        if d.get("immediate_action"):
            ann["action"] = ACTIONS.get(d["immediate_action"], "drain_node")
            if d["immediate_action"] == "IGNORE":
                ann["role_hint"] = "benign"
        out.append(ann)
    return out
