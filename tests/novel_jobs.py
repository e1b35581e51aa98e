"""Jobs for the novelty tests and bench: one job's good attempt and its doubtful attempts, each with
one message planted that no catalog row, rule or concept knows, built from the scenario generator.

The attempts of a job share what a cluster and a job fix (time zone, the application's time stamp
form and rank labels, the hosts' syslog forms); hosts, noise, faults and times vary per attempt
as the generator makes them. The good attempt ends a day before the first doubtful one starts.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from tests.scenarios.generator import APP_TIME_FORMS, CLASSES, Bundle, new_bundle, write_bundle

# The application's time stamp forms: "none" and "glog_only" leave the planted line unstamped
# (templates_of orders it by the earliest stamp after it in its file).
FORMS = tuple(APP_TIME_FORMS)
PLANTED_WORD = "zorblat"


def planted_text(rng: random.Random) -> str:
    """A message nothing in the rules pack knows, its numbers different in every attempt."""
    return (
        f"{PLANTED_WORD}: tessellator queue {rng.randint(0, 63)} wedged on lane {rng.randint(0, 15)}, "
        f"handshake failed (code 0x{rng.randint(16, 4095):x}) after {rng.randint(10, 9999)} ms"
    )


@dataclass
class Job:
    good: Path
    doubtful: list[Path]
    cluster: str
    job_id: str


def _shift(b: Bundle, delta: timedelta) -> None:
    """Every time of a bundle moved by `delta` (the good attempt, placed before the others)."""
    b.start, b.end = b.start + delta, b.end + delta
    b.syslog = {h: [(t + delta, x) for t, x in v] for h, v in b.syslog.items()}
    b.app = {h: [((t + delta) if t else None, r, x) for t, r, x in v] for h, v in b.app.items()}
    b.fm = {h: [(t + delta, x) for t, x in v] for h, v in b.fm.items()}
    b.ctl = [(t + delta, x) for t, x in b.ctl]


def _same_job(path: Path, cluster: str, job_id: str, attempt: int) -> None:
    """attempt.yaml (and the scheduler's record) renamed to the job's cluster, id and attempt."""
    spec = path / "attempt.yaml"
    text = spec.read_text()
    old = re.search(r'^job_id: "(.*)"$', text, re.M).group(1)  # type: ignore[union-attr]
    text = re.sub(r"^cluster: .*$", f"cluster: {cluster}", text, count=1, flags=re.M)
    text = re.sub(r"^attempt: .*$", f"attempt: {attempt}", text, count=1, flags=re.M)
    text = re.sub(r"^name: .*$", "name: novelty-job", text, count=1, flags=re.M)
    spec.write_text(text.replace(f'job_id: "{old}"', f'job_id: "{job_id}"'))
    for f in sorted((path / "scheduler").glob("*.json")):
        f.write_text(f.read_text().replace(old, job_id))


def make_job(out: Path, seed: int, classes: list[str], app_time: str | None = None, hosts: int | None = None) -> Job:
    """A job: its good attempt, then one doubtful attempt per class in `classes`, each with one
    planted message on a random host's application log at a random time before its failure."""
    rng = random.Random(f"novel:{seed}")
    good = new_bundle(random.Random(f"novel:{seed}:good"), "completed", n_hosts=hosts)
    good.app_time = app_time or rng.choice(FORMS)
    CLASSES["completed"](good)
    bundles = []
    for k, cls in enumerate(classes):
        b = new_bundle(random.Random(f"novel:{seed}:{cls}:{k}"), cls, n_hosts=hosts)
        b.tz, b.app_time, b.rank_style = good.tz, good.app_time, good.rank_style
        for i, h in enumerate(b.hosts):
            h.syslog_form = good.hosts[i % len(good.hosts)].syslog_form
        # before the failure: the generator's faults come 700 s or more before the (original) end
        latest = max(b.end - b.start - timedelta(minutes=40), timedelta(minutes=4))
        when = b.start + timedelta(seconds=rng.uniform(180, latest.total_seconds()))
        hi = rng.randrange(len(b.hosts))
        b.out(b.hosts[hi], when, hi * b.gpus, planted_text(rng))
        CLASSES[cls](b)
        bundles.append(b)
    first: datetime = min(b.start for b in bundles)
    _shift(good, first - timedelta(days=1) - good.end)
    cluster, job_id = f"novel{seed}", str(700000 + seed)
    good_path = out / f"job{seed}" / "good"
    write_bundle(good, good_path, 0)
    _same_job(good_path, cluster, job_id, 0)
    paths = []
    for k, b in enumerate(bundles, 1):
        p = out / f"job{seed}" / f"attempt-{k:02d}-{b.cls}"
        write_bundle(b, p, k)
        _same_job(p, cluster, job_id, k)
        paths.append(p)
    return Job(good_path, paths, cluster, job_id)
