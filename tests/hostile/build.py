"""The hostile-input corpus, built at test time (nothing large is committed).

Each case starts from a base bundle (the worked example: an NVLink fault, XID 149, on gb-r12-n04,
or the Kueue host-OOM regression bundle), breaks one thing, and states what a user must see:
the exit code, the coverage status of the sources it touches, the verdict, and for exit 2 the
words of the one-line error. The damage is put on other hosts than the faulty one, so the verdict
must survive it: one bad record costs one record, never the source or the diagnosis.

    python -m tests.hostile.build DIR      # build every case under DIR (to look at them)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
WORKED = ROOT / "tests" / "examples" / "xid149-worked"
KUEUE = ROOT / "tests" / "regression" / "host_oom_kueue-1-0"

HOST = "gb-r12-n04"  # the faulty host of the worked example
OTHER = "gb-r12-n01"  # a healthy host: damage goes here
NVLINK = ("hardware_failure", "nvlink")
HOST_OOM = ("application_failure", "host_oom")

XID79 = "NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
GOOD_SCOPE = (
    "cluster: c\nscheduler: slurm\njob_id: '1'\nattempt: 0\nnodes: [a]\nstart: 2026-01-01T00:00:00Z\n"
    "end: 2026-01-01T01:00:00Z\nstate: FAILED\n"
)


@dataclass
class Case:
    name: str
    build: Callable[[Path], Any]
    exit: int = 0
    verdict: tuple[str, str] | None = NVLINK  # exit 0: (terminal_state, sub_domain)
    node: str | None = HOST  # exit 0: the root cause's node (None: no root node expected)
    coverage: dict[str, str | tuple[str, ...]] = field(default_factory=dict)  # source -> allowed status(es)
    words: tuple[str, ...] = ()  # exit 2: in the error line; exit 0: in the coverage record(s) named
    check: Callable[[dict], Any] | None = None  # more assertions on the diagnosis JSON
    base: Path | None = WORKED  # None: an empty directory
    root_only: bool = False  # needs root (device nodes)
    tags: tuple[str, ...] = ()


CASES: list[Case] = []


def case(name: str, **kw: Any) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES.append(Case(name=name, build=fn, **kw))
        return fn

    return register


def cov(d: dict, source: str) -> dict:
    return next(c for c in d["coverage"] if c["source"] == source)


def append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def syslog(b: Path, host: str = OTHER) -> Path:
    return b / "logs" / "syslog" / f"{host}.log"


def app(b: Path, host: str = OTHER) -> Path:
    return b / "logs" / "app" / f"{host}.log"


def prom(b: Path) -> Path:
    return b / "metrics" / "range-export.prom"


def scope_with(b: Path, old: str, new: str) -> None:
    p = b / "attempt.yaml"
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new))


def assert_unparsed(source: str, at_least: int = 1) -> Callable[[dict], None]:
    def check(d: dict) -> None:
        assert cov(d, source)["unparsed"] >= at_least, cov(d, source)

    return check


def all_of(*checks: Callable[[dict], Any]) -> Callable[[dict], None]:
    def check(d: dict) -> None:
        for c in checks:
            c(d)

    return check


def not_blamed(host: str) -> Callable[[dict], None]:
    def check(d: dict) -> None:
        assert host not in d["affected_nodes"] and host not in [c["node"] for c in d["candidates"]], d["candidates"]

    return check


def no_control_characters(d: dict) -> None:
    """Names from the file system reach the JSON escaped: no control character in any string."""

    def walk(x: Any) -> None:
        if isinstance(x, str):
            assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000 for c in x), repr(x)
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk({k: v for k, v in d.items() if k not in ("evidence", "explanation")})
    walk([e["ref"] for e in d["evidence"]] + [e["path"] for e in d["evidence"]] + [e["node"] for e in d["evidence"]])


def names_capped(limit: int = 300) -> Callable[[dict], None]:
    def check(d: dict) -> None:
        for c in d["coverage"]:
            for v in c["details"].values():
                for item in v if isinstance(v, list) else []:
                    assert len(str(item)) <= limit, (c["source"], len(str(item)))
        for e in d["evidence"]:
            assert len(e["ref"]) <= limit, len(e["ref"])

    return check


def no_names_from(directory: str) -> Callable[[dict], None]:
    """Nothing listed from a directory outside the bundle (a symlinked /etc)."""
    leaked = {p.name for p in Path(directory).iterdir()} - {""}

    def check(d: dict) -> None:
        text = json.dumps(d["coverage"])
        for name in ("passwd", "hostname", "os-release", "fstab"):
            if name in leaked:
                assert name not in text, name

    return check


# ---- timestamps outside 1970..2200: the line is unparsed (counted), never a crash -------------------


FAR_LINES = {
    "rfc3339-year-10000-utc": f"9999-12-31T23:59:59-14:00 {OTHER} kernel: {XID79}",
    "rfc3339-year-9999": f"9999-12-31T23:59:59Z {OTHER} kernel: {XID79}",
    "rfc3339-year-1": f"0001-01-01T00:00:00+14:00 {OTHER} kernel: {XID79}",
    "rfc3339-1969": f"1969-12-31T23:59:59Z {OTHER} kernel: {XID79}",
    "rfc3339-year-2500": f"2500-06-01T00:00:00Z {OTHER} kernel: {XID79}",
    "short-iso-offset-9999": f"9999-12-31T23:59:59+1400 {OTHER} kernel: {XID79}",
    "dmesg-T-year-9999": f"[Fri Dec 31 23:59:59 9999] {XID79}",
    "python-logging-year-9999": f"9999-12-31 23:59:59,999 ERROR kernel said {XID79}",
    "nccl-bracket-year-9999": f"[9999-12-31 23:59:59] {OTHER}:1:2 [0] NCCL WARN {XID79}",
    "fabricmanager-year-9999": f"[Dec 31 9999 23:59:59] [ERROR] [tid 1] {XID79}",
    "hour-25-minute-61": f"2026-11-20T25:61:61Z {OTHER} kernel: {XID79}",
    "fraction-40-digits": f"2026-11-20T11:00:00.{'9' * 40}Z {OTHER} kernel: {XID79}",
    "dmesg-uptime-huge": f"[99999999999999999.123456] {XID79}",
}

IMPOSSIBLE = {"hour-25-minute-61", "fraction-40-digits"}  # a stamp whose fields make no time
MALFORMED = {"dmesg-uptime-huge"}  # no stamp at all: the line takes its neighbours' time


def far_lines(source: str, n: int, key: str = "lines_with_time_out_of_range") -> Callable[[dict], None]:
    """Exactly n lines of the source were quarantined (a stamp outside 1970..2200, or one that makes
    no time): counted, unparsed, kept with no time."""

    def check(d: dict) -> None:
        c = cov(d, source)
        assert c["details"].get(key) == n and c["unparsed"] >= n, c

    return check


def impossible_lines(source: str, n: int) -> Callable[[dict], None]:
    return far_lines(source, n, "lines_with_impossible_time")


for _name, _line in FAR_LINES.items():

    def _build(b: Path, line: str = _line) -> None:
        append(syslog(b), line + "\n")

    counted = impossible_lines("syslog", 1) if _name in IMPOSSIBLE else far_lines("syslog", 1)
    CASES.append(
        Case(
            name=f"time-{_name}",
            build=_build,
            coverage={"syslog": ("ok", "partial") if _name in MALFORMED else "partial"},
            check=not_blamed(OTHER) if _name in MALFORMED else all_of(not_blamed(OTHER), counted),
            tags=("time",),
        )
    )


# A fault planted on a healthy host with a stamp that is no time, in the middle of its log (its
# neighbours are an hour before the real root): quarantined, never the root, never a neighbour's time.
PLANTED = {
    "leap-second-on-a-day-without-one": ("2026-11-20T11:59:60Z", impossible_lines),
    "fraction-of-15-digits": ("2026-11-20T13:30:00.123456789012345Z", impossible_lines),
    "year-2500": ("2500-11-20T11:00:00Z", far_lines),
    "year-1900": ("1900-11-20T11:00:00Z", far_lines),
    "year-1969": ("1969-11-20T11:00:00Z", far_lines),
}


def quarantined(host: str, lineno: int) -> Callable[[dict], None]:
    """The planted line is kept as evidence with no time, marked quarantined."""

    def check(d: dict) -> None:
        ref = f"logs/syslog/{host}.log:{lineno}"
        kept = [e for e in d["evidence"] if e["ref"] == ref]
        assert all(e["time"] is None and e["time_quality"] == "quarantined" for e in kept), kept

    return check


for _name, (_stamp, _count) in PLANTED.items():

    def _plant(b: Path, stamp: str = _stamp) -> None:
        lines = syslog(b).read_text().split("\n")
        lines.insert(15, f"{stamp} {OTHER} kernel: {XID79}")  # after 11:03, before 11:10 UTC
        syslog(b).write_text("\n".join(lines))

    CASES.append(
        Case(
            name=f"time-planted-{_name}",
            build=_plant,
            coverage={"syslog": "partial"},
            check=all_of(not_blamed(OTHER), _count("syslog", 1), quarantined(OTHER, 16)),
            tags=("time", "lie"),
        )
    )


@case("time-far-future-app-line-with-rank", coverage={"app": "partial"}, check=far_lines("app", 1))
def _(b: Path) -> None:
    append(app(b), "[rank0]:9999-12-31T23:59:59-14:00 RuntimeError: CUDA error: an illegal memory access\n")


@case("time-far-future-in-every-syslog", coverage={"syslog": "partial"}, check=far_lines("syslog", 5))
def _(b: Path) -> None:
    for h in ("gb-r12-n01", "gb-r12-n02", "gb-r12-n03", "gb-r12-n05", "gb-r12-n06"):
        append(syslog(b, h), f"9999-12-31T23:59:59-14:00 {h} kernel: {XID79}\n")


# ---- host identity: one host, however its name is spelt; a host outside the allocation is context ----


def rename(path: Path, name: str) -> None:
    path.rename(path.parent / name)


def named_in_the_allocations_spelling(d: dict) -> None:
    """Every host the diagnosis names is spelt as the allocation spells it."""
    allocated = set(d["attempt"]["nodes"])
    named = set(d["affected_nodes"]) | {c["node"] for c in d["candidates"] if c["node"]}
    for c in d["coverage"]:
        named |= set(c["nodes"])
    assert named <= allocated, named - allocated


@case("identity-root-files-upper-case", coverage={"syslog": "ok", "app": "ok"}, check=named_in_the_allocations_spelling)
def _(b: Path) -> None:
    rename(syslog(b, HOST), HOST.upper() + ".log")
    rename(app(b, HOST), HOST.upper() + ".log")


@case("identity-root-file-fqdn-trailing-dot", coverage={"syslog": "ok"}, check=named_in_the_allocations_spelling)
def _(b: Path) -> None:
    rename(syslog(b, HOST), f"{HOST}.eos.internal..log")


@case("identity-metric-labels-upper-case", coverage={"metrics": "ok"}, check=named_in_the_allocations_spelling)
def _(b: Path) -> None:
    prom(b).write_text(prom(b).read_text().replace('Hostname="gb-r12', 'Hostname="GB-R12'))


@case("identity-log-of-a-host-outside-the-allocation", check=all_of(not_blamed("gb-r12-n99")))
def _(b: Path) -> None:
    syslog(b, "gb-r12-n99").write_text(f"2026-11-20T11:00:00Z gb-r12-n99 kernel: {XID79}\n")


# ---- clocks: a host's clock off is named, corrected when firm, and never ordered at high confidence ----

STAMP_FORMS = [  # the worked example's stamp forms (zone-less, year-less ones take 2026)
    (re.compile(r"^(\w{3} +\d+ \d\d:\d\d:\d\d\.\d{6})"), "%b %d %H:%M:%S.%f"),
    (re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})"), "%Y-%m-%dT%H:%M:%S.%f"),
    (re.compile(r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\])"), "[%Y-%m-%d %H:%M:%S]"),
    (re.compile(r"(\[E\d{4} \d\d:\d\d:\d\d\.\d{6})"), "[E%m%d %H:%M:%S.%f"),
    (re.compile(r"^(E\d{4} \d\d:\d\d:\d\d\.\d{6})"), "E%m%d %H:%M:%S.%f"),
    (re.compile(r"^(\[\w{3} \d\d \d{4} \d\d:\d\d:\d\d\])"), "[%b %d %Y %H:%M:%S]"),
]


def clock_ahead(b: Path, host: str, seconds: float) -> None:
    """Every stamp of the host's logs moved by `seconds`: its clock is that far ahead."""

    def moved(m: re.Match, fmt: str) -> str:
        t = datetime.strptime(m.group(1), fmt)
        t = t.replace(year=2026) if "%Y" not in fmt else t
        return (t + timedelta(seconds=seconds)).strftime(fmt)

    for p in (b / "logs").glob(f"*/{host}.log"):
        lines = p.read_text().split("\n")
        for i, line in enumerate(lines):
            for rx, fmt in STAMP_FORMS:
                line = rx.sub(lambda m, f=fmt: moved(m, f), line, count=1)
            lines[i] = line
        p.write_text("\n".join(lines))


