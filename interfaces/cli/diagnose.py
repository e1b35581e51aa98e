"""`attribution diagnose`: one or more attempts -> diagnoses (printed, and stored in the warehouse)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from workload_attribution.cli import common
from workload_attribution.cli.common import EXIT_NOT_STORED, EXIT_OK, BadInput

DESCRIPTION = """\
Diagnose attempts: bundle directories, a job on a configured cluster (--job), or an explicit
scope (--nodes --start --end). Each diagnosis is printed (a summary, or --json) and stored in
the warehouse.

How it runs: in this process, without Prefect, unless PREFECT_API_URL names a Prefect server
(then the same flow runs here and is recorded there, as a worker's run would be); --prefect
forces a Prefect flow run (an embedded server when no PREFECT_API_URL is set; slower to start),
--inline forbids one.

Several attempts: each is diagnosed whatever happened to the others, and the exit code is the
highest any of them had (below)."""


def add(sub: Any) -> None:
    d = common.command(
        sub, "diagnose", help="diagnose attempt bundle(s), a job or an explicit scope", description=DESCRIPTION
    )
    d.add_argument("bundles", nargs="*", metavar="BUNDLE", help="attempt bundle directory")
    d.add_argument("--job", metavar="JOBID", help="a Slurm job id / Kueue workload ([namespace/]name) on --cluster")
    d.add_argument("--cluster", metavar="NAME", help="configured cluster (default: the only one configured)")
    d.add_argument(
        "--nodes", metavar="H1,H2", help="explicit scope: these hosts (or a Slurm hostlist, gpu-[001-512]) ..."
    )
    d.add_argument("--start", metavar="TIME", help="... from this RFC 3339 time ...")
    d.add_argument("--end", metavar="TIME", help="... to this one")
    d.add_argument("--json", action="store_true", help="the diagnosis JSON (several attempts: one document per line)")
    d.add_argument("--out", metavar="DIR", help="also write DIR/<bundle-or-job>.json for each attempt")
    mode = d.add_mutually_exclusive_group()
    mode.add_argument("--inline", action="store_true", help="never use Prefect (the default without PREFECT_API_URL)")
    mode.add_argument("--prefect", action="store_true", help="run as a Prefect flow run (embedded server if none set)")
    mode.add_argument(
        "--remote",
        metavar="URL",
        help="send each bundle to an `attribution serve` at URL (POST /v1/diagnose) and print its answer",
    )
    d.add_argument("--warehouse", metavar="PATH", help="warehouse file or DuckLake URL (default from config)")
    d.add_argument("--no-warehouse", action="store_true", help="do not store the diagnosis")
    d.add_argument("--rules-dir", metavar="DIR", help="another rules pack (default: config, else the shipped one)")
    d.add_argument(
        "--retry-missing",
        action="store_true",
        help="collect only the sources the stored diagnosis says would settle it (would_settle), the rest "
        "from the evidence archive, and diagnose again",
    )
    d.set_defaults(func=run, says_started=True)  # common.started: before the first attempt


def summary(d: Any) -> str:
    lines = [
        f"{d.attempt.cluster}/{d.attempt.scheduler} job {d.attempt.job_id} attempt {d.attempt.attempt}: "
        f"{d.terminal_state} / {d.sub_domain}  (confidence {d.confidence})"
    ]
    if d.root_cause:
        rc = d.root_cause
        lines.append(f"  root cause : {rc.title}")
        lines.append(
            f"               node={rc.node or '-'} component={rc.component or '-'} "
            f"first_seen={rc.first_seen.isoformat() if rc.first_seen else '-'}"
        )
        ev = {e.id: e for e in d.evidence}
        for eid in rc.evidence[:3]:
            lines.append(f"               {ev[eid].ref}: {ev[eid].text[:160]}")
    lines.append(f"  affected   : {', '.join(d.affected_nodes) or 'none'}   action: {d.recommended_action}")
    for c in d.candidates:
        lines.append(f"  candidate  : {c.symptom} on {c.node} at {c.first_seen}")
    demoted = [s for s in d.symptoms if s.role == "cascade"]
    if demoted:
        lines.append(
            f"  cascade    : {sum(s.count for s in demoted)} line(s) in {len(demoted)} symptom group(s), e.g. "
            + ", ".join(sorted({s.symptom for s in demoted})[:5])
        )
    lines.append("  coverage   : " + "  ".join(f"{c.source}={c.status.value}" for c in d.coverage))
    lines += _history_lines(d) + _settle_lines(d) + _novel_lines(d)
    for note in d.notes:
        lines.append(f"  note       : {note}")
    lines.append(f"  explanation: {d.explanation}")
    lines.append(
        f"  rules {d.rules.version}: {len(d.rules.fired)} fired"
        + (f", {len(d.rules.failed)} FAILED: {', '.join(f['rule'] for f in d.rules.failed)}" if d.rules.failed else "")
    )
    # every line escaped as a whole: names from the file system and the logs (a node named by a file
    # name, a job id, a line) never reach the terminal raw, nor break the summary's lines
    return "\n".join(_printable(line) for line in lines)


def _history_lines(d: Any) -> list[str]:
    """Fleet memory: each blamed subject's roots and cascades in 7 / 30 days, the latest attempt."""
    if d.history is None:
        return []
    lines = []
    for i, h in enumerate(d.history.subjects):
        latest = h.attempts[0] if h.attempts else None
        last = (
            f", last {latest.end:%Y-%m-%d %H:%M} {latest.role} ({latest.cluster} job {latest.job_id})"
            if latest and latest.end
            else ""
        )
        lines.append(
            f"  {'history' if i == 0 else '':<11}: {h.subject} root {h.root_7d} in 7 d, {h.root_30d} in 30 d; "
            f"cascade {h.cascade_7d} / {h.cascade_30d}{last}"
        )
    if d.history.escalation is not None:
        e = d.history.escalation
        lines.append(f"  escalated  : {e.reason}")
    return lines


SETTLE_SHOWN = 3


def _settle_lines(d: Any) -> list[str]:
    """What would decide an undecided verdict: the first few (all of them in --json)."""
    lines = [f"  would settle: {m.reason}" for m in d.would_settle[:SETTLE_SHOWN]]
    more = len(d.would_settle) - SETTLE_SHOWN
    return lines + ([f"  would settle: ... and {more} more source(s) (--json: would_settle)"] if more > 0 else [])


NOVEL_SHOWN = 3


def _novel_lines(d: Any) -> list[str]:
    """A doubtful verdict's new log templates: the first few, each with its first line and why
    (all of them in --json: novel_templates, and what they were compared with: novelty)."""
    if d.novelty is None:
        return []
    lines = []
    for n in d.novel_templates[:NOVEL_SHOWN]:
        lines.append(f"  novel      : {n.level} {n.count}x {n.first}: {n.line[:140]}")
        lines.append(f"               why: {n.why}")
    more = d.novelty.novel - min(len(d.novel_templates), NOVEL_SHOWN)
    if more > 0:
        lines.append(f"  novel      : ... and {more} more template(s) (--json: novel_templates)")
    if not d.novel_templates:
        lines.append(f"  novel      : none found ({d.novelty.note or 'every template was known'})")
    return lines


def _printable(text: str) -> str:
    """Control characters from files and logs never reach the terminal raw."""
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in text)


