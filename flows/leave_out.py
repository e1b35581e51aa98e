"""`attribution eval DIR --leave-out family|origin`: does the pack generalize, or does it remember?

A catalog row written for a bundle proves nothing about the next failure. So each bundle is
diagnosed again with a variant of the pack that lacks the rows that could have been written for it,
and the table shows, per catalog family, how many bundles still come out right (the full pack's
share beside it). Only catalog rows are left out: rules, data tables and whatever else the pack
holds stay.

- `family`: the rows of every family that reads the bundle. A bundle's families are those of the
  catalog rows behind its diagnosis's events. A row the diagnosis does not show (its line gave
  another row's event of the same symptom first) may surface once the others are gone: its
  family is the bundle's too, it goes, and the bundle is diagnosed again, until no catalog row
  reads the bundle. (The neighbours of a bundle's rows in their family were likely written from
  the same sources.)
- `origin`: the rows whose `test_line_origin` or `reference` is an address the bundle cites: its
  expected.json `source` and the addresses of its section in a SOURCES.md of DIR (the heading
  naming it, to the next of its level; outside the verbatim excerpts), compared without scheme,
  `www.`, fragment or trailing slash.

A bundle is reported under its family: that of the first catalog row in its full-pack diagnosis's
order (the root's if a row gave the root, else the first symptom's: cascades before context, by
time), `none` when no row read it (then there is nothing to leave out: the full pack's outcome
stands). Each distinct set of rows left out makes one pack variant, built once.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from workload_attribution.flows.evaluation import Outcome, Report, diagnose, diagnose_each, expected_of, find_bundles
from workload_attribution.rules.catalog import CatalogRow
from workload_attribution.rules.pack import Pack

Mode = Literal["family", "origin"]
NO_FAMILY = "none"  # no catalog row reads the bundle
_ADDRESS = re.compile(r"https?://[^\s<>`\"')\]]+")
_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.S | re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(\S+)", re.M)


def address(text: str) -> str:
    """An address as compared: no `log:`/`format:` tag, scheme, `www.`, fragment or trailing slash,
    in lower case (GitHub's owners and repositories are; a rare false match leaves out more, the
    strict side)."""
    text = re.sub(r"^(?:log|format):", "", text.strip())
    text = re.sub(r"^https?://(?:www\.)?", "", text, flags=re.I).split("#")[0]
    return text.rstrip("/.,;:").rstrip("/").lower()


def row_origins(row: CatalogRow) -> set[str]:
    """Where a row's test line was seen (or rendered from) and its reference."""
    return {address(row.test_line_origin), address(row.reference.split()[0])}


def cited_sections(root: Path) -> dict[str, set[str]]:
    """Per heading's first word (a bundle's name), the addresses its section of a SOURCES.md
    under root cites (what a section quotes verbatim between fences is the log, not a source)."""
    out: dict[str, set[str]] = {}
    for doc in sorted(Path(root).rglob("SOURCES.md")):
        prose = _FENCE.sub("", doc.read_text(encoding="utf-8"))
        heads = list(_HEADING.finditer(prose))
        for i, head in enumerate(heads):
            # a section (`### <bundle> (a remark)`) runs to the next heading of its level or above
            end = next((h.start() for h in heads[i + 1 :] if len(h[1]) <= len(head[1])), len(prose))
            body = prose[head.end() : end]
            out.setdefault(head[2], set()).update(address(a) for a in _ADDRESS.findall(body))
    return out


def case_origins(bundle: Path, expected: dict, sections: dict[str, set[str]]) -> set[str]:
    """The addresses a bundle cites: expected.json's `source` (and `also_sources`), its SOURCES.md section's."""
    cited = [expected.get("source"), *(expected.get("also_sources") or [])]
    return {address(a) for a in cited if isinstance(a, str) and a.strip()} | sections.get(bundle.name, set())


class Variants:
    """The pack without some catalog rows, built once per distinct set of rows and shared."""

    def __init__(self, pack: Pack) -> None:
        self.pack = pack
        self._built: dict[frozenset[str], Pack] = {}
        self._lock = threading.Lock()

    def without(self, ids: frozenset[str]) -> Pack:
        if not ids:
            return self.pack
        with self._lock:
            variant = self._built.get(ids)
            if variant is None:
                # its own version: the engine keeps what it derives from a pack (the catalog table,
                # bound columns) by version
                tag = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:10]
                variant = self.pack.model_copy(
                    update={
                        "catalog": [r for r in self.pack.catalog if r.id not in ids],
                        "version": f"{self.pack.version}-without-{tag}",
                    }
                )
                variant._memo = {}  # the literals it keeps lines by are its own
                self._built[ids] = variant
            return variant

    def of_families(self, families: set[str]) -> frozenset[str]:
        return frozenset(r.id for r in self.pack.catalog if r.family in families)


def evaluate_left_out(
    root: Path,
    pack: Pack,
    mode: Mode,
    progress: Callable[[str, int, int], None] | None = None,
    concurrency: int = 2,
) -> Report:
    """Every bundle under root diagnosed with the full pack, then again without the rows `mode`
    leaves out for it; outcomes in bundle order, each with the full pack's beside it."""
    started = time.monotonic()
    bundles = find_bundles(root)
    full = diagnose_each(
        bundles, lambda b: diagnose(b, pack), progress and (lambda i, n: progress("full pack", i, n)), concurrency
    )
    variants = Variants(pack)
    sections = cited_sections(root) if mode == "origin" else {}

    def one(full: Outcome) -> Outcome:
        b = Path(full.bundle)
        if mode == "family":
            out = _without_families(b, full, variants)
        else:
            out = _without_origins(b, full, variants, case_origins(b, expected_of(b), sections))
        out.family, out.full = _family(full), full
        return out

    # bundles leaving out the same rows one after the other: a variant's matcher is built once
    order = sorted(full, key=lambda o: (_family(o), o.bundle))
    left = diagnose_each(order, one, progress and (lambda i, n: progress(f"left out by {mode}", i, n)), concurrency)
    by_bundle = {o.bundle: o for o in left}
    report = Report([by_bundle[o.bundle] for o in full])
    report.seconds = time.monotonic() - started
    return report


def _family(full: Outcome) -> str:
    families = (full.got or {}).get("catalog_families") or []
    return families[0] if families else NO_FAMILY


def _without_families(bundle: Path, full: Outcome, variants: Variants) -> Outcome:
    """Without every family reading the bundle, until none does (see the module's doc)."""
    families = set((full.got or {}).get("catalog_families") or [])
    if not families:
        return _same(full, [])
    while True:
        out = diagnose(bundle, variants.without(variants.of_families(families)))
        more = set((out.got or {}).get("catalog_families") or []) - families
        if not more:
            out.left_out = sorted(families)
            return out
        families |= more


def _without_origins(bundle: Path, full: Outcome, variants: Variants, origins: set[str]) -> Outcome:
    ids = frozenset(r.id for r in variants.pack.catalog if row_origins(r) & origins)
    if not ids:
        return _same(full, [])
    out = diagnose(bundle, variants.without(ids))
    out.left_out = sorted(ids)
    return out


def _same(full: Outcome, left_out: list[str]) -> Outcome:
    """Nothing to leave out: the full pack's diagnosis stands."""
    return Outcome(full.bundle, full.cls, full.expected, full.got, full.error, left_out=left_out)