def clock_named(host: str) -> Callable[[dict], None]:
    """The host's clock is named in the coverage of its logs, and the verdict is not high."""

    def check(d: dict) -> None:
        for source in ("app", "syslog"):
            assert any(x.startswith(f"{host} ") for x in cov(d, source)["details"].get("clock_skew") or []), cov(
                d, source
            )
        assert d["confidence"] != "high", d["confidence"]

    return check


@case(
    "clock-root-host-90s-ahead",
    coverage={"syslog": "partial", "app": "partial"},
    check=clock_named(HOST),
    tags=("lie",),
)
def _(b: Path) -> None:
    clock_ahead(b, HOST, 90)


@case(
    "clock-healthy-host-10min-behind",
    coverage={"syslog": "partial", "app": "partial"},
    check=all_of(clock_named(OTHER), not_blamed(OTHER)),
    tags=("lie",),
)
def _(b: Path) -> None:
    clock_ahead(b, OTHER, -600)


# ---- the same host twice, lines out of order, zones mixed, a record cut short ----------------------


@case(
    "lie-root-host-logged-twice-under-two-spellings",
    coverage={"syslog": "ok"},
    check=named_in_the_allocations_spelling,
    tags=("lie",),
)
def _(b: Path) -> None:
    shutil.copy(syslog(b, HOST), b / "logs" / "syslog" / f"{HOST.upper()}.log")