def _when(flag: str, value: str) -> datetime:
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"--{flag}: {value!r} is not an RFC 3339 time") from None
    if t.tzinfo is None:
        raise BadInput(f"--{flag}: {value!r} has no time zone (add Z or +00:00)")
    return t


def targets(args: argparse.Namespace) -> list[Any]:
    from pydantic import ValidationError

    from workload_attribution.contracts.hostlist import expand_hostlist
    from workload_attribution.contracts.identity import Target, Window

    try:
        if args.job or args.nodes:
            if args.bundles:
                raise BadInput("give bundle directories or --job / --nodes, not both")
            if args.job and args.nodes:
                raise BadInput("give --job or --nodes, not both")
            if args.job:
                return [Target(cluster=args.cluster, job_id=args.job)]
            if not (args.start and args.end):
                raise BadInput("--nodes needs --start and --end")
            window = Window(
                nodes=expand_hostlist(args.nodes),
                start=_when("start", args.start),
                end=_when("end", args.end),
            )
            return [Target(cluster=args.cluster, window=window)]
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{'.'.join(str(p) for p in err['loc']) or 'scope'}: {err['msg']}") from None
    if not args.bundles:
        raise BadInput("nothing to diagnose: give bundle directories, --job JOBID or --nodes/--start/--end")
    for b in args.bundles:
        if not Path(b).is_dir():
            raise BadInput(f"{b}: no such bundle directory")
    return [Target(bundle=str(Path(b))) for b in args.bundles]


