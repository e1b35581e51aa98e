"""What would settle an ambiguous or insufficient_evidence verdict: the evidence that was not
collected and would decide it, named machine-readably (source, hosts, time window, the readings it
separates) and in one sentence ("syslog of node-07 between 10:02 and 10:05 would show whether a
GPU, NVLink, NIC, link, host, storage or out-of-memory fault preceded the NCCL watchdog timeout").

What each source can show is the pack's data (data/evidence_sources.csv: the verdicts it reveals,
whether it is kept per host). A source is missing for a host when its coverage says it was not
collected (unavailable, error, timeout) or delivered nothing for that host (partial, or ok for
others); `empty` (collected, nothing in it) and `skipped` (does not apply) are not missing.
`attribution diagnose --retry-missing` collects the sources named here and diagnoses again.

A node-level verdict (contracts.vocabulary.NODE_LEVEL) that names no host is undecided about the
host: the sources that show its kind of failure and were not collected would name it, and the
diagnosis notes why none is named (`unnamed_host_note`).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import duckdb

from workload_attribution.contracts.models import Coverage, Diagnosis, MissingEvidence
from workload_attribution.contracts.vocabulary import CoverageStatus, SubDomain, node_level
from workload_attribution.staging.database import rows

UNDECIDED = (SubDomain.ambiguous, SubDomain.insufficient_evidence)
NOT_MISSING = (CoverageStatus.empty, CoverageStatus.skipped)
MAX_HOSTS = 64
SHOWN_HOSTS = 3  # hosts named in the sentence; `hosts` lists them all (up to MAX_HOSTS)


def would_settle(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> list[MissingEvidence]:
    """For an undecided diagnosis, each source whose missing records would decide it; for a
    node-level verdict naming no host, each that would name it."""
    if unnamed_host(d):
        return _would_name(con, d)
    if d.sub_domain not in UNDECIDED:
        return []
    start, end = _window(con, d)
    hosts = _hosts_in_question(d)
    standing = _standing(d)
    coverage = {c.source: c for c in d.coverage}
    out = []
    for src in rows(con, "SELECT * FROM evidence_sources"):
        missing = _missing_hosts(coverage.get(src["source"]), hosts, bool(src["per_host"]))
        reveals = (src["reveals"] or "").split()
        if missing is None or not _bears_on(d, reveals):
            continue
        out.append(
            MissingEvidence(
                source=src["source"],
                hosts=missing[:MAX_HOSTS],
                start=start,
                end=end,
                separates=standing if d.sub_domain == SubDomain.ambiguous else [*standing, *reveals],
                reason=_sentence(d, src["source"], missing, start, end, src["shows"]),
            )
        )
    if not out and d.sub_domain == SubDomain.ambiguous and len(hosts) > 1:
        out.append(_clocks(d, hosts, start, end, standing))
    return out


def _bears_on(d: Diagnosis, reveals: list[str]) -> bool:
    """Ambiguous: the source shows faults of the candidates' kinds. Insufficient: any kind."""
    if d.sub_domain != SubDomain.ambiguous or not d.candidates:
        return bool(reveals)
    kinds = {f"{c.terminal_state}/{c.sub_domain}" for c in d.candidates}
    return bool(kinds & set(reveals))


def _clocks(d: Diagnosis, hosts: list[str], start: Any, end: Any, standing: list[str]) -> MissingEvidence:
    """Every source that shows the candidates was collected: they lie within the clock-skew
    tolerance of each other, and only the hosts' clock offsets then would order them."""
    a, b = d.candidates[0], d.candidates[1]
    apart = abs((b.first_seen - a.first_seen).total_seconds()) if a.first_seen and b.first_seen else None
    gap = f" ({apart:.1f} s apart, within the clock-skew tolerance)" if apart is not None else ""
    return MissingEvidence(
        source="clock",
        hosts=hosts[:MAX_HOSTS],
        start=start,
        end=end,
        separates=standing,
        reason=(
            f"the clock offsets of {', '.join(hosts[:SHOWN_HOSTS])} then (chrony or NTP logs) would show which came "
            f"first: {a.symptom} on {a.node or '?'} or {b.symptom} on {b.node or '?'}{gap}"
        ),
    )