@case("lie-healthy-host-lines-reordered", coverage={"syslog": "ok"}, check=not_blamed(OTHER), tags=("lie",))
def _(b: Path) -> None:
    lines = [x for x in syslog(b).read_text().split("\n") if x]
    syslog(b).write_text("\n".join(reversed(lines)) + "\n")


@case("lie-healthy-host-in-another-zone", coverage={"syslog": "ok"}, check=not_blamed(OTHER), tags=("lie",))
def _(b: Path) -> None:
    """The same instants written at +05:30: read as the same instants."""

    def zoned(m: re.Match) -> str:
        t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f") + timedelta(hours=5, minutes=30)
        return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+05:30"

    text = re.sub(r"^(\S+)\+00:00", zoned, syslog(b).read_text(), flags=re.M)
    syslog(b).write_text(text)


@case(
    "lie-healthy-host-last-record-cut-short",
    coverage={"syslog": ("ok", "partial")},
    check=not_blamed(OTHER),
    tags=("lie",),
)
def _(b: Path) -> None:
    append(syslog(b), "2026-11-20T11:00:00.0000")  # a record cut inside its stamp


# ---- metrics: one bad sample costs one sample ----------------------------------------------------------

XID_SERIES = 'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-0",Hostname="{host}"}}'


@case("prom-timestamp-int64-overflow", coverage={"metrics": "partial"}, check=assert_unparsed("metrics"))
def _(b: Path) -> None:
    append(prom(b), XID_SERIES.format(host=OTHER) + " 0 9999999999999999\n")


