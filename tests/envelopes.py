"""Envelope invariance: a bundle whose application log lines a container runtime wrapped must be
diagnosed as the bare bundle is (terminal_state, sub_domain, affected nodes, root symptom, its
node, rank and time).

Each envelope writes a line as a real runtime or collector does, stamped with the time the bare
bundle gives the line: its own (read by the grammar itself), else the one it inherits (the nearest
earlier stamp of its rank, staging/sql/inherit_time.sql); a line the bare bundle cannot date takes
the next stamped line's after it (it was written before that one), the attempt's end after the
last. A root the bare bundle cannot date is not compared by its time (the runtime's stamp is news):

  cri             containerd / CRI-O:  2026-11-20T10:00:02.123456789Z stderr F <line>
  cri-partial     the same line split in two records, "P" then "F" (a runtime splits a long line)
  docker          Docker's json-file: {"log":"<line>\\n","stream":"stderr","time":"..."}
  docker-partial  the same line in two records, the first without its newline (Docker splits at 16 KiB)
  docker-go       the same as Go's encoder writes it: < > & as \\u003c \\u003e \\u0026 (and
                  what is not ASCII as \\uXXXX)
  kubectl         kubectl logs --timestamps: 2026-11-20T10:00:02.123456789Z <line>

    python -m tests.envelopes BUNDLE_DIR... [--envelopes cri docker ...]   (prints what changes)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import yaml

from workload_attribution.contracts.models import Diagnosis
from workload_attribution.staging.database import sql
from workload_attribution.staging.normalize import CONTEXT_LINES

# the application's output: the lines a container runtime would have wrapped
WRAPPED_SOURCES = ("app",)


def _stamp(t: datetime) -> str:
    """RFC 3339 with nanoseconds, as containerd and Docker write it."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _cri(line: str, t: str) -> list[str]:
    return [f"{t} stderr F {line}"]


def _cri_partial(line: str, t: str) -> list[str]:
    cut = len(line) // 2
    if cut == 0:
        return _cri(line, t)
    return [f"{t} stderr P {line[:cut]}", f"{t} stderr F {line[cut:]}"]


def _docker(line: str, t: str) -> list[str]:
    return [json.dumps({"log": line + "\n", "stream": "stderr", "time": t}, ensure_ascii=False, separators=(",", ":"))]


def _docker_partial(line: str, t: str) -> list[str]:
    cut = len(line) // 2
    if cut == 0:
        return _docker(line, t)
    first = json.dumps({"log": line[:cut], "stream": "stderr", "time": t}, ensure_ascii=False, separators=(",", ":"))
    return [first, *_docker(line[cut:], t)]