def _window(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> tuple[datetime | None, datetime | None]:
    """Where the deciding records lie: around the candidates (ambiguous: from the first minus the
    clock-skew tolerance to the last plus it), else the failure window (rules' failure_window)."""
    w = rows(con, "SELECT window_start, window_end, skew_tolerance_s FROM failure_window")
    if not w:
        return None, None
    times = [c.first_seen for c in d.candidates if c.first_seen]
    if d.sub_domain == SubDomain.ambiguous and times:
        skew = timedelta(seconds=float(w[0]["skew_tolerance_s"] or 0))
        return min(times) - skew, max(times) + skew
    return _utc(w[0]["window_start"]), _utc(w[0]["window_end"])


def _utc(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


def _hosts_in_question(d: Diagnosis) -> list[str]:
    """Ambiguous: the candidates' hosts. Insufficient: any host of the attempt may hide the fault;
    those the evidence points at first (the root's, then those that reported the failure first)."""
    if d.sub_domain == SubDomain.ambiguous and d.candidates:
        return list(dict.fromkeys(c.node for c in d.candidates if c.node))
    first: list[str] = [d.root_cause.node] if d.root_cause and d.root_cause.node else []
    timed = sorted((s for s in d.symptoms if s.node and s.first_seen), key=lambda s: (s.first_seen, s.node))
    return list(dict.fromkeys([*first, *(s.node for s in timed if s.node), *d.attempt.nodes]))


def _missing_hosts(cov: Coverage | None, hosts: list[str], per_host: bool) -> list[str] | None:
    """The hosts whose records of this source are missing ([] : the job's, not a host's); None
    when nothing is (or the source is not configured for the attempt: nothing could collect it)."""
    if cov is None or cov.status in NOT_MISSING:
        return None
    if cov.status in (CoverageStatus.unavailable, CoverageStatus.error, CoverageStatus.timeout):
        return hosts if per_host else []
    if not per_host:
        return [] if cov.status == CoverageStatus.partial else None
    covered = set(cov.nodes)
    missing = [h for h in hosts if h not in covered]
    return missing or None


def _standing(d: Diagnosis) -> list[str]:
    """The readings the evidence leaves open: the candidates, or the weak reading as it stands."""
    if d.sub_domain == SubDomain.ambiguous and d.candidates:
        return [f"{c.symptom} on {c.node or '?'}" for c in d.candidates]
    what = d.root_cause.symptom if d.root_cause else "no cause found"
    return [f"{d.terminal_state}/{d.sub_domain}: {what}"]


def _sentence(d: Diagnosis, source: str, hosts: list[str], start: Any, end: Any, shows: str) -> str:
    """One sentence: a host's source would show whether its kind of fault came first (ambiguous:
    which candidate came first); the job's record would show what it shows."""
    if not hosts:
        return f"the job's {source} would show {shows}"
    more = len(hosts) - SHOWN_HOSTS
    of = ", ".join(hosts[:SHOWN_HOSTS]) + (f" and {more} more host(s)" if more > 0 else "")
    until = f"{end:%H:%M}" if start and end and start.date() == end.date() else f"{end:%Y-%m-%d %H:%M}"
    when = f" between {start:%Y-%m-%d %H:%M} and {until} UTC" if start and end else ""
    if d.sub_domain == SubDomain.ambiguous and len(d.candidates) > 1:
        a, b = d.candidates[0], d.candidates[1]
        return (
            f"{source} of {of}{when} would show which came first: {a.symptom} on {a.node or '?'} "
            f"or {b.symptom} on {b.node or '?'}"
        )
    failure = f"the first failure seen ({d.root_cause.title})" if d.root_cause else "the failure"
    return f"{source} of {of}{when} would show whether {shows} came before {failure}"


def unnamed_host(d: Diagnosis) -> bool:
    """A verdict whose blame is a host, with no host named."""
    return node_level(d.terminal_state, d.sub_domain) and not d.affected_nodes


def _would_name(con: duckdb.DuckDBPyConnection, d: Diagnosis) -> list[MissingEvidence]:
    """Each source not collected that shows the verdict's kind of failure, of the allocation's hosts."""
    start, end = _window(con, d)
    kind = f"{d.terminal_state}/{d.sub_domain}"
    coverage = {c.source: c for c in d.coverage}
    out = []
    for src in rows(con, "SELECT * FROM evidence_sources"):
        missing = _missing_hosts(coverage.get(src["source"]), list(d.attempt.nodes), bool(src["per_host"]))
        if missing is None or kind not in (src["reveals"] or "").split():
            continue
        out.append(
            MissingEvidence(
                source=src["source"],
                hosts=missing[:MAX_HOSTS],
                start=start,
                end=end,
                separates=[f"{kind} on {h}" for h in d.attempt.nodes[:MAX_HOSTS]],
                reason=_naming_sentence(src["source"], missing, start, end),
            )
        )
    return out


def _naming_sentence(source: str, hosts: list[str], start: Any, end: Any) -> str:
    if not hosts:
        return f"the job's {source} would name the host"
    more = len(hosts) - SHOWN_HOSTS
    of = ", ".join(hosts[:SHOWN_HOSTS]) + (f" and {more} more host(s)" if more > 0 else "")
    when = f" between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} UTC" if start and end else ""
    return f"{source} of {of}{when} would name the host"


def unnamed_host_note(d: Diagnosis, why: str | None) -> str | None:
    """Why a node-level verdict names no host, and what would settle it ("node_unreachable: the
    evidence names no host of the 8 allocated; the scheduler's record gives no node; would settle:
    syslog (n1, n2, n3 and 5 more), scheduler_log"); would_settle says each in a sentence."""
    if not unnamed_host(d):
        return None
    why = why or f"the evidence names no host of the {len(d.attempt.nodes)} allocated"
    settles = ", ".join(_source_of(m) for m in d.would_settle) or "nothing left uncollected would name it"
    return f"{d.sub_domain}: {why}; would settle: {settles}"


def _source_of(m: MissingEvidence) -> str:
    if not m.hosts:
        return m.source
    more = len(m.hosts) - SHOWN_HOSTS
    return f"{m.source} ({', '.join(m.hosts[:SHOWN_HOSTS])}{f' and {more} more' if more > 0 else ''})"