@case("prom-timestamp-negative-huge", coverage={"metrics": "partial"}, check=assert_unparsed("metrics"))
def _(b: Path) -> None:
    append(prom(b), XID_SERIES.format(host=OTHER) + " 0 -9999999999999999\n")


@case("prom-timestamp-beyond-int64", coverage={"metrics": "partial"}, check=assert_unparsed("metrics"))
def _(b: Path) -> None:
    append(prom(b), XID_SERIES.format(host=OTHER) + " 0 99999999999999999999999\n")


def non_finite_named(*series: str) -> Callable[[dict], None]:
    """The samples of NaN or +/-Inf are counted and their series named in metrics' coverage."""

    def check(d: dict) -> None:
        c = cov(d, "metrics")
        assert c["details"].get("non_finite_samples", 0) >= 1, c
        for name in series:
            assert any(name in x for x in c["details"]["non_finite_series"]), (name, c)

    return check


@case("prom-xid-gauge-plus-inf-every-host", coverage={"metrics": "partial"}, check=non_finite_named("XID_ERRORS"))
def _(b: Path) -> None:
    for i in range(1, 7):  # each series goes from 0 to +Inf: a transition the rule looks at
        append(prom(b), XID_SERIES.format(host=f"gb-r12-n0{i}") + " 0 1795172340000\n")
        append(prom(b), XID_SERIES.format(host=f"gb-r12-n0{i}") + " +Inf 1795172400000\n")


@case(
    "prom-nan-and-minus-inf-values",
    coverage={"metrics": "partial"},
    check=all_of(non_finite_named("XID_ERRORS", "ECC_DBE", "infiniband"), not_blamed(OTHER)),
)
def _(b: Path) -> None:
    for i, v in enumerate(("0", "NaN", "0", "-Inf", "0", "1e400", "0", "-1e400")):
        t = 1795172400000 + i * 1000
        append(prom(b), XID_SERIES.format(host=OTHER) + f" {v} {t}\n")
        append(prom(b), f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="0",Hostname="{OTHER}"}} {v} {t + 60000}\n')
        append(prom(b), f'node_infiniband_port_state_id{{device="mlx5_0",instance="{OTHER}:9100"}} {v} {t + 60000}\n')


def metrics_only(b: Path) -> None:
    """Only metrics and the scheduler's record: the logs gone, and the faulty host's series too."""
    shutil.rmtree(b / "logs")
    prom(b).write_text("".join(x for x in prom(b).read_text().splitlines(True) if f'"{HOST}"' not in x))


@case(
    "prom-metrics-only-root-on-non-finite-gauges",
    verdict=("unknown", "insufficient_evidence"),
    node=None,
    coverage={"metrics": "partial"},
    check=all_of(non_finite_named("XID_ERRORS", "ECC_DBE"), not_blamed(OTHER)),
    tags=("lie",),
)
def _(b: Path) -> None:
    metrics_only(b)
    for i, v in enumerate(("0", "+Inf", "NaN", "1e400", "-Inf")):
        t = 1795172340000 + i * 60000
        append(prom(b), XID_SERIES.format(host=OTHER) + f" {v} {t}\n")
        append(prom(b), f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{gpu="0",Hostname="{OTHER}"}} {v} {t}\n')


@case(
    "prom-metrics-only-root-beside-a-sample-stamped-out-of-range",
    node="gb-r12-n03",
    verdict=("hardware_failure", "gpu"),
    coverage={"metrics": "partial"},
    check=assert_unparsed("metrics"),
    tags=("lie",),
)
def _(b: Path) -> None:
    """The bad sample is dropped and counted; the root's transition in the same series stays."""
    metrics_only(b)
    series = XID_SERIES.format(host="gb-r12-n03")
    append(prom(b), f"{series} 0 1795176240000\n{series} 79 9999999999999999\n{series} 79 1795176300000\n")