def run(args: argparse.Namespace) -> int:
    from workload_attribution.flows.pipeline import load_rules

    if args.no_warehouse and args.warehouse:
        raise BadInput("--warehouse and --no-warehouse contradict each other")
    if args.remote:
        from workload_attribution.cli import remote

        common.started()
        return remote.run(args)
    use_prefect = args.prefect or (bool(os.environ.get("PREFECT_API_URL")) and not args.inline)
    if args.retry_missing and (use_prefect or args.no_warehouse):
        raise BadInput("--retry-missing runs in this process (--inline) and needs the warehouse it reads")
    if not use_prefect:
        _stage_ahead()
    from workload_attribution.staging.prefilter import engine

    prefilter = engine()  # ATTRIBUTION_PREFILTER refused here, in one line, not in each source's scan
    if args.debug:
        common.say(f"pre-filter: {prefilter}")
    cfg = common.load_config(args, warehouse=args.warehouse, rules_dir=args.rules_dir)
    todo = targets(args)
    if args.out:
        common.writable_dir(args.out, "--out directory")
        try:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"--out directory {args.out}: {exc.strerror}") from None
    warehouse = None if args.no_warehouse else (cfg.warehouse or None)
    if warehouse and "://" not in warehouse:
        common.writable_dir(warehouse, "--warehouse")
    pack = load_rules(common.rules_dir(args, cfg))
    for broken in pack.broken:  # diagnosed without them; each diagnosis lists them as failed rules
        common.say(f"warning: rule {broken['rule']} {broken['error']}")
    cfg = cfg.model_copy(update={"warehouse": warehouse or ""})
    diagnose = _prefect_runner(args, cfg) if use_prefect else _inline_runner(cfg, pack, args.retry_missing)
    progress = common.Progress(args, force=len(todo) > 1)  # a batch says how each attempt went, tty or not
    common.started()  # imports, configuration, pack and runner ready
    status = EXIT_OK
    for i, target in enumerate(todo, 1):
        status = max(
            status, _diagnose_one(args, diagnose, target, f"[{i}/{len(todo)}]" if len(todo) > 1 else "", progress)
        )
    return status