def _docker_go(line: str, t: str) -> list[str]:
    text = json.dumps({"log": line + "\n", "stream": "stderr", "time": t}, separators=(",", ":"))
    return [text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")]


def _kubectl(line: str, t: str) -> list[str]:
    return [f"{t} {line}"]


ENVELOPES: dict[str, Callable[[str, str], list[str]]] = {
    "cri": _cri,
    "cri-partial": _cri_partial,
    "docker": _docker,
    "docker-partial": _docker_partial,
    "docker-go": _docker_go,
    "kubectl": _kubectl,
}


def _parsed(lines: list[str], tz: str, ref: datetime) -> list[tuple[datetime | None, int | None]]:
    """Each line's (time, rank) as the grammar reads the bare line (naive UTC); no time: None."""
    con = duckdb.connect()
    try:
        con.execute(sql("log_time_macros.sql"))
        got = con.execute(
            "SELECT p['ts'], p['rank'] FROM (SELECT parse_log_line(l, $tz, $ref) AS p, i "
            "FROM (SELECT unnest($lines) AS l, generate_subscripts($lines, 1) AS i)) ORDER BY i",
            {"lines": lines, "tz": tz, "ref": ref.replace(tzinfo=None)},
        ).fetchall()
    finally:
        con.close()
    return [(t if t is not None and datetime(1970, 1, 2) <= t < datetime(2200, 1, 1) else None, r) for t, r in got]


def wrap_file(src: Path, dst: Path, envelope: str, tz: str, end: datetime) -> None:
    """Every line of a log file in the envelope, stamped as a runtime would have: with its own
    time; a line with none with the time the bare bundle gives it (the stamp of the nearest earlier
    line of its rank within CONTEXT_LINES: staging/sql/inherit_time.sql), else the next stamped
    line's after it (it was written before that one), the attempt's end after the last."""
    data = src.read_bytes()
    lines = [x.decode("utf-8", "replace") for x in data.removesuffix(b"\n").split(b"\n")] if data else []
    parsed = _parsed(lines, tz, end)
    times = [t for t, _ in parsed]
    for i, (t, rank) in enumerate(parsed):
        if t is None:
            earlier = parsed[max(0, i - CONTEXT_LINES) : i]
            times[i] = next((u for u, r in reversed(earlier) if u is not None and (rank is None or r == rank)), None)
    following = end.astimezone(timezone.utc).replace(tzinfo=None)
    for i in reversed(range(len(times))):
        following = parsed[i][0] or following
        times[i] = times[i] or following
    out: list[str] = []
    for line, t in zip(lines, times):
        out += ENVELOPES[envelope](line.rstrip("\r"), _stamp(t or following))
    dst.write_text("\n".join(out) + ("\n" if out else ""), encoding="utf-8")


def wrap_bundle(bundle: Path, out: Path, envelope: str) -> Path:
    """A copy of the bundle with its application logs in the envelope."""
    shutil.copytree(bundle, out)
    attempt = yaml.safe_load((bundle / "attempt.yaml").read_text())
    end = attempt["end"]
    end = end if isinstance(end, datetime) else datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    tz = attempt.get("timezone") or "UTC"
    for source in WRAPPED_SOURCES:
        for f in sorted((bundle / "logs" / source).glob("**/*")):
            if f.is_file() and f.suffix not in (".gz", ".zst", ".zstd"):
                wrap_file(f, out / f.relative_to(bundle), envelope, tz, end)
    return out


def has_app_logs(bundle: Path) -> bool:
    return any(f.is_file() for s in WRAPPED_SOURCES for f in (bundle / "logs" / s).glob("**/*"))


def verdict(d: Diagnosis) -> dict[str, Any]:
    """What must not change: the verdict and where its root is (node, rank, time)."""
    roots = [s for s in d.symptoms if s.role == "root"]
    first = roots[0] if roots else None
    seen = d.root_cause.first_seen if d.root_cause else None
    return {
        "terminal_state": d.terminal_state,
        "sub_domain": d.sub_domain,
        "affected_nodes": sorted(d.affected_nodes),
        "root": d.root_cause.symptom if d.root_cause else None,
        "root_node": d.root_cause.node if d.root_cause else None,
        "root_rank": first.rank if first else None,
        # to the second: a runtime's stamp carries a zone and digits the application's may not
        "root_time": seen.astimezone(timezone.utc).replace(microsecond=0) if seen else None,
    }


def changes(
    bundles: Iterable[Path], envelopes: Iterable[str], work: Path
) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(bundle, envelope, bare verdict, wrapped verdict) for every wrapping that changed it."""
    from tests.helpers import diagnose
    from workload_attribution.rules.pack import default_pack

    pack = default_pack()
    out = []
    for b in bundles:
        bare = verdict(diagnose(b, pack=pack))
        for env in envelopes:
            wrapped = wrap_bundle(b, work / f"{b.name}.{env}", env)
            got = verdict(diagnose(wrapped, pack=pack))
            if bare["root_time"] is None:  # the runtime's stamp is news the bare line did not carry
                got["root_time"] = None
            if got != bare:
                out.append((b.name, env, bare, got))
            shutil.rmtree(wrapped)
    return out


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="bundles, or folders of bundles")
    ap.add_argument("--envelopes", nargs="*", default=list(ENVELOPES), choices=list(ENVELOPES))
    args = ap.parse_args(argv)
    bundles = sorted(
        {
            p.parent
            for d in map(Path, args.dirs)
            for p in ([d / "attempt.yaml"] if (d / "attempt.yaml").is_file() else d.rglob("attempt.yaml"))
            if has_app_logs(p.parent)
        }
    )
    changed = []
    with tempfile.TemporaryDirectory() as tmp:
        for b in bundles:  # each bundle's changes printed as they are found
            for name, env, bare, got in changes([b], args.envelopes, Path(tmp)):
                changed.append(name)
                diff = {k: (bare[k], got[k]) for k in bare if bare[k] != got[k]}
                print(f"{name} [{env}]: {diff}", flush=True)
    n = len(bundles) * len(args.envelopes)
    print(f"{len(changed)} of {n} wrappings changed ({len(bundles)} bundles x {len(args.envelopes)} envelopes)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
