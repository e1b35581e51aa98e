"""Property tests (hypothesis) for the parsers every diagnosis rests on: log timestamps in each
form the bundle spec lists and real tools print (in any zone, near year ends), rank and host
prefixes, Slurm hostlists, and the escaping of host names into PromQL and LogQL. Each property
states what must hold for any input.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import duckdb
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.services.loki_standin import parse_query
from workload_attribution.connectors.loki import render_selector
from workload_attribution.connectors.prometheus import render_query
from workload_attribution.contracts.hostlist import HostlistError, expand_hostlist
from workload_attribution.staging.database import sql

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SQL_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a query each
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
DAYS = "Mon Tue Wed Thu Fri Sat Sun".split()
ZONES = ["UTC", "Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata", "Australia/Lord_Howe"]


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")
    c.execute(sql("log_time_macros.sql"))
    yield c
    c.close()


def parse(con, line: str, tz: str, ref: datetime) -> dict:
    return con.execute("SELECT parse_log_line($l, $tz, $ref)", {"l": line, "tz": tz, "ref": ref}).fetchone()[0]


def parse_many(con, lines: list[str], tz: str, ref: datetime) -> list[datetime]:
    return [
        r[0]
        for r in con.execute(
            "SELECT parse_log_line(l, $tz, $ref)['ts'] FROM unnest($l) WITH ORDINALITY t(l, i) ORDER BY i",
            {"l": lines, "tz": tz, "ref": ref},
        ).fetchall()
    ]


moments = st.datetimes(min_value=datetime(2001, 1, 2), max_value=datetime(2037, 12, 30)).map(
    lambda d: d.replace(tzinfo=timezone.utc)
)


def local(t: datetime, tz: str) -> datetime:
    return t.astimezone(ZoneInfo(tz))


def unambiguous(t: datetime, tz: str) -> bool:
    """A wall-clock time that exists exactly once in the zone (DST gaps and folds have no single answer)."""
    wall = local(t, tz).replace(tzinfo=None)
    z = ZoneInfo(tz)
    a, b = wall.replace(tzinfo=z, fold=0), wall.replace(tzinfo=z, fold=1)
    return a.utcoffset() == b.utcoffset() and a.astimezone(timezone.utc).replace(tzinfo=None) == t.replace(tzinfo=None)


@SQL_SETTINGS
@given(t=moments, tz=st.sampled_from(ZONES), body=st.text(min_size=0, max_size=40).filter(lambda s: "\n" not in s))
def test_rfc3339_with_offset_is_exact_whatever_the_zone(con, t, tz, body):
    lt = local(t, tz)
    line = lt.isoformat(timespec="microseconds") + " host kernel: " + body
    got = parse(con, line, "UTC", t.replace(tzinfo=None))  # the printed offset wins over the attempt's zone
    assert got["ts"] == t.replace(tzinfo=None)


@SQL_SETTINGS
@given(t=moments, tz=st.sampled_from(ZONES), body=st.text(min_size=0, max_size=40).filter(lambda s: "\n" not in s))
def test_offset_forms_are_exact_whatever_the_zone(con, t, tz, body):
    """dmesg -x --time-format=iso (comma fraction), RFC 5424 and journalctl short-iso: the printed offset wins."""
    lt = local(t, tz)
    off = lt.strftime("%z")
    forms = [
        "kern  :err   : " + lt.strftime("%Y-%m-%dT%H:%M:%S,%f") + off[:3] + ":" + off[3:] + " NVRM: " + body,
        "<30>1 " + lt.isoformat(timespec="microseconds") + " node-02 slurmd 1234 - - " + body,
        lt.strftime("%Y-%m-%dT%H:%M:%S.%f") + off + " node-02 kernel: " + body,
    ]
    assert parse_many(con, forms, "UTC", t.replace(tzinfo=None)) == [t.replace(tzinfo=None)] * len(forms), forms


@SQL_SETTINGS
@given(t=moments, tz=st.sampled_from(ZONES))
def test_zone_less_forms_take_the_attempts_zone(con, t, tz):
    assume(unambiguous(t, tz))
    lt = local(t, tz).replace(microsecond=0)
    want = lt.astimezone(timezone.utc).replace(tzinfo=None)
    ref = want + timedelta(hours=1)
    mon, day = MONTHS[lt.month - 1], DAYS[lt.weekday()]
    forms = [
        lt.strftime("%Y-%m-%d %H:%M:%S") + ",000 - torch - INFO - step",  # Python logging
        f"[{day} {mon} {lt.day:2d} {lt:%H:%M:%S} {lt.year}] NVRM: x",  # dmesg -T
        f"[{mon} {lt.day:02d} {lt.year} {lt:%H:%M:%S}] [ERROR] [tid 1] fm",  # Fabric Manager
        f"{mon} {lt.day:2d} {lt:%H:%M:%S} host kernel: x",  # RFC 3164
        f"<30>{mon} {lt.day:2d} {lt:%H:%M:%S} host slurmd[12]: x",  # RFC 3164 with a priority
        f"E{lt.month}{lt.day:02d} {lt:%H:%M:%S}.000000 139185760270418 torch/x.py:874] x",  # c10: month unpadded
        f"[rank3]:[W{lt.month:02d}{lt.day:02d} {lt:%H:%M:%S}.000000000 ProcessGroupNCCL.cpp:1] x",  # glog
        # journalctl short-full prints the zone's abbreviation (PST, IST) or, where it has none, an offset (+1030)
        f"{day} {lt:%Y-%m-%d %H:%M:%S} {lt.tzname()} host kernel: x",
        f"slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT {lt:%Y-%m-%dT%H:%M:%S} DUE TO TIME LIMIT ***",
        f"node03: {mon} {lt.day:2d} {lt:%H:%M:%S} node03 kernel: x",  # pdsh in front of syslog
    ]
    assert parse_many(con, forms, tz, ref) == [want] * len(forms), forms


@SQL_SETTINGS
@given(t=moments, skew_days=st.integers(-150, 150))
def test_year_less_lines_take_the_year_nearest_the_attempt(con, t, skew_days):
    """A 'Dec 31' line read for a January attempt belongs to the year before, and so on."""
    t = t.replace(microsecond=0)
    ref = (t + timedelta(days=skew_days)).replace(tzinfo=None)
    line = f"{MONTHS[t.month - 1]} {t.day:2d} {t:%H:%M:%S} host kernel: x"
    assume(not (t.month == 2 and t.day == 29))
    assert parse(con, line, "UTC", ref)["ts"] == t.replace(tzinfo=None)


@SQL_SETTINGS
@given(
    rank=st.integers(0, 99999),
    style=st.sampled_from(
        ["[rank{r}]: ", "[default{r}]: ", "{r}: ", " {r}: ", "[node-{r}:{r}]:", "[1,{r}]<stdout>:", "[1,{r}]<stderr>: "]
    ),
    t=moments,
    body=st.text(min_size=1, max_size=30).filter(lambda s: "\n" not in s and not s[0].isspace()),
)
def test_rank_prefix_after_a_timestamp(con, rank, style, t, body):
    line = t.strftime("%Y-%m-%dT%H:%M:%SZ ") + style.format(r=rank) + body
    got = parse(con, line, "UTC", t.replace(tzinfo=None))
    assert got["rank"] == rank and got["ts"] == t.replace(tzinfo=None, microsecond=0)


@SQL_SETTINGS
@given(
    host=st.from_regex(r"[a-z][a-z-]{0,8}[0-9]{1,3}(\.[a-z]{2,6}){0,2}", fullmatch=True),
    rank=st.integers(0, 9999),
    t=moments,
)
def test_pdsh_host_changes_nothing_but_the_body(con, host, rank, t):
    """pdsh's "host: " is stripped; the grammar after it reads the line as if it were not there."""
    # Kernel device names (vda0, eth1, md127) are not hosts: which are is test_log_lines' business.
    assume(con.execute("SELECT lt_pdsh_len(?)", [host]).fetchone()[0] > 0)
    line = t.strftime("%Y-%m-%dT%H:%M:%S.%fZ ") + f"[rank{rank}]: RuntimeError: x"
    bare = parse(con, line, "UTC", t.replace(tzinfo=None))
    assert parse(con, f"{host}: {line}", "UTC", t.replace(tzinfo=None)) == bare
    assert bare["ts"] == t.replace(tzinfo=None) and bare["rank"] == rank and bare["body"] == " RuntimeError: x"