@case("prom-label-named-twice", coverage={"metrics": "partial"}, check=assert_unparsed("metrics"))
def _(b: Path) -> None:
    append(prom(b), f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{OTHER}",gpu="0",gpu="1"}} 40 1795172400000\n')


@case("log-50k-prefilter-hits-one-host", coverage={"app": "ok"}, tags=("bound",))
def _(b: Path) -> None:
    """The scaled-down million pre-filter hits (all stored, staging spills past its memory bound)."""
    line = f"[rank1]:[2026-11-20 11:30:00] {OTHER}:3001:3101 [1] NCCL WARN NET/IB : Got async event : port active\n"
    with open(app(b), "a") as fh:
        fh.write(line * 50_000)


@case("prom-not-utf8-line", coverage={"metrics": "partial"}, check=assert_unparsed("metrics"))
def _(b: Path) -> None:
    append(prom(b), b'DCGM_FI_DEV_GPU_TEMP{Hostname="gb-r12-n01",x="\xff\xfe"} 40 1795172400000\n')


@case("prom-binary-file-beside-good-one", coverage={"metrics": "partial"})
def _(b: Path) -> None:
    (b / "metrics" / "core.prom").write_bytes(bytes(range(256)) * 64)


@case("prom-glob-characters-in-name", coverage={"metrics": ("ok", "partial")})
def _(b: Path) -> None:
    shutil.copy(prom(b), b / "metrics" / "export[1]*?.prom")


@case("prom-label-value-1mib-and-garbage-lines", coverage={"metrics": "partial"})
def _(b: Path) -> None:
    append(prom(b), f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{OTHER}",x="{"v" * (1 << 20)}"}} 40 1795172400000\n')
    append(prom(b), 'DCGM_FI_DEV_GPU_TEMP{Hostname="gb-r12-n01" 40 1795172400000\n{{{{\n}}} 1 2 3\n')


# ---- logs: files, names, content -----------------------------------------------------------------


@case("log-glob-characters-in-a-file-name", coverage={"syslog": ("ok", "partial")})
def _(b: Path) -> None:
    (b / "logs" / "syslog" / "gb-r12-n0[7]*?.log").write_text(f"Nov 20 11:00:00 x kernel: {XID79}\n")


@case("log-file-name-with-newline", coverage={"syslog": ("ok", "partial")}, check=no_control_characters)
def _(b: Path) -> None:
    (b / "logs" / "syslog" / "evil\nnode\r\x1b[31m.log").write_text("Nov 20 13:30:00 evil kernel: hello\n")


@case("log-file-name-not-utf8", coverage={"syslog": ("ok", "partial")}, check=no_control_characters)
def _(b: Path) -> None:
    with open(os.path.join(os.fsencode(b / "logs" / "syslog"), b"\xff\xfe-host.log"), "wb") as fh:
        fh.write(b"Nov 20 13:30:00 x kernel: hello\n")


@case("log-file-name-255-bytes", coverage={"app": ("ok", "partial")}, check=names_capped())
def _(b: Path) -> None:
    (b / "logs" / "app" / ("n" * 251 + ".log")).write_text("[rank0]: RuntimeError: boom\n")


@case("log-whitespace-only-everywhere", coverage={"app": "empty"}, words=("blank",))
def _(b: Path) -> None:
    for p in (b / "logs" / "app").iterdir():
        p.write_text(" \n\t\n\r\n   \n" * 100)


@case("log-whitespace-only-one-host", coverage={"syslog": "partial"}, words=("blank",))
def _(b: Path) -> None:
    syslog(b).write_text("\n" * 1000 + "   \n")


@case("log-all-outside-the-window", coverage={"app": "empty"}, words=("outside",))
def _(b: Path) -> None:
    for p in (b / "logs" / "app").iterdir():
        p.write_text("".join(f"2019-03-0{i % 9 + 1}T10:00:00Z [rank0]: step {i} ok\n" for i in range(50)))


@case("log-one-host-outside-the-window", coverage={"syslog": "partial"}, words=("outside",))
def _(b: Path) -> None:
    syslog(b).write_text("".join(f"2024-01-0{i % 9 + 1}T10:00:00Z {OTHER} kernel: tick {i}\n" for i in range(50)))


@case("log-empty-file-one-host", coverage={"syslog": "partial"})
def _(b: Path) -> None:
    syslog(b).write_bytes(b"")


@case("log-truncated-utf8-at-end", coverage={"syslog": "partial"})
def _(b: Path) -> None:
    append(syslog(b), "Nov 20 13:30:00 gb-r12-n01 kernel: caf\u00e9".encode()[:-1])


@case("log-cr-only-line-endings", coverage={"syslog": ("ok", "partial")})
def _(b: Path) -> None:
    syslog(b).write_bytes(syslog(b).read_bytes().replace(b"\n", b"\r"))


@case("log-sparse-8mib-nul-line", coverage={"syslog": ("partial", "ok")}, tags=("bound",))
def _(b: Path) -> None:
    """The scaled-down 1 GiB single NUL line (tests/bench/bounds.py has the 1 GiB one)."""
    with open(syslog(b), "ab") as fh:
        fh.truncate(fh.seek(0, 2) + (8 << 20))


@case(
    "log-3mib-line-then-evidence",
    coverage={"syslog": ("ok", "partial")},
    tags=("bound",),
    check=lambda d: d["root_cause"]["evidence"] and None,
)
def _(b: Path) -> None:
    """A line past the read cap is cut there (the rest counted); the lines after it keep their numbers."""
    log = syslog(b, HOST)
    lines = log.read_text().split("\n")
    lines.insert(3, "Nov 20 11:00:00.000000 gb-r12-n04 kernel: " + "x" * (3 << 20))
    log.write_text("\n".join(lines))


@case("log-200k-lines-one-host", coverage={"app": "ok"}, tags=("bound",))
def _(b: Path) -> None:
    """The scaled-down 10M-line log."""
    line = "[rank0]:[2026-11-20 11:30:00] gb-r12-n01:3000:3100 [0] NCCL INFO Channel 00/24 : 0 1 2 3 4 5 6 7\n"
    with open(app(b), "a") as fh:
        fh.write(line * 200_000)


@case("log-directory-named-like-a-log", coverage={"syslog": ("ok", "partial")})
def _(b: Path) -> None:
    (b / "logs" / "syslog" / "gb-r12-n07.log").mkdir()


@case("log-folder-is-a-file", coverage={"fabricmanager": ("unavailable", "error")}, verdict=None, node=None)
def _(b: Path) -> None:
    shutil.rmtree(b / "logs" / "fabricmanager")
    (b / "logs" / "fabricmanager").write_text("not a directory\n")


# ---- special files: named, never opened in a way that blocks -----------------------------------------


def fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


@case("special-fifo-in-log-folder", coverage={"syslog": ("partial", "ok")}, words=("FIFO",))
def _(b: Path) -> None:
    fifo(syslog(b, "gb-r12-n07"))


@case("special-fifo-as-a-hosts-log", coverage={"syslog": "partial"}, words=("FIFO",))
def _(b: Path) -> None:
    fifo(syslog(b))


@case("special-fifo-as-sacct-json", coverage={"sacct": "error"}, words=("FIFO",))
def _(b: Path) -> None:
    fifo(b / "scheduler" / "sacct.json")


@case("special-fifo-as-topology", coverage={"topology": "error"}, words=("FIFO",))
def _(b: Path) -> None:
    fifo(b / "topology.yaml")


@case("special-fifo-as-prom", coverage={"metrics": "partial"}, words=("FIFO",))
def _(b: Path) -> None:
    fifo(b / "metrics" / "live.prom")


@case("special-fifo-as-attempt-yaml", exit=2, words=("attempt.yaml", "FIFO"))
def _(b: Path) -> None:
    fifo(b / "attempt.yaml")


@case("special-socket-in-log-folder", coverage={"app": ("ok", "partial")}, words=("socket",))
def _(b: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    try:
        os.chdir(b / "logs" / "app")  # a socket path is limited to ~100 bytes: bind it relative
        s.bind("gb-r12-n09.log")
    finally:
        s.close()
        os.chdir(ROOT)


@case("special-char-device-as-a-hosts-log", coverage={"syslog": "partial"}, words=("device",), root_only=True)
def _(b: Path) -> None:
    syslog(b).unlink()
    os.mknod(syslog(b), 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers


@case("special-block-device-as-prom", coverage={"metrics": "partial"}, words=("device",), root_only=True)
def _(b: Path) -> None:
    os.mknod(b / "metrics" / "disk.prom", 0o600 | stat.S_IFBLK, os.makedev(7, 0))


# ---- links out of the bundle: refused, nothing of the target named -----------------------------------


@case(
    "link-syslog-folder-to-etc",
    coverage={"syslog": "error"},
    words=("outside the bundle",),
    check=no_names_from("/etc"),
    verdict=None,
    node=None,
)
def _(b: Path) -> None:
    shutil.rmtree(b / "logs" / "syslog")
    os.symlink("/etc", b / "logs" / "syslog")


@case("link-metrics-folder-to-etc", coverage={"metrics": "error"}, check=no_names_from("/etc"))
def _(b: Path) -> None:
    shutil.rmtree(b / "metrics")
    os.symlink("/etc", b / "metrics")


@case("link-scheduler-folder-to-etc", coverage={"sacct": "error"}, check=no_names_from("/etc"))
def _(b: Path) -> None:
    shutil.rmtree(b / "scheduler")
    os.symlink("/etc", b / "scheduler")


@case("link-sacct-to-etc-passwd", coverage={"sacct": "error"}, words=("outside the bundle",))
def _(b: Path) -> None:
    (b / "scheduler" / "sacct.json").unlink()
    os.symlink("/etc/passwd", b / "scheduler" / "sacct.json")


@case("link-topology-to-etc-passwd", coverage={"topology": "error"}, words=("outside the bundle",))
def _(b: Path) -> None:
    (b / "topology.yaml").unlink()
    os.symlink("/etc/passwd", b / "topology.yaml")


@case("link-logs-folder-to-root", coverage={"app": "error", "syslog": "error"}, verdict=None, node=None)
def _(b: Path) -> None:
    shutil.rmtree(b / "logs")
    os.symlink("/", b / "logs")


# ---- scheduler records: one bad record costs one record ---------------------------------------------


def _sacct(b: Path, change: Callable[[dict], Any]) -> None:
    p = b / "scheduler" / "sacct.json"
    doc = json.loads(p.read_text())
    change(doc)
    p.write_text(json.dumps(doc))


@case("sacct-step-time-year-huge", coverage={"sacct": "partial"}, check=assert_unparsed("sacct"))
def _(b: Path) -> None:
    _sacct(b, lambda d: d["jobs"][0]["steps"][0]["time"].update(start=10**20, end=99999999999999))


@case("sacct-step-of-wrong-type", coverage={"sacct": "partial"}, check=assert_unparsed("sacct"))
def _(b: Path) -> None:
    _sacct(b, lambda d: d["jobs"][0]["steps"].extend([1, "x", None, {"step": "nope", "nodes": 5}]))


@case("sacct-over-the-size-limit", coverage={"sacct": "error"}, words=("limit",), tags=("bound",))
def _(b: Path) -> None:
    p = b / "scheduler" / "sacct.json"
    p.write_text(p.read_text() + " " * (65 << 20))  # valid JSON, 65 MiB: refused unread


@case(
    "special-fifo-as-kueue-pods",
    base=KUEUE,
    verdict=HOST_OOM,
    node=None,
    coverage={"kueue": "partial"},
    words=("FIFO",),
)
def _(b: Path) -> None:
    fifo(b / "scheduler" / "pods.json")


@case("sacct-nested-100k-deep", coverage={"sacct": "error"})
def _(b: Path) -> None:
    (b / "scheduler" / "sacct.json").write_text("[" * 100_000 + "]" * 100_000)


@case("sacct-nan-and-huge-numbers", coverage={"sacct": ("ok", "partial")})
def _(b: Path) -> None:
    p = b / "scheduler" / "sacct.json"
    p.write_text(p.read_text().replace('"elapsed": 7987', '"elapsed": NaN, "x": 1e999, "y": ' + "9" * 5000))


@case(
    "kueue-condition-time-year-10000",
    base=KUEUE,
    verdict=HOST_OOM,
    node=None,
    coverage={"kueue": "partial"},
    check=assert_unparsed("kueue"),
)
def _(b: Path) -> None:
    p = b / "scheduler" / "workload.json"
    doc = json.loads(p.read_text())
    doc["status"]["conditions"].append(
        {"type": "Finished", "status": "True", "reason": "Failed", "lastTransitionTime": "9999-12-31T23:59:59-14:00"}
    )
    p.write_text(json.dumps(doc))


@case("kueue-items-of-wrong-type", base=KUEUE, verdict=HOST_OOM, node=None, coverage={"kueue": ("ok", "partial")})
def _(b: Path) -> None:
    p = b / "scheduler" / "events.json"
    doc = json.loads(p.read_text())
    doc["items"] += [{"involvedObject": "x", "lastTimestamp": 5}, {"metadata": [1]}]
    p.write_text(json.dumps(doc))


# ---- topology: bounded; a refused one adds nothing ---------------------------------------------------


@case("topology-alias-bomb-1m-links", coverage={"topology": "error"}, words=("links",), tags=("bound",))
def _(b: Path) -> None:
    """1,000 switches x the same 1,000-port mapping: 10^6 links from a 40 KB file."""
    ports = "".join(f"      {i}: h{i}\n" for i in range(1000))
    switches = "".join(f"  s{i}: *sw\n" for i in range(1, 1000))
    (b / "topology.yaml").write_text(f"switches:\n  s0: &sw\n    ports:\n{ports}{switches}")


@case("topology-201k-ports", coverage={"topology": "error"}, words=("200,000 links",), tags=("bound",))
def _(b: Path) -> None:
    """The scaled-down 1M-port topology: just past the bound, refused before it is built."""
    with open(b / "topology.yaml", "w") as fh:
        fh.write("switches:\n")
        for s in range(201):
            fh.write(f"  leaf-{s}:\n    ports:\n")
            fh.writelines(f"      {p}: h{s}-{p}\n" for p in range(1000))


@case("topology-over-the-size-limit", coverage={"topology": "error"}, words=("bytes",), tags=("bound",))
def _(b: Path) -> None:
    with open(b / "topology.yaml", "ab") as fh:
        fh.truncate(fh.seek(0, 2) + (64 << 20))  # sparse: 64 MiB of NULs after the switches


@case("topology-wrong-shapes", coverage={"topology": ("partial", "error")})
def _(b: Path) -> None:
    (b / "topology.yaml").write_text(
        "switches:\n  leaf-12:\n    ports:\n      17: [a, b]\n      18: {x: 1}\n      19: null\n"
        f'      20: {HOST}:mlx5_0\n      21: "evil\\nhost"\n  7: 8\n  spine: [1, 2]\n'
    )


@case("topology-recursive-alias", coverage={"topology": "error"})
def _(b: Path) -> None:
    (b / "topology.yaml").write_text("switches: &s\n  leaf: {ports: *s}\n")


# ---- attempt.yaml out of range: exit 2, one line ----------------------------------------------------


def _bad_scope(name: str, old: str, new: str, *words: str) -> None:
    CASES.append(
        Case(name=f"scope-{name}", build=lambda b: scope_with(b, old, new), exit=2, words=words, tags=("scope",))
    )


_bad_scope("start-zero", "start: 2026-11-20T10:00:00Z", "start: 0", "start")
_bad_scope("start-epoch-number", "start: 2026-11-20T10:00:00Z", "start: 1795168800", "start")
_bad_scope("end-year-10000-utc", "end: 2026-11-20T12:13:07Z", "end: 9999-12-31T23:59:59-14:00", "end")
_bad_scope("start-year-1", "start: 2026-11-20T10:00:00Z", "start: 0001-01-01T00:00:00Z", "start")
_bad_scope("start-true", "start: 2026-11-20T10:00:00Z", "start: true", "start")
_bad_scope("attempt-negative", "attempt: 0", "attempt: -1", "attempt")
_bad_scope("attempt-1e300", "attempt: 0", "attempt: 1e300", "attempt")
_bad_scope("gpus-per-node-huge", "gpus_per_node: 4", "gpus_per_node: 1000000000000", "gpus_per_node")
_bad_scope("timezone-path", "timezone: Europe/Berlin", "timezone: ../../../etc/passwd", "timezone")
_bad_scope("node-with-newline", "nodes: [", 'nodes: ["evil\\nnode", ', "nodes")
_bad_scope("node-empty-name", "nodes: [", 'nodes: ["", ', "nodes")
_bad_scope("node-10k-chars", "nodes: [", f"nodes: [{'n' * 10_000}, ", "nodes")
_bad_scope("cluster-with-escape", "cluster: eos", 'cluster: "eos\\e[2J"', "cluster")
_bad_scope("state-1mib", "state: FAILED", f"state: {'F' * (1 << 20)}", "state")
_bad_scope("exit-code-huge", 'exit_code: "1:0"', f'exit_code: "{"1" * 100_000}"', "exit_code")


@case("scope-70k-nodes", exit=2, words=("nodes", "65536"), tags=("scope", "bound"))
def _(b: Path) -> None:
    scope_with(b, "nodes: [", "nodes: [" + ", ".join(f"x{i}" for i in range(70_000)) + ", ")


@case("scope-attempt-yaml-too-large", exit=2, words=("attempt.yaml", "bytes"), tags=("scope", "bound"))
def _(b: Path) -> None:
    with open(b / "attempt.yaml", "ab") as fh:
        fh.write(b"# " + b"x" * (8 << 20) + b"\n")


@case("scope-2000-nodes", coverage={"syslog": "partial"}, tags=("bound",))
def _(b: Path) -> None:
    """The scaled-down 10,000-node attempt: 1,994 nodes with no log at all (no sacct.json: its
    allocation would win over attempt.yaml's)."""
    scope_with(b, "nodes: [", "nodes: [" + ", ".join(f"gb-r99-n{i:04d}" for i in range(1994)) + ", ")
    (b / "scheduler" / "sacct.json").unlink()


@case("scope-directory-as-attempt-yaml", exit=2, words=("attempt.yaml",), base=None)
def _(b: Path) -> None:
    (b / "attempt.yaml").mkdir()


@case("scope-attempt-yaml-not-utf8", exit=2, words=("attempt.yaml",), base=None)
def _(b: Path) -> None:
    (b / "attempt.yaml").write_bytes(GOOD_SCOPE.encode("utf-16"))


def build(dst: Path, cases: list[Case] | None = None) -> list[tuple[Case, Path]]:
    """Every case (or those given) as its own bundle under dst; returns (case, bundle) pairs."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for c in cases if cases is not None else CASES:
        if c.root_only and os.geteuid() != 0:
            continue
        b = dst / c.name
        if c.base is None:
            b.mkdir()
        else:
            shutil.copytree(c.base, b, symlinks=True, ignore=shutil.ignore_patterns("expected.json"))
        c.build(b)
        out.append((c, b))
    return out


if __name__ == "__main__":
    built = build(Path(sys.argv[1]))
    print(f"{len(built)} cases under {sys.argv[1]}")