def _diagnose_one(
    args: argparse.Namespace, diagnose: Callable[[Any], Any], target: Any, batch: str, progress: common.Progress
) -> int:
    """One target diagnosed, printed (and written to --out); its exit status. `batch`: "[i/n]" when
    there are several (each says how it went on stderr), else ""."""
    from workload_attribution.contracts.errors import NotStored

    started = time.monotonic()
    label = target.describe()
    if batch:
        progress(f"{batch} {label} ...", final=False)
    status = EXIT_OK
    try:
        d = diagnose(target)
    except NotStored as exc:  # computed, not stored: print it anyway, exit 3
        d = getattr(exc, "diagnosis", None)
        common.say(f"{label}: not stored: {common.first_line(exc)}")
        status = EXIT_NOT_STORED
        if d is None:
            return status
    except Exception as exc:
        code = common.exit_code(exc)  # 2 bad input, 5 a dependency down; a bug goes up
        if code == common.EXIT_BUG:
            raise
        common.say(f"{label}: {common.first_line(exc)}" if batch else common.first_line(exc))
        return code
    _warn_unknown_states(d, f"{label}: " if batch else "")
    if args.out:
        name = Path(target.bundle).resolve().name if target.bundle else d.attempt.job_id.replace("/", "_")
        (Path(args.out) / f"{name}.json").write_text(d.to_json())
    if args.json:
        print(d.model_dump_json() if batch else d.to_json(), flush=True)
    else:
        print(summary(d), flush=True)
    if batch:
        progress(
            f"{batch} {label}: {d.terminal_state}/{d.sub_domain} "
            f"affected={','.join(d.affected_nodes) or '-'} ({time.monotonic() - started:.1f}s)"
        )
    return status


def _warn_unknown_states(d: Any, prefix: str) -> None:
    """A state word no scheduler table holds is diagnosed, never refused: stderr says so as well as
    the diagnosis' note (a typo such as FAILD must not pass unseen)."""
    from workload_attribution.connectors.schedulers import UNKNOWN_STATE

    for note in d.notes:
        if note.startswith(UNKNOWN_STATE):
            common.say(f"{prefix}warning: {_printable(note)}")


def _stage_ahead() -> None:
    """The first attempt's staging database made, and the shipped pack's data read, on another
    thread while this one reads the configuration and the rules pack (staging/ahead.py)."""
    from workload_attribution.staging.ahead import stage_ahead

    stage_ahead(_read_data_ahead)


def _read_data_ahead(con: Any) -> None:
    from workload_attribution.rules.engine import read_data_ahead

    read_data_ahead(con)


def _inline_runner(cfg: Any, pack: Any, retry_missing: bool = False) -> Callable[[Any], Any]:
    from workload_attribution.flows.inline import attribute_inline
    from workload_attribution.flows.pipeline import resolve

    def diagnose(target: Any) -> Any:
        target, options = resolve(cfg, target, pack)
        options.retry_missing = retry_missing
        return attribute_inline(target, options)

    return diagnose


def prefect_env() -> None:
    """An embedded Prefect server (when no PREFECT_API_URL) under a private PREFECT_HOME, quiet, offline."""
    os.environ.setdefault(
        "PREFECT_HOME", os.path.join(os.path.expanduser("~"), ".cache", "workload-attribution", "prefect")
    )
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_TASKS_DEFAULT_NO_CACHE", "true")
    # the CLI says what went wrong in one line; Prefect's own tracebacks stay in its run record
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")


def _prefect_runner(args: argparse.Namespace, cfg: Any) -> Callable[[Any], Any]:
    from workload_attribution.cli.deploy import prefect_answers

    if os.environ.get("PREFECT_API_URL"):
        prefect_answers(os.environ["PREFECT_API_URL"])
    prefect_env()
    # the flow reads this process's configuration: the flags travel as the environment it reads
    os.environ["ATTRIBUTION_WAREHOUSE"] = cfg.warehouse or ""
    if cfg.rules_dir:
        os.environ["ATTRIBUTION_RULES_DIR"] = cfg.rules_dir
    progress = common.Progress(args)
    if not os.environ.get("PREFECT_API_URL"):
        progress("starting an embedded Prefect server (set PREFECT_API_URL to use yours) ...")
    from workload_attribution.contracts.models import Diagnosis
    from workload_attribution.flows.attempt import attribute_attempt

    def diagnose(target: Any) -> Any:
        if target.bundle:  # refuse a bad bundle here, in one line, before a flow run exists
            from workload_attribution.connectors.bundle import load_scope

            load_scope(Path(target.bundle))
        return Diagnosis.model_validate(attribute_attempt(target))

    return diagnose
