"""Scenario corpus: realistic attempt bundles for every failure class, each with its expected diagnosis.

Message bodies follow the real formats (NVIDIA driver XIDs, NVSwitch SXids, Fabric Manager, NCCL,
PyTorch, torchrun, the kernel, slurmstepd/slurmctld, Kueue/Kubernetes objects); everything around
them varies per bundle: host naming scheme, 2-64 hosts, 4 or 8 GPUs, syslog and application
timestamp forms, rank-prefix style, time zone, per-host clock skew, training noise and benign
events, CRLF endings, stray invalid bytes, truncated last lines, missing sources.

    python -m tests.scenarios.generator OUT_DIR [--per-class N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

ZONES = ["UTC", "Europe/Berlin", "America/Los_Angeles", "Asia/Tokyo", "America/New_York"]
SYSLOG_FORMS = ["rfc3339", "short_iso", "rfc3164", "short_precise", "dmesg_t"]
APP_TIME_FORMS = ["collector", "python", "glog_only", "nccl_bracket", "none"]
RANK_STYLES = ["rank", "default", "srun", "none"]
PCI_SETS = {
    4: ["0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"],
    8: ["0000:07:00", "0000:0f:00", "0000:47:00", "0000:4e:00", "0000:87:00", "0000:90:00", "0000:b7:00", "0000:bd:00"],
}
EXCEPTIONS = [
    ("ValueError", "sequence length {n} exceeds max_position_embeddings 8192"),
    ("KeyError", "'input_ids'"),
    ("AssertionError", "tensor shapes do not match: [{n}, 4096] vs [4096, {n}]"),
    ("FileNotFoundError", "[Errno 2] No such file or directory: '/data/shards/shard-{n:05d}.bin'"),
    ("TypeError", "forward() got an unexpected keyword argument 'attention_mask'"),
    ("RuntimeError", "Error(s) in loading state_dict for GPT: size mismatch for lm_head.weight"),
    ("ZeroDivisionError", "division by zero"),
]


def host_names(rng: random.Random, n: int) -> list[str]:
    scheme = rng.choice(
        [
            "node-{i:02d}",
            "gpu{i:04d}",
            "dgx-a100-{i:03d}",
            "hgx-r{r:02d}-n{j}",
            "gb200-t{r}-{j}",
            "trn-{i}",
            "nvl72-{r:02d}-c{j:02d}",
            "compute{i}",
        ]
    )
    base = rng.randint(1, 300)
    out = []
    for k in range(n):
        i = base + k
        out.append(scheme.format(i=i, r=i // 4, j=i % 4))
    return out


@dataclass
class Host:
    name: str
    addr: str
    skew: timedelta
    syslog_form: str
    crlf: bool


@dataclass
class Bundle:
    rng: random.Random
    cls: str
    hosts: list[Host]
    gpus: int
    start: datetime
    end: datetime
    tz: str
    scheduler: str = "slurm"
    app_time: str = "collector"
    rank_style: str = "rank"
    syslog: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    app: dict[str, list[tuple[datetime | None, int | None, str]]] = field(default_factory=dict)
    fm: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    ctl: list[tuple[datetime, str]] = field(default_factory=list)
    metrics: list[tuple[str, dict, list[tuple[datetime, float]]]] = field(default_factory=list)
    drop: set[str] = field(default_factory=set)
    state: str = "FAILED"
    exit_code: str = "1:0"
    expected: dict = field(default_factory=dict)
    kueue: dict = field(default_factory=dict)
    topology: dict | None = None
    metric_hosts_down: set[str] = field(default_factory=set)

    # --- helpers -------------------------------------------------------------------------------
    def rank(self, host_i: int, gpu: int) -> int:
        return host_i * self.gpus + gpu

    def pci(self, gpu: int) -> str:
        return PCI_SETS[self.gpus][gpu]

    def sys(self, host: Host, t: datetime, text: str) -> None:
        self.syslog.setdefault(host.name, []).append((t + host.skew, text))

    def out(self, host: Host, t: datetime | None, rank: int | None, text: str) -> None:
        self.app.setdefault(host.name, []).append(((t + host.skew) if t else None, rank, text))

    def traceback(self, host: Host, t: datetime, rank: int, frames: list[str], last: str) -> None:
        """A Python traceback: only the rank prefix, no timestamps (continuation lines)."""
        self.out(host, t, rank, "__TIMELESS__Traceback (most recent call last):")
        for f in frames:
            self.out(host, t, rank, "__TIMELESS__" + f)
        self.out(host, t, rank, "__TIMELESS__" + last)


# ---- rendering ------------------------------------------------------------------------------------


def _local(t: datetime, tz: str) -> datetime:
    return t.astimezone(ZoneInfo(tz)).replace(tzinfo=None)


def render_syslog(b: Bundle, host: Host, t: datetime, text: str) -> str:
    form = host.syslog_form
    loc = _local(t, b.tz)
    if form == "rfc3339":
        return f"{t.isoformat(timespec='microseconds')} {host.name} {text}"
    if form == "short_iso":
        off = t.astimezone(ZoneInfo(b.tz)).strftime("%z")
        return f"{loc.strftime('%Y-%m-%dT%H:%M:%S')}{off} {host.name} {text}"
    if form == "rfc3164":
        return f"{loc.strftime('%b')} {loc.day:2d} {loc.strftime('%H:%M:%S')} {host.name} {text}"
    if form == "short_precise":
        return f"{loc.strftime('%b')} {loc.day:2d} {loc.strftime('%H:%M:%S.%f')} {host.name} {text}"
    body = text.split(": ", 1)[1] if text.startswith("kernel: ") else text
    return f"[{loc.strftime('%a %b')} {loc.day:2d} {loc.strftime('%H:%M:%S %Y')}] {body}"


def rank_prefix(style: str, rank: int | None) -> str:
    if rank is None or style == "none":
        return ""
    return {"rank": f"[rank{rank}]:", "default": f"[default{rank % 8}]:", "srun": f"{rank}: "}[style]


def render_app(b: Bundle, t: datetime | None, rank: int | None, text: str) -> str:
    timeless = text.startswith("__TIMELESS__")
    text = text.removeprefix("__TIMELESS__")
    prefix = rank_prefix(b.rank_style, rank)
    glog = "{GLOG}" in text
    if glog and t is not None:
        loc = _local(t, b.tz)
        text = text.replace("{GLOG}", f"{loc.strftime('%m%d %H:%M:%S.%f')}123")
    if t is None or timeless or b.app_time in ("none", "glog_only"):
        line = prefix + text
    elif b.app_time == "collector":
        line = f"{t.strftime('%Y-%m-%dT%H:%M:%S.')}{t.microsecond // 1000:03d}Z {prefix}{text}"
    elif b.app_time == "python" and not glog:
        loc = _local(t, b.tz)
        line = f"{prefix}{loc.strftime('%Y-%m-%d %H:%M:%S')},{loc.microsecond // 1000:03d} {text}"
    elif b.app_time == "nccl_bracket" and not glog:
        loc = _local(t, b.tz)
        line = f"{prefix}[{loc.strftime('%Y-%m-%d %H:%M:%S')}] {text}"
    else:
        line = prefix + text
    if b.app_time == "collector" and timeless and t is not None:
        line = f"{t.strftime('%Y-%m-%dT%H:%M:%S.')}{t.microsecond // 1000:03d}Z {prefix}{text}"
    return line


def _write(path: Path, lines: list[str], crlf: bool, rng: random.Random, damage: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nl = "\r\n" if crlf else "\n"
    data = (nl.join(lines) + nl).encode()
    if damage and len(lines) > 4:
        # a stray invalid byte in a noise line, and a truncated last line
        pos = data.find(b"Starting") if b"Starting" in data else data.find(b"iteration")
        if pos > 0:
            data = data[:pos] + b"\xff\xfe" + data[pos:]
        if rng.random() < 0.5:
            data = data[: -max(1, rng.randint(1, 8))]
    path.write_bytes(data)


# ---- scenario construction ------------------------------------------------------------------------


def new_bundle(rng: random.Random, cls: str, n_hosts: int | None = None) -> Bundle:
    n = rng.choice([2, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16, 32, 64] if cls != "network_fabric" else [3, 4, 6, 8])
    n = n_hosts or n
    names = host_names(rng, n)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(
        days=rng.randint(0, 330), seconds=rng.randint(0, 86400)
    )
    end = start + timedelta(hours=rng.uniform(1.2, 5.0))
    max_skew = rng.choice([0, 0.5, 2, 5])
    hosts = [
        Host(
            name=h,
            addr=f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{10 + i}",
            skew=timedelta(seconds=rng.uniform(-max_skew, max_skew)),
            syslog_form=rng.choice(SYSLOG_FORMS),
            crlf=rng.random() < 0.15,
        )
        for i, h in enumerate(names)
    ]
    b = Bundle(
        rng=rng,
        cls=cls,
        hosts=hosts,
        gpus=rng.choice([4, 8]),
        start=start,
        end=end,
        tz=rng.choice(ZONES),
        app_time=rng.choice(APP_TIME_FORMS),
        rank_style=rng.choice(RANK_STYLES),
    )
    noise(b)
    return b


def noise(b: Bundle) -> None:
    rng = b.rng
    for hi, h in enumerate(b.hosts):
        for g in range(b.gpus):
            b.sys(
                h,
                b.start - timedelta(days=2, seconds=-g),
                f"kernel: NVRM: GPU at PCI:{b.pci(g)}: GPU-{rng.getrandbits(32):08x}-{g}",
            )
        t = b.start
        while t < b.end + timedelta(minutes=30):
            b.sys(
                h,
                t,
                rng.choice(
                    [
                        "systemd[1]: Starting Cleanup of Temporary Directories...",
                        f"chronyd[{rng.randint(100, 9999)}]: Selected source 10.0.0.1 (ntp.internal)",
                        f"sshd[{rng.randint(100, 99999)}]: Accepted publickey for slurm from 10.0.0.2 port {rng.randint(30000, 60000)} ssh2",
                        "kernel: perf: interrupt took too long (2510 > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
                        f"nvidia-persistenced[{rng.randint(100, 9999)}]: device {b.pci(0)}.0 - persistence mode enabled.",
                        "kernel: IPv6: ADDRCONF(NETDEV_CHANGE): eth1: link becomes ready",
                    ]
                ),
            )
            t += timedelta(seconds=rng.randint(120, 900))
        for g in range(b.gpus):
            r = b.rank(hi, g)
            b.out(
                h,
                b.start + timedelta(seconds=60 + rng.random() * 5),
                r,
                f"{h.name}:{rng.randint(1000, 99999)}:{rng.randint(1000, 99999)} [{g}] NCCL INFO Bootstrap : Using eth0:{h.addr}<0>",
            )
        if hi == 0:
            t, it = b.start + timedelta(minutes=2), rng.randint(1000, 50000)
            while t < b.end - timedelta(minutes=1):
                b.out(
                    h,
                    t,
                    0,
                    f"INFO iteration {it:8d}/500000 | lm loss: {rng.uniform(1.5, 2.5):.4f} | grad norm: {rng.uniform(0.2, 1.9):.3f}",
                )
                t += timedelta(seconds=rng.randint(20, 300))
                it += rng.randint(5, 40)
    # benign events that must never be blamed
    if b.rng.random() < 0.4:
        h = b.rng.choice(b.hosts)
        b.sys(
            h,
            b.start + timedelta(minutes=10),
            f"kernel: NVRM: Xid (PCI:{b.pci(1)}): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        )
    if b.rng.random() < 0.3:
        h = b.rng.choice(b.hosts)
        b.sys(h, b.start + timedelta(minutes=20), "kernel: mce: [Hardware Error]: Machine check events logged")


def fail_time(b: Bundle) -> datetime:
    return b.end - timedelta(seconds=b.rng.randint(700, 2200))


def collective_cascade(
    b: Bundle, t_fault: datetime, skip: set[tuple[int, int]] = frozenset(), timeout_ms: int | None = None
) -> datetime:
    """Every other rank's watchdog fires one collective timeout after the fault; torchrun aborts."""
    timeout_ms = timeout_ms or b.rng.choice([600000, 600000, 1800000])
    t_wd = t_fault + timedelta(milliseconds=timeout_ms) + timedelta(seconds=b.rng.uniform(0.2, 2))
    if t_wd > b.end - timedelta(seconds=30):
        shift = t_wd - (b.end - timedelta(seconds=30))
        b.end = b.end + shift + timedelta(seconds=60)
    seq = b.rng.randint(10000, 900000)
    op = b.rng.choice(["ALLREDUCE", "BROADCAST", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE"])
    for hi, h in enumerate(b.hosts):
        for g in range(b.gpus):
            if (hi, g) in skip:
                continue
            r = b.rank(hi, g)
            tt = t_wd + timedelta(milliseconds=b.rng.randint(0, 900))
            b.out(
                h,
                tt,
                r,
                f"[E{{GLOG}} ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=131072000, NumelOut=131072000, Timeout(ms)={timeout_ms}) "
                f"ran for {timeout_ms + b.rng.randint(5, 900)} milliseconds before timing out.",
            )
        b.out(
            h,
            t_wd + timedelta(seconds=4),
            None,
            f"E{{GLOG}} {b.rng.randint(10**14, 10**15)} torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
            f"local_rank: 0 (pid: {b.rng.randint(1000, 4000000)}) of binary: /usr/bin/python3",
        )
    return t_wd


def nccl_remote_cascade(b: Bundle, t_fault: datetime, failed_host: Host, skip_host: Host | None = None) -> None:
    """Other ranks see the failed rank's process exit: ncclRemoteError naming its address."""
    for hi, h in enumerate(b.hosts):
        if h is skip_host:
            continue
        for g in range(b.gpus):
            if b.rng.random() < 0.5:
                continue
            r = b.rank(hi, g)
            tt = t_fault + timedelta(seconds=b.rng.uniform(1.5, 6))
            b.traceback(
                h,
                tt,
                r,
                [
                    '  File "/workspace/train.py", line 388, in train_step',
                    "    torch.distributed.all_reduce(grad_buf, group=dp_group)",
                ],
                "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            )
            b.out(h, tt, r, "__TIMELESS__Last error:")
            b.out(
                h,
                tt,
                r,
                f"__TIMELESS__socketProgressOpt: Call to recv from {failed_host.addr}<{b.rng.randint(30000, 60000)}> failed : Connection reset by peer",
            )
        b.out(
            h,
            t_fault + timedelta(seconds=8),
            None,
            f"E{{GLOG}} {b.rng.randint(10**14, 10**15)} torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
            f"local_rank: 0 (pid: {b.rng.randint(1000, 4000000)}) of binary: /usr/bin/python3",
        )


def expect(
    b: Bundle, ts: str, sd: str, nodes: list[str] | None = None, family: str = "", components: list[str] | None = None
) -> None:
    b.expected = {
        "terminal_state": ts,
        "sub_domain": sd,
        "affected_nodes": sorted(nodes or []),
        "root_symptom_family": family,
        "notes": f"generated scenario {b.cls}",
    }
    if components is not None:
        b.expected["affected_components"] = components


def pick(b: Bundle) -> tuple[int, Host, int]:
    hi = b.rng.randrange(len(b.hosts))
    return hi, b.hosts[hi], b.rng.randrange(b.gpus)


def xid_line(b: Bundle, gpu: int, code: int, rest: str) -> str:
    return f"kernel: NVRM: Xid (PCI:{b.pci(gpu)}): {code}, {rest}"


# ---- classes ---------------------------------------------------------------------------------------


def c_completed(b: Bundle) -> None:
    b.state, b.exit_code = "COMPLETED", "0:0"
    b.out(b.hosts[0], b.end - timedelta(seconds=30), 0, "INFO training finished: saved final checkpoint")
    expect(b, "completed", "none")


def c_gpu(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    code = b.rng.choice([79, 79, 119, 120, 62, 143, 158, 46, 109])
    texts = {
        79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        119: f"pid={b.rng.randint(100, 9999)}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU{g} GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
        120: "pid='<unknown>', name=<unknown>, GSP Error: Task 1 raised error code 0x5 for reason 0x0",
        62: "pid='<unknown>', name=<unknown>, 00000000 00000000 00000000 00000000",
        143: "pid='<unknown>', name=<unknown>, GPU Initialization Failure",
        158: "pid='<unknown>', name=<unknown>, GPU Fatal Timeout",
        46: "pid='<unknown>', name=<unknown>, GPU stopped processing",
        109: f"pid={b.rng.randint(1000, 99999)}, name=python3, Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x3c046",
    }
    b.sys(h, t, xid_line(b, g, code, texts[code]))
    if code == 79:
        b.sys(h, t + timedelta(milliseconds=2), f"kernel: NVRM: GPU {b.pci(g)}.0: GPU has fallen off the bus.")
        b.sys(
            h,
            t + timedelta(milliseconds=300),
            xid_line(b, g, 154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
        )
        if b.rng.random() < 0.5:
            b.sys(
                h,
                t + timedelta(seconds=12),
                f"kernel: nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link {b.rng.randint(0, 63)} LTSSM Fault Up",
            )
        if b.rng.random() < 0.5:
            b.sys(
                h,
                t + timedelta(seconds=1),
                xid_line(b, g, 119, "pid=430, name=nv_queue, Timeout waiting for RPC from GSP!"),
            )
    r = b.rank(hi, g)
    b.traceback(
        h,
        t + timedelta(seconds=1),
        r,
        ['  File "/workspace/train.py", line 388, in train_step', "    loss.backward()"],
        "RuntimeError: CUDA error: unspecified launch failure",
    )
    collective_cascade(b, t, skip={(hi, g)})
    expect(b, "hardware_failure", "gpu", [h.name], f"xid_{code}")


def c_gpu_memory(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    r = b.rank(hi, g)
    variant = b.rng.choice(["48", "48", "95", "94", "64", "140", "metrics_only"])
    if variant == "48":
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                48,
                f"pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x{b.rng.getrandbits(36):x} partition 0, subpartition 1",
            ),
        )
        code = 48
    elif variant == "95":
        b.sys(
            h,
            t,
            xid_line(
                b, g, 95, f"pid={b.rng.randint(1000, 99999)}, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"
            ),
        )
        b.sys(
            h,
            t + timedelta(milliseconds=500),
            xid_line(b, g, 45, f"pid={b.rng.randint(1000, 99999)}, name=python3, Ch 00000008"),
        )
        code = 95
    elif variant == "94":
        b.sys(
            h,
            t,
            xid_line(
                b, g, 94, f"pid={b.rng.randint(1000, 99999)}, Contained: CE User Channel (0x9). RST: No, D-RST: No"
            ),
        )
        code = 94
    elif variant == "64":
        b.sys(
            h,
            t - timedelta(seconds=1),
            xid_line(b, g, 63, "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."),
        )
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                64,
                f"pid='<unknown>', name=<unknown>, Row Remapper Error: (0x{b.rng.getrandbits(40):016x}) - All reserved rows for bank are remapped",
            ),
        )
        code = 64
    elif variant == "140":
        b.sys(h, t, xid_line(b, g, 140, "pid='<unknown>', name=<unknown>, ECC Unrecovered Error"))
        code = 140
    else:
        b.drop.add("syslog")
        code = 48
        series = []
        tt = b.start
        while tt <= b.end:
            series.append((tt, 48.0 if tt >= t else 0.0))
            tt += timedelta(seconds=60)
        b.metrics.append(("DCGM_FI_DEV_XID_ERRORS", {"gpu": str(g), "Hostname": h.name, "UUID": f"GPU-{g}"}, series))
    b.traceback(
        h,
        t + timedelta(seconds=1),
        r,
        ['  File "/workspace/train.py", line 388, in train_step', "    loss.backward()"],
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    )
    collective_cascade(b, t, skip={(hi, g)})
    expect(b, "hardware_failure", "gpu_memory", [h.name], f"xid_{code}")


def c_nvlink(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    variant = b.rng.choice(["149v1", "149v2", "74", "145", "sxid", "fm"])
    if variant == "149v1":
        for k, link in enumerate(sorted(b.rng.sample(range(18), 2))):
            intr = (b.rng.choice([0b000010, 0b000100, 0b001010]) << 20) | (link << 13) | 0x1C6
            b.sys(
                h,
                t + timedelta(milliseconds=5 * k),
                xid_line(
                    b,
                    g,
                    149,
                    f"NETIR_LINK_EVT  Fatal   XC0 i0 Link {link:02d} (0x{intr:08x} 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
                ),
            )
        code = "xid_149"
    elif variant == "149v2":
        intr = (b.rng.choice([0b000010, 0b000100, 0b101010]) << 20) | 0x11
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                149,
                f"NETIR_LINK_EVT  Fatal   XC0 i0 Link {b.rng.randint(0, 17):02d} (0x{intr:08x} 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
            ),
        )
        code = "xid_149"
    elif variant == "74":
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                74,
                f"pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {b.rng.randint(0, 17)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            ),
        )
        if len(b.hosts) > 1 and b.rng.random() < 0.5:  # the peer GPU reports 74 because the link went down
            other = b.hosts[(hi + 1) % len(b.hosts)]
            b.sys(
                other,
                t + timedelta(seconds=b.rng.uniform(0.5, 3)),
                xid_line(
                    b,
                    g,
                    74,
                    "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x0, 0x0, 0x0, 0x20000, 0x0, 0x0, 0x0)",
                ),
            )
        code = "xid_74"
    elif variant == "145":
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                145,
                "RLW_REMAP Nonfatal XC1 i0 Link 10 (0x00000004 0x00000040 0x00000000 0x00000000 0x00000000 0x00000000)",
            ),
        )
        code = "xid_145"
    elif variant == "sxid":
        b.sys(
            h,
            t,
            f"kernel: nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link {b.rng.randint(0, 63)} sourcetrack timeout error (First)",
        )
        code = "sxid_fatal"
    else:
        loc = _local(t + h.skew, b.tz)
        b.fm.setdefault(h.name, []).append(
            (
                t,
                f"[{loc.strftime('%b %d %Y %H:%M:%S')}] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port {b.rng.randint(1, 63)}",
            )
        )
        code = "fabricmanager_fatal"
    if variant.startswith("149") or variant == "145":
        b.sys(
            h,
            t + timedelta(milliseconds=900),
            xid_line(b, g, 154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"),
        )
        b.sys(
            h,
            t + timedelta(seconds=1),
            xid_line(
                b,
                g,
                45,
                f"pid={b.rng.randint(1000, 99999)}, name=python3, Ch 00000008 caused by previous Xid {code[4:]}",
            ),
        )
    r = b.rank(hi, g)
    b.out(
        h, t + timedelta(seconds=2), r, f"{h.name}:1:2 [{g}] enqueue.cc:1556 NCCL WARN Cuda failure 999 'unknown error'"
    )
    collective_cascade(b, t, skip={(hi, g)})
    expect(b, "hardware_failure", "nvlink", [h.name], code)


def c_nic(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    b.sys(
        h,
        t,
        b.rng.choice(
            [
                "kernel: mlx5_core 0000:d2:00.0: poll_health:174: device's health compromised - reached miss count.",
                "kernel: mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource",
                "kernel: mlx5_core: INFO: synd 0x8: unrecoverable hardware error.",
            ]
        ),
    )
    collective_cascade(b, t)
    expect(b, "hardware_failure", "nic", [h.name], "nic_fatal")


def c_host(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    b.sys(
        h,
        t,
        b.rng.choice(
            [
                f"kernel: NMI watchdog: Watchdog detected hard LOCKUP on cpu {b.rng.randint(0, 127)}",
                f"kernel: mce: [Hardware Error]: CPU {b.rng.randint(0, 127)}: Machine Check Exception: 5 Bank 7: be00000000800400",
                "kernel: Kernel panic - not syncing: Fatal hardware error!",
            ]
        ),
    )
    # the host's logs stop there; slurmctld loses it
    b.syslog[h.name] = [(tt, x) for tt, x in b.syslog[h.name] if tt <= t + h.skew + timedelta(seconds=1)]
    b.app[h.name] = [(tt, r, x) for tt, r, x in b.app.get(h.name, []) if tt is None or tt <= t + h.skew]
    b.ctl.append((t + timedelta(seconds=300), f"error: Nodes {h.name} not responding, setting DOWN"))
    b.ctl.append((t + timedelta(seconds=300.4), f"Killing JobId={{JOB}} on failed node {h.name}"))
    b.state, b.exit_code = "NODE_FAIL", "0:0"
    nccl_remote_cascade(b, t + timedelta(seconds=60), h, skip_host=h)
    b.end = t + timedelta(seconds=305)
    expect(b, "hardware_failure", "host", [h.name], "host")


def c_network_link(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    variant = b.rng.choice(["kernel", "kernel", "no_syslog"])
    if variant == "kernel":
        b.sys(h, t, f"kernel: mlx5_core 0000:{b.rng.randint(16, 250):02x}:00.0 ib{b.rng.randint(0, 3)}: Link down")
    else:
        b.drop.add("syslog")
    series = []
    tt = b.start
    while tt <= b.end:
        series.append((tt, 1.0 if tt >= t else 0.0))
        tt += timedelta(seconds=60)
    b.metrics.append(
        ("node_infiniband_link_downed_total", {"device": "mlx5_0", "port": "1", "instance": f"{h.name}:9100"}, series)
    )
    peers = [x for x in range(len(b.hosts)) if x != hi]
    for pi in peers if len(peers) <= 3 else b.rng.sample(peers, 3):
        p = b.hosts[pi]
        r = b.rank(pi, 0)
        tt = t + timedelta(seconds=b.rng.uniform(15, 25))
        b.out(
            p,
            tt,
            r,
            f"{p.name}:1:2 [0] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got completion from peer {h.addr}<{b.rng.randint(30000, 60000)}> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2",
        )
        b.out(
            p,
            tt + timedelta(seconds=1),
            r,
            f"{p.name}:1:2 [0] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got completion from peer {h.addr}<{b.rng.randint(30000, 60000)}> with status=5 opcode=32656 len=32659 vendor err 249 (Recv) localGid fd00::1 remoteGidsfd00::2",
        )
    collective_cascade(b, t)
    expect(b, "infrastructure_failure", "network_link", [h.name], "ib_link_down")


def c_network_fabric(b: Bundle) -> None:
    t = fail_time(b)
    k = b.rng.randint(2, min(4, len(b.hosts)))
    down = b.rng.sample(range(len(b.hosts)), k)
    leaf = f"leaf-{b.rng.randint(1, 40):02d}"
    ports = {}
    for i, h in enumerate(b.hosts):
        ports[9 + i] = f"{h.name}:mlx5_0"
    b.topology = {"switches": {leaf: {"guid": "0x9c0591030090e000", "ports": ports}, "spine-01": {"ports": {33: leaf}}}}
    for j, hi in enumerate(down):
        h = b.hosts[hi]
        b.sys(h, t + timedelta(seconds=j * b.rng.uniform(0.1, 3)), "kernel: mlx5_core 0000:c5:00.0 ib0: Link down")
    collective_cascade(b, t)
    comps = [leaf] + sorted(f"{leaf}:{9 + hi}" for hi in down)
    expect(b, "infrastructure_failure", "network_fabric", [], "ib_link_down", components=sorted(set(comps)))


def c_storage(b: Bundle) -> None:
    t = fail_time(b)
    fs = b.rng.choice(["fs01.internal", "nfs-home", "storage-07.dc1"])
    for h in b.hosts:
        b.sys(
            h,
            t + timedelta(seconds=b.rng.uniform(0, 20)),
            b.rng.choice(
                [
                    f"kernel: nfs: server {fs} not responding, still trying",
                    "kernel: LustreError: 11-0: lfs-OST0003-osc-ffff8f1b: operation ost_write to node 10.0.0.9@o2ib failed: rc = -107",
                ]
            ),
        )
    h = b.hosts[0]
    b.traceback(
        h,
        t + timedelta(seconds=40),
        0,
        ['  File "/workspace/train.py", line 455, in save_checkpoint', "    torch.save(state, path)"],
        "OSError: [Errno 5] Input/output error",
    )
    collective_cascade(b, t + timedelta(seconds=40), skip={(0, 0)})
    expect(b, "infrastructure_failure", "storage", [], "storage")


def c_node_unreachable(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    b.syslog[h.name] = [(tt, x) for tt, x in b.syslog[h.name] if tt <= t + h.skew]
    b.app[h.name] = [(tt, r, x) for tt, r, x in b.app.get(h.name, []) if tt is None or tt <= t + h.skew]
    nccl_remote_cascade(b, t + timedelta(seconds=30), h, skip_host=h)
    b.ctl.append((t + timedelta(seconds=300), f"error: Nodes {h.name} not responding, setting DOWN"))
    b.ctl.append((t + timedelta(seconds=300.4), f"Killing JobId={{JOB}} on failed node {h.name}"))
    b.state, b.exit_code = "NODE_FAIL", "0:0"
    b.end = t + timedelta(seconds=305)
    expect(b, "infrastructure_failure", "node_unreachable", [h.name], "node_not_responding")


def c_user_code(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    exc, msg = b.rng.choice(EXCEPTIONS)
    b.traceback(
        h,
        t,
        b.rank(hi, g),
        [
            '  File "/workspace/train.py", line 402, in train_step',
            "    batch = next(loader)",
            '  File "/workspace/data.py", line 188, in __next__',
        ],
        f"{exc}: {msg.format(n=b.rng.randint(8193, 40000))}",
    )
    nccl_remote_cascade(b, t, h)
    expect(b, "application_failure", "user_code", [], "python_exception")


def c_gpu_oom(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    b.traceback(
        h,
        t,
        b.rank(hi, g),
        ['  File "/workspace/train.py", line 380, in train_step', "    logits = model(batch)"],
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {b.rng.uniform(1, 30):.2f} GiB. GPU {g} has a total capacity of 79.10 GiB of which 1.54 GiB is free.",
    )
    nccl_remote_cascade(b, t, h)
    expect(b, "application_failure", "gpu_oom", [], "cuda_oom")


def c_host_oom(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    variant = b.rng.choice(["slurm", "kernel", "kueue"])
    if variant == "slurm":
        b.out(
            h,
            t,
            None,
            "slurmstepd: error: Detected 1 oom_kill event in StepId={JOB}.0. Some of the step tasks have been OOM Killed.",
        )
        b.state = "OUT_OF_MEMORY"
        b.exit_code = "0:125"
    elif variant == "kernel":
        b.sys(
            h,
            t,
            f"kernel: Out of memory: Killed process {b.rng.randint(1000, 99999)} (python3) total-vm:812345678kB, anon-rss:512345678kB, file-rss:0kB",
        )
    else:
        b.scheduler = "kueue"
        b.kueue["oom_pod"] = hi
        b.kueue["finished_at"] = t + timedelta(seconds=4)
        b.sys(
            h,
            t,
            f"kernel: Memory cgroup out of memory: Killed process {b.rng.randint(1000, 99999)} (python3) total-vm:812345678kB",
        )
    nccl_remote_cascade(b, t + timedelta(seconds=1), h, skip_host=h)
    expect(b, "application_failure", "host_oom", [], "host_oom")


def c_numerical(b: Bundle) -> None:
    t = fail_time(b)
    h = b.hosts[0]
    b.out(
        h,
        t,
        0,
        b.rng.choice(
            [
                "INFO iteration   41234/500000 | lm loss: nan | grad norm: nan",
                "WARNING found inf in local grad norm; skipping step",
                "INFO iteration   41234/500000 | lm loss: 2.0133 | grad norm: inf",
            ]
        ),
    )
    b.traceback(
        h,
        t + timedelta(seconds=2),
        0,
        ['  File "/workspace/train.py", line 420, in train_step'],
        "RuntimeError: Rank 0, node x, device 0, iteration 41234: Unexpected result nan in bucket #0",
    )
    nccl_remote_cascade(b, t + timedelta(seconds=2), h, skip_host=h)
    expect(b, "application_failure", "numerical", [], "nan_or_inf")


def c_gpu_app_error(b: Bundle) -> None:
    hi, h, g = pick(b)
    t = fail_time(b)
    code = b.rng.choice([13, 31])
    pid = b.rng.randint(1000, 4000000)
    if code == 13:
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                13,
                f"pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
            ),
        )
    else:
        b.sys(
            h,
            t,
            xid_line(
                b,
                g,
                31,
                f"pid={pid}, name=pt_main_thread, Ch 00000007, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_6 faulted @ 0x7f5a_e7504000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            ),
        )
    b.traceback(
        h,
        t + timedelta(seconds=1),
        b.rank(hi, g),
        ['  File "/workspace/model.py", line 77, in forward'],
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    nccl_remote_cascade(b, t + timedelta(seconds=1), h)
    expect(b, "application_failure", "gpu_app_error", [], f"xid_{code}")


def c_time_limit(b: Bundle) -> None:
    t = b.end - timedelta(seconds=8)
    b.state, b.exit_code = "TIMEOUT", "0:0"
    for hi, h in enumerate(b.hosts):
        if hi == 0:
            loc = _local(t, b.tz)
            b.out(
                h,
                t,
                None,
                f"slurmstepd: error: *** JOB {{JOB}} ON {h.name} CANCELLED AT {loc.strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***",
            )
        b.out(
            h,
            t + timedelta(seconds=1),
            None,
            f"W{{GLOG}} {b.rng.randint(10**14, 10**15)} torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers",
        )
    expect(b, "scheduler_action", "time_limit", [], "slurm_time_limit")


def c_preemption(b: Bundle) -> None:
    t = b.end - timedelta(seconds=10)
    if b.rng.random() < 0.5:
        b.state, b.exit_code = "PREEMPTED", "0:15"
        loc = _local(t, b.tz)
        b.out(
            b.hosts[0],
            t,
            None,
            f"slurmstepd: error: *** JOB {{JOB}} ON {b.hosts[0].name} CANCELLED AT {loc.strftime('%Y-%m-%dT%H:%M:%S')} DUE TO PREEMPTION ***",
        )
    else:
        b.scheduler = "kueue"
        b.kueue["evicted"] = (
            "Preempted",
            "Preempted to accommodate a workload (UID: ff9741de, JobUID: eed1cd21) due to prioritization in the ClusterQueue; preemptor path: /cohort-a/cq-prod; preemptee path: /cohort-a/cq-gpu",
        )
        b.kueue["evicted_at"] = t
    for h in b.hosts:
        b.out(
            h,
            t + timedelta(seconds=1),
            None,
            f"W{{GLOG}} {b.rng.randint(10**14, 10**15)} torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers",
        )
    expect(b, "scheduler_action", "preemption", [], "preempted")


def c_cancelled(b: Bundle) -> None:
    t = b.end - timedelta(seconds=5)
    b.state, b.exit_code = "CANCELLED by 1001", "0:15"
    loc = _local(t, b.tz)
    b.out(
        b.hosts[0],
        t,
        None,
        f"slurmstepd: error: *** JOB {{JOB}} ON {b.hosts[0].name} CANCELLED AT {loc.strftime('%Y-%m-%dT%H:%M:%S')} ***",
    )
    expect(b, "scheduler_action", "cancelled", [], "cancelled")


def c_eviction(b: Bundle) -> None:
    t = b.end - timedelta(seconds=10)
    b.scheduler = "kueue"
    reason, msg = b.rng.choice(
        [
            ("PodsReadyTimeout", "Exceeded the PodsReady timeout llm-train/job"),
            ("AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "check-1"'),
            ("ClusterQueueStopped", "The ClusterQueue is stopped"),
            ("Deactivated", "The workload is deactivated"),
            ("InactiveWorkload", "The workload is deactivated"),
        ]
    )
    b.kueue["evicted"] = (reason, msg)
    b.kueue["evicted_at"] = t
    expect(b, "scheduler_action", "eviction", [], "kueue_evicted")


def c_hang(b: Bundle) -> None:
    t = fail_time(b)
    b.metrics.append(("up", {"instance": f"{b.hosts[0].name}:9100"}, [(b.start, 1.0), (b.end, 1.0)]))
    collective_cascade(b, t)
    expect(b, "unknown", "hang", [], "nccl_watchdog")


def c_insufficient(b: Bundle) -> None:
    t = fail_time(b)
    b.drop.update(b.rng.choice([{"syslog"}, {"syslog", "metrics"}, {"metrics"}]))
    collective_cascade(b, t)
    expect(b, "unknown", "insufficient_evidence", [], "nccl_watchdog")


def c_ambiguous(b: Bundle) -> None:
    if len(b.hosts) < 2:
        b.hosts.append(Host("extra-1", "10.9.9.9", timedelta(0), "rfc3339", False))
    i, j = b.rng.sample(range(len(b.hosts)), 2)
    t = fail_time(b)
    b.sys(b.hosts[i], t, xid_line(b, 0, 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."))
    b.sys(
        b.hosts[j],
        t + timedelta(seconds=b.rng.uniform(0.5, 4)),
        xid_line(
            b,
            1,
            48,
            "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x9433be72 partition 0, subpartition 1",
        ),
    )
    collective_cascade(b, t)
    expect(b, "hardware_failure", "ambiguous", [], "ambiguous")


CLASSES = {
    "completed": c_completed,
    "gpu": c_gpu,
    "gpu_memory": c_gpu_memory,
    "nvlink": c_nvlink,
    "nic": c_nic,
    "host": c_host,
    "network_link": c_network_link,
    "network_fabric": c_network_fabric,
    "storage": c_storage,
    "node_unreachable": c_node_unreachable,
    "user_code": c_user_code,
    "gpu_oom": c_gpu_oom,
    "host_oom": c_host_oom,
    "numerical": c_numerical,
    "gpu_app_error": c_gpu_app_error,
    "time_limit": c_time_limit,
    "preemption": c_preemption,
    "cancelled": c_cancelled,
    "eviction": c_eviction,
    "hang": c_hang,
    "insufficient_evidence": c_insufficient,
    "ambiguous": c_ambiguous,
}


# ---- writing ----------------------------------------------------------------------------------------


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_bundle(b: Bundle, path: Path, index: int) -> None:
    rng = b.rng
    job = (
        f"{rng.randint(100000, 9999999)}"
        if b.scheduler == "slurm"
        else f"pytorchjob-{b.cls.replace('_', '-')}-{index:04d}"
    )
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    nodes = [h.name for h in b.hosts]
    state = b.state
    exit_code = b.exit_code
    if b.scheduler == "kueue":
        state = "Evicted" if "evicted" in b.kueue else ("Finished" if b.state == "COMPLETED" else "Failed")
        exit_code = "137" if "oom_pod" in b.kueue else ("143" if "evicted" in b.kueue else "1")
    (path / "attempt.yaml").write_text(
        f"cluster: {rng.choice(['eos', 'selene', 'cw-iad1', 'lambda-dfw', 'kairos'])}\nscheduler: {b.scheduler}\n"
        f'job_id: "{job}"\nattempt: {rng.randint(0, 3)}\nname: {rng.choice(["llama3-70b-pretrain", "moe-8x22b", "vit-g14"])}\n'
        f"user: {rng.choice(['alice', 'bob', 'svc-train'])}\nnodes: [{', '.join(nodes)}]\ngpus_per_node: {b.gpus}\n"
        f'start: {_iso(b.start)}\nend: {_iso(b.end)}\nstate: {state}\nexit_code: "{exit_code}"\nreason: null\ntimezone: {b.tz}\n'
    )
    damaged = set(rng.sample(nodes, k=min(len(nodes), rng.randint(0, 2))))
    for h in b.hosts:
        entries = sorted(enumerate(b.app.get(h.name, [])), key=lambda e: (e[1][0] or b.start, e[0]))
        lines = [render_app(b, t, r, x).replace("{JOB}", job) for _, (t, r, x) in entries]
        _write(path / "logs" / "app" / f"{h.name}.log", lines, h.crlf, rng, h.name in damaged)
        if "syslog" not in b.drop:
            sl = sorted(b.syslog.get(h.name, []), key=lambda e: e[0])
            _write(
                path / "logs" / "syslog" / f"{h.name}.log",
                [render_syslog(b, h, t, x) for t, x in sl],
                h.crlf,
                rng,
                h.name in damaged,
            )
        if h.name in b.fm:
            _write(path / "logs" / "fabricmanager" / f"{h.name}.log", [x for _, x in b.fm[h.name]], False, rng, False)
    if b.ctl:
        _write(
            path / "logs" / "scheduler" / "slurmctld.log",
            [f"[{_local(t, b.tz).strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}] {x.replace('{JOB}', job)}" for t, x in b.ctl],
            False,
            rng,
            False,
        )
    (path / "scheduler").mkdir()
    if b.scheduler == "slurm":
        sacct = {
            "meta": {
                "plugin": {"type": "openapi/dbv0.0.38"},
                "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
            },
            "errors": [],
            "jobs": [
                {
                    "job_id": int(job),
                    "name": "train",
                    "nodes": ",".join(nodes),
                    "state": {"current": b.state.split()[0], "reason": "None"},
                    "exit_code": {"status": "SUCCESS", "return_code": 0},
                    "time": {"start": int(b.start.timestamp()), "end": int(b.end.timestamp())},
                    "steps": [
                        {
                            "step": {"job_id": int(job), "id": 0, "name": "python"},
                            "state": b.state.split()[0],
                            "exit_code": {"status": "SUCCESS", "return_code": 0},
                            "nodes": {"list": nodes, "count": len(nodes)},
                        }
                    ],
                }
            ],
        }
        if rng.random() < 0.9:
            (path / "scheduler" / "sacct.json").write_text(json.dumps(sacct, indent=1))
    else:
        write_kueue(b, path, job)
    if "metrics" not in b.drop:
        (path / "metrics").mkdir()
        with open(path / "metrics" / "range-export.prom", "w") as f:
            f.write("# TYPE up gauge\n")
            for h in b.hosts:
                for t in (b.start, b.start + (b.end - b.start) / 2, b.end):
                    f.write(
                        f'up{{instance="{h.name}:9100",job="node"}} {0 if h.name in b.metric_hosts_down else 1} {int(t.timestamp() * 1000)}\n'
                    )
            for name, labels, series in b.metrics:
                lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
                f.write(f"# TYPE {name} gauge\n")
                for t, v in series:
                    f.write(f"{name}{{{lab}}} {v:g} {int(t.timestamp() * 1000)}\n")
    topo = b.topology
    if topo is None and rng.random() < 0.5:
        topo = {
            "switches": {
                f"leaf-{k:02d}": {
                    "ports": {9 + i: f"{h.name}:mlx5_0" for i, h in enumerate(b.hosts[k * 8 : (k + 1) * 8])}
                }
                for k in range((len(b.hosts) + 7) // 8)
            }
        }
    if topo:
        import yaml

        (path / "topology.yaml").write_text(yaml.safe_dump(topo, sort_keys=False))
    (path / "expected.json").write_text(json.dumps(b.expected, indent=2))


def write_kueue(b: Bundle, path: Path, name: str) -> None:
    def cond(t, typ, status, reason, msg):
        return {"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": _iso(t)}

    conds = [
        cond(
            b.start - timedelta(seconds=40),
            "QuotaReserved",
            "True",
            "QuotaReserved",
            "Quota reserved in ClusterQueue cq-gpu",
        ),
        cond(b.start - timedelta(seconds=39), "Admitted", "True", "Admitted", "The workload is admitted"),
        cond(
            b.start + timedelta(seconds=50),
            "PodsReady",
            "True",
            "Started",
            "All pods reached readiness and the workload is running",
        ),
    ]
    events = []
    if "evicted" in b.kueue:
        reason, msg = b.kueue["evicted"]
        conds.append(cond(b.kueue["evicted_at"], "Evicted", "True", reason, msg))
        if reason == "Preempted":
            conds.append(cond(b.kueue["evicted_at"], "Preempted", "True", "InClusterQueue", msg))
        events.append(
            {
                "type": "Warning",
                "reason": reason,
                "message": msg,
                "lastTimestamp": _iso(b.kueue["evicted_at"]),
                "involvedObject": {"kind": "Workload", "name": name},
            }
        )
    else:
        ok = b.state == "COMPLETED"
        conds.append(
            cond(
                b.end,
                "Finished",
                "True",
                "Succeeded" if ok else "Failed",
                "Job finished successfully" if ok else "Job failed",
            )
        )
    (path / "scheduler" / "workload.json").write_text(
        json.dumps(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {"name": name, "namespace": "llm-train"},
                "status": {"conditions": conds},
            },
            indent=1,
        )
    )
    pods = []
    for i, h in enumerate(b.hosts):
        if b.kueue.get("oom_pod") == i:
            term = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": _iso(b.kueue["finished_at"])}
        elif "evicted" in b.kueue:
            term = {"reason": "Error", "exitCode": 143, "finishedAt": _iso(b.end)}
        else:
            term = {"reason": "Error", "exitCode": 1, "finishedAt": _iso(b.end)}
        pods.append(
            {
                "metadata": {"name": f"{name}-worker-{i}"},
                "spec": {"nodeName": h.name},
                "status": {
                    "phase": "Failed",
                    "containerStatuses": [{"name": "pytorch", "state": {"terminated": term}}],
                },
            }
        )
    (path / "scheduler" / "pods.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}, indent=1)
    )
    (path / "scheduler" / "events.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": events}, indent=1)
    )
    nodes = [
        {
            "metadata": {"name": h.name},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastTransitionTime": _iso(b.start - timedelta(days=3)),
                    }
                ]
            },
        }
        for h in b.hosts
    ]
    (path / "scheduler" / "nodes.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}, indent=1)
    )


def place_in_fleet(
    path: Path,
    b: Bundle,
    rng: random.Random,
    cluster: str,
    leaves: int,
    plant_port: str | None,
    plant_classes: tuple[str, ...],
) -> None:
    """Fleet mode: one cluster, hosts cabled to random leaf ports; in the planted classes the host
    the diagnosis should blame sits under `plant_port` (a bad port or cable: whichever host is
    cabled there over time keeps failing)."""
    text = (path / "attempt.yaml").read_text()
    (path / "attempt.yaml").write_text(re.sub(r"^cluster: .*$", f"cluster: {cluster}", text, count=1, flags=re.M))
    if b.cls == "network_fabric":  # its topology is part of its expectation
        return
    blamed = set(b.expected.get("affected_nodes") or [])
    taken = {plant_port} if plant_port else set()
    switches: dict[str, dict[int, str]] = {}
    for h in b.hosts:
        if plant_port and b.cls in plant_classes and h.name in blamed:
            leaf, port = plant_port.split(":")
        else:
            while True:
                leaf, port = f"leaf-{rng.randint(1, leaves):02d}", str(rng.randint(1, 32))
                if f"{leaf}:{port}" not in taken:
                    break
        taken.add(f"{leaf}:{port}")
        switches.setdefault(leaf, {})[int(port)] = f"{h.name}:mlx5_0"
    import yaml

    (path / "topology.yaml").write_text(
        yaml.safe_dump({"switches": {k: {"ports": v} for k, v in sorted(switches.items())}}, sort_keys=False)
    )


def generate(
    out: Path,
    per_class: int = 10,
    seed: int = 7,
    classes: list[str] | None = None,
    fleet_leaves: int = 0,
    plant_port: str | None = None,
    plant_classes: tuple[str, ...] = ("network_link",),
    plant_extra: int = 0,
) -> list[Path]:
    """`per_class` bundles of each class. With `fleet_leaves`, every bundle belongs to one cluster
    ("fleet") cabled to that many leaf switches, and `plant_extra` more bundles of each planted
    class put their blamed host under `plant_port`."""
    out = Path(out)
    paths = []
    for cls in classes or CLASSES:
        count = per_class + (plant_extra if fleet_leaves and cls in plant_classes else 0)
        for k in range(count):
            rng = random.Random(f"{seed}:{cls}:{k}")
            b = new_bundle(rng, cls)
            CLASSES[cls](b)
            p = out / cls / f"{cls}-{k:03d}"
            write_bundle(b, p, k)
            if fleet_leaves:
                place_in_fleet(
                    p, b, random.Random(f"{seed}:fleet:{cls}:{k}"), "fleet", fleet_leaves, plant_port, plant_classes
                )
            paths.append(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--per-class", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--classes", nargs="*")
    ap.add_argument("--fleet-leaves", type=int, default=0, help="one cluster 'fleet' cabled to this many leaf switches")
    ap.add_argument(
        "--plant-port", metavar="LEAF:PORT", help="fleet mode: the bad port the network_link roots sit under"
    )
    ap.add_argument(
        "--plant-extra", type=int, default=0, help="fleet mode: extra network_link bundles under the bad port"
    )
    a = ap.parse_args()
    paths = generate(
        Path(a.out), a.per_class, a.seed, a.classes, a.fleet_leaves, a.plant_port, plant_extra=a.plant_extra
    )
    print(f"wrote {len(paths)} bundles under {a.out}")


if __name__ == "__main__":
    main()
