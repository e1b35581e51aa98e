"""A fleet for the `rules suggest` tests: attempts that ended well, and insufficient_evidence
attempts each with one of five messages no catalog row, rule or concept knows (their numbers, hex,
paths and ids different in every attempt), built from the scenario generator. Every attempt is a
job of its own in cluster `fleet`, ended in the last days (inside `--since 30d`)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tests.novel_jobs import _shift
from tests.scenarios.generator import CLASSES, new_bundle, write_bundle


def _m0(r: random.Random) -> str:
    queue, lane, ms = r.randint(0, 63), r.randint(0, 15), r.randint(10, 9999)
    return f"Error in zorblat tessellator: queue {queue} wedged on lane {lane} after {ms} ms"


def _m1(r: random.Random) -> str:
    relay, code, drift = r.randint(0, 99), r.randint(16, 4095), r.uniform(0, 1)
    return f"fluxgate relay {relay} reported Error 0x{code:x}: phase drift beyond {drift:.2f}"


def _m2(r: random.Random) -> str:
    shard, part = r.randint(0, 9), r.randint(0, 999)
    return f"Error: quorpex shard {shard} checksum mismatch on /data/shard-{r.randint(0, 99)}/part-{part}.bin"


def _m3(r: random.Random) -> str:
    return f"Error syncing wibblecache generation {r.randint(1, 99999)} on stripe {r.randint(0, 7)}"


def _m4(r: random.Random) -> str:
    uuid = "-".join(f"{r.getrandbits(n * 4):0{n}x}" for n in (8, 4, 4, 4, 12))
    return f"Error condition in vantablack spooler {r.randint(0, 9)}: token {uuid} refused"


MESSAGES = (_m0, _m1, _m2, _m3, _m4)
WORDS = ("zorblat", "fluxgate", "quorpex", "wibblecache", "vantablack")  # what tells each message


@dataclass
class Fleet:
    good: list[Path] = field(default_factory=list)
    doubtful: list[tuple[Path, int]] = field(default_factory=list)  # each with its message's index


def make_fleet(out: Path, per_message: tuple[int, ...], good: int = 2, hosts: int = 2, seed: int = 0) -> Fleet:
    """`good` completed attempts, then per_message[i] insufficient_evidence attempts with message i
    (interleaved), each on a random host's application log shortly before the ranks' watchdogs fire
    (inside the look-back a root is looked for in)."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    fleet = Fleet()
    left = list(per_message)
    order: list[int] = []
    while any(left):
        for i, n in enumerate(left):
            if n:
                order.append(i)
                left[i] -= 1
    plan: list[tuple[str, int | None]] = [("completed", None)] * good + [("insufficient_evidence", i) for i in order]
    for k, (cls, message) in enumerate(plan):
        rng = random.Random(f"suggest:{seed}:{k}")
        b = new_bundle(rng, cls, n_hosts=hosts)
        CLASSES[cls](b)
        if message is not None:
            watchdog = min(t for v in b.app.values() for t, _, x in v if t and "Watchdog caught" in x)
            hi = rng.randrange(len(b.hosts))
            when = watchdog - b.hosts[hi].skew - timedelta(seconds=rng.uniform(20, 90))
            b.out(b.hosts[hi], when, hi * b.gpus, MESSAGES[message](rng))
        # ended in the last days, the good attempts first
        _shift(b, now - timedelta(days=3, minutes=-7 * k) - b.end)
        path = out / f"{k:03d}-{cls}"
        write_bundle(b, path, k)
        spec = path / "attempt.yaml"
        text = re.sub(r"^cluster: .*$", "cluster: fleet", spec.read_text(), count=1, flags=re.M)
        old = re.search(r'^job_id: "(.*)"$', text, re.M).group(1)  # type: ignore[union-attr]
        spec.write_text(text.replace(f'job_id: "{old}"', f'job_id: "{900000 + k}"'))
        for f in sorted((path / "scheduler").glob("*.json")):
            f.write_text(f.read_text().replace(old, str(900000 + k)))
        if message is None:
            fleet.good.append(path)
        else:
            fleet.doubtful.append((path, message))
    return fleet
