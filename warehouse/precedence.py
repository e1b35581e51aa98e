"""Which of two diagnoses of one attempt is the current one: the same answer whichever was written
last, by whichever process or host, so concurrent writers converge on one row per attempt.

A diagnosis outranks another of the same attempt when, compared in this order:

1. its rules pack is newer: the pack version's calendar part (`2026.12.1` of
   `2026.12.1+78ecdca1d9`, rules/pack.yaml's `version`), compared as numbers, part by part
   (2026.12.1 < 2026.12.2 < 2027.1.1); a version with no number in it ranks below any with one.
   The digest after `+` says which files made the pack, not which came first: it does not order;
2. it was made later (`created_at`, to the microsecond): re-diagnosing with the same pack replaces;
3. its whole rules version sorts later as text (two packs of the same calendar version, made at
   the same moment: an arbitrary but fixed choice, the same for every writer).

A diagnosis that ranks equal to the stored one (the same pack, the same moment: the same
diagnosis written again) replaces it. An older pack's diagnosis never replaces a newer pack's,
whoever writes last (a worker not yet upgraded, a backfill run from an old checkout).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

Rank = tuple[tuple[int, ...], datetime, str]


def pack_rank(rules_version: str) -> tuple[int, ...]:
    """'2026.12.1+78ecdca1d9' -> (2026, 12, 1); () when the version has no number."""
    return tuple(int(n) for n in re.findall(r"\d+", rules_version.split("+", 1)[0]))


def rank(rules_version: str, created_at: datetime) -> Rank:
    """What orders diagnoses of one attempt (see the module's docstring): the greater is current."""
    when = created_at if created_at.tzinfo else created_at.replace(tzinfo=timezone.utc)
    return pack_rank(rules_version), when, rules_version


def may_replace(candidate: str, stored: str) -> bool:
    """Whether a diagnosis made now by the `candidate` rules version would replace one by the
    `stored` version (the backfill asks, so that it does not redo what a newer pack decided)."""
    return pack_rank(candidate) >= pack_rank(stored)