@SQL_SETTINGS
@given(st.text(max_size=80))
def test_any_line_parses_without_error(con, line):
    got = parse(con, line, "Europe/Berlin", datetime(2026, 1, 1))
    assert got is None or isinstance(got, dict)


# ---- hostlists ------------------------------------------------------------------------------------


def compress(prefix: str, numbers: list[int], width: int) -> str:
    """A reference writer: consecutive runs as lo-hi, zero-padded to `width`."""
    numbers = sorted(set(numbers))
    runs, start = [], numbers[0]
    for a, b in zip(numbers, numbers[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start:0{width}d}" if start == a else f"{start:0{width}d}-{a:0{width}d}")
            start = b
    return f"{prefix}[{','.join(runs)}]"


prefixes = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True).filter(lambda p: not p[-1].isdigit())


@SETTINGS
@given(
    groups=st.lists(
        st.tuples(prefixes, st.lists(st.integers(0, 9999), min_size=1, max_size=30), st.integers(1, 5)),
        min_size=1,
        max_size=4,
    )
)
def test_hostlist_expands_to_exactly_the_hosts_written(groups):
    expr, want = [], []
    for prefix, numbers, width in groups:
        width = max(width, len(str(max(numbers))))
        expr.append(compress(prefix, numbers, width))
        want += [f"{prefix}{n:0{width}d}" for n in sorted(set(numbers))]
    got = expand_hostlist(",".join(expr))
    assert sorted(got) == sorted(dict.fromkeys(want)) and len(got) == len(set(got))


