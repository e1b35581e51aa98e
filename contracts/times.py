"""Times as people type them: RFC 3339, 'now', or a span ago ('90m', '26h', '7d')."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from workload_attribution.contracts.errors import BadInput

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """An RFC 3339 time (no zone = UTC), 'now', or a span ago: '90m', '26h', '7d'."""
    now = now or datetime.now(timezone.utc)
    text = text.strip()
    if text == "now":
        return now
    m = _RELATIVE.match(text)
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"{text!r} is not a time: use RFC 3339 (2026-12-01T00:00:00Z), 'now' or a span ago (26h, 7d)"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