@SETTINGS
@given(st.text(alphabet="ab01-9[],", max_size=30))
def test_hostlist_garbage_is_a_hostlist_error_or_hosts(expr):
    try:
        hosts = expand_hostlist(expr)
    except HostlistError:
        return
    assert all(isinstance(h, str) and h for h in hosts)


def test_hostlist_cross_product_bomb_is_refused():
    with pytest.raises(HostlistError, match="too many hosts"):
        expand_hostlist("n[0-99999][0-99999]")


# ---- escaping into PromQL and LogQL --------------------------------------------------------------

hosts = st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=5, unique=True)


@SETTINGS
@given(hosts=hosts, other=st.text(max_size=20))
def test_promql_matcher_matches_exactly_the_hosts(hosts, other):
    q = render_query('up{instance=~"{hosts}"}', hosts)
    m = re.fullmatch(r'up\{instance=~"((?:[^"\\]|\\.)*)"\}', q, flags=re.S)
    assert m, q
    pattern = re.compile(json.loads(f'"{m.group(1)}"'))
    assert all(pattern.fullmatch(h) for h in hosts)
    assert bool(pattern.fullmatch(other)) == (other in hosts)


@SETTINGS
@given(hosts=hosts, other=st.text(max_size=20))
def test_logql_selector_matches_exactly_the_hosts(hosts, other):
    matchers, filters = parse_query(render_selector('{job="syslog", host=~"{hosts}"}', hosts))
    assert [(k, op) for k, op, _ in matchers] == [("job", "="), ("host", "=~")] and filters == []
    pattern = re.compile(matchers[1][2])
    assert all(pattern.fullmatch(h) for h in hosts)
    assert bool(pattern.fullmatch(other)) == (other in hosts)
