"""`attribution`: diagnose attempts, manage the rules pack.

Exit codes: 0 diagnosed / ok, 2 bad input (one-line reason on stderr), 1 internal error.
Prefect is imported only when a command runs the Prefect flow (not for --inline or rules).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    pass


def _prefect_env() -> None:
    """Embedded default: an ephemeral Prefect server under a private PREFECT_HOME, quiet and offline."""
    os.environ.setdefault("PREFECT_HOME", os.path.join(os.path.expanduser("~"), ".cache", "workload-attribution", "prefect"))
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_TASKS_DEFAULT_NO_CACHE", "true")


def _summary(d) -> str:
    lines = [f"{d.attempt.cluster}/{d.attempt.scheduler} job {d.attempt.job_id} attempt {d.attempt.attempt}: "
             f"{d.terminal_state} / {d.sub_domain}  (confidence {d.confidence})"]
    if d.root_cause:
        rc = d.root_cause
        lines.append(f"  root cause : {rc.title}")
        lines.append(f"               node={rc.node or '-'} component={rc.component or '-'} "
                     f"first_seen={rc.first_seen.isoformat() if rc.first_seen else '-'}")
        ev = {e.id: e for e in d.evidence}
        for eid in rc.evidence[:3]:
            lines.append(f"               {ev[eid].ref}: {ev[eid].text[:160]}")
    lines.append(f"  affected   : {', '.join(d.affected_nodes) or 'none'}   action: {d.recommended_action}")
    for c in d.candidates:
        lines.append(f"  candidate  : {c.symptom} on {c.node} at {c.first_seen}")
    demoted = [s for s in d.symptoms if s.role == "cascade"]
    if demoted:
        lines.append(f"  cascade    : {sum(s.count for s in demoted)} line(s) in {len(demoted)} symptom group(s), e.g. "
                     + ", ".join(sorted({s.symptom for s in demoted})[:5]))
    lines.append("  coverage   : " + "  ".join(f"{c.source}={c.status.value}" for c in d.coverage))
    lines.append(f"  explanation: {d.explanation}")
    lines.append(f"  rules {d.rules.version}: {len(d.rules.fired)} fired"
                 + (f", {len(d.rules.failed)} FAILED: {', '.join(f['rule'] for f in d.rules.failed)}" if d.rules.failed else ""))
    return "\n".join(lines)


def cmd_diagnose(args) -> int:
    from attribution.config import load_config
    from connectors.bundle import BundleError
    from rules.engine import Settings
    from rules.pack import RuleFileError, default_pack, load_pack

    try:
        cfg = load_config(args.config, warehouse=args.warehouse, rules_dir=args.rules_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise BadInput(str(exc).splitlines()[0]) from None
    warehouse = None if args.no_warehouse else cfg.warehouse
    try:
        pack = load_pack(cfg.rules_dir, skip_broken=True) if cfg.rules_dir else default_pack()
    except RuleFileError as exc:
        raise BadInput(str(exc)) from None
    for broken in pack.broken:   # diagnosed without them; each diagnosis lists them as failed rules
        print(f"attribution: warning: rule {broken['rule']} {broken['error']}", file=sys.stderr)
    settings = Settings(**cfg.rules.model_dump())
    live_args = dict(job_id=args.job, nodes=None, start=None, end=None)
    if args.job or args.nodes:
        if args.bundles:
            raise BadInput("give bundle directories or --job / --nodes, not both")
        if args.nodes:
            if args.job or not (args.start and args.end):
                raise BadInput("--nodes needs --start and --end (and no --job)")
            try:
                from datetime import datetime
                live_args.update(nodes=[n for n in args.nodes.split(",") if n],
                                 start=datetime.fromisoformat(args.start.replace("Z", "+00:00")),
                                 end=datetime.fromisoformat(args.end.replace("Z", "+00:00")))
            except ValueError as exc:
                raise BadInput(f"--start/--end: {exc}") from None
        try:
            cluster_name, cluster = cfg.cluster(args.cluster)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        targets = [args.job or f"{args.nodes}@{args.start}"]
    else:
        if not args.bundles:
            raise BadInput("nothing to diagnose: give bundle directories, --job JOBID or --nodes/--start/--end")
        targets = args.bundles
        for b in args.bundles:
            if not Path(b).is_dir():
                raise BadInput(f"{b}: no such bundle directory")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    elif len(targets) > 1 and args.json:
        raise BadInput("several bundles with --json need --out DIR (one JSON file per bundle)")
    live = bool(args.job or args.nodes)

    run = None
    if args.inline:
        from flows.inline import attribute_inline
        from flows.pipeline import Request
        from tasks.steps import LiveScope

        def run(target: str):
            if live:
                request = Request(live=LiveScope(cluster_name=cluster_name, cluster=cluster, **live_args),
                                  warehouse=warehouse, settings=settings)
            else:
                request = Request(bundle=target, warehouse=warehouse, settings=settings)
            return attribute_inline(request, pack)
    else:
        _prefect_env()
        from attribution.models import Diagnosis
        from flows.attempt import attribute_attempt

        def run(target: str):
            if live:
                doc = attribute_attempt(warehouse=warehouse, store=warehouse is not None, rules_dir=cfg.rules_dir,
                                        settings=settings.__dict__,
                                        cluster=cluster_name, cluster_config=cluster.model_dump(mode="json"),
                                        job_id=live_args["job_id"], nodes=live_args["nodes"],
                                        start=live_args["start"].isoformat() if live_args["start"] else None,
                                        end=live_args["end"].isoformat() if live_args["end"] else None)
            else:
                doc = attribute_attempt(bundle=target, warehouse=warehouse, store=warehouse is not None,
                                        rules_dir=cfg.rules_dir, settings=settings.__dict__)
            return Diagnosis.model_validate(doc)

    from connectors import TransientSourceError
    from connectors.kueue import KueueError
    from connectors.slurm import SlurmError

    status = EXIT_OK
    total = len(targets)
    for i, bundle in enumerate(targets, 1):
        started = time.monotonic()
        try:
            d = run(bundle)
        except (BundleError, SlurmError, KueueError) as exc:
            print(f"attribution: {exc}", file=sys.stderr)
            status = EXIT_BAD_INPUT
            continue
        except TransientSourceError as exc:
            print(f"attribution: cannot scope the attempt: {exc}", file=sys.stderr)
            status = EXIT_INTERNAL
            continue
        if args.out:
            name = d.attempt.job_id.replace("/", "_") if live else Path(bundle).resolve().name
            (Path(args.out) / f"{name}.json").write_text(d.to_json())
            if total > 1 or not args.json:
                print(f"[{i}/{total}] {name}: {d.terminal_state}/{d.sub_domain} "
                      f"affected={','.join(d.affected_nodes) or '-'} ({time.monotonic() - started:.1f}s)",
                      file=sys.stderr)
        if args.json and not args.out:
            print(d.to_json())
        elif not args.out:
            print(_summary(d))
    return status


def cmd_rules(args) -> int:
    from rules.pack import RULES_DIR, load_pack, validate_pack
    from rules.testing import run_tests

    rules_dir = args.rules_dir or RULES_DIR
    pack, errors = validate_pack(rules_dir)
    if errors:
        for e in errors:
            print(f"INVALID {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.action == "validate":
        print(f"rules pack {pack.version}: {len(pack.rules)} rule(s) valid")
        return EXIT_OK
    if args.action == "list":
        if args.json:
            print(json.dumps([{"id": r.id, "version": r.version, "phase": r.phase, "output": r.output,
                               "sources": r.sources, "description": r.description.strip(),
                               "tests": len(r.tests), "path": r.path} for r in pack.rules], indent=2))
        else:
            print(f"rules pack {pack.version}")
            for phase in ("extract", "early", "final", "report"):
                for r in pack.by_phase(phase):
                    print(f"  {phase:8} {r.id:32} v{r.version:<3} {r.output:11} {len(r.tests)} test(s)")
        return EXIT_OK
    results = run_tests(load_pack(rules_dir), only=args.rule)
    failed = [r for r in results if not r.ok]
    for r in results:
        if not r.ok or args.verbose:
            print(f"{'PASS' if r.ok else 'FAIL'} {r.rule} :: {r.case}" + (f"\n     {r.message}" if r.message else ""))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_OK if not failed else EXIT_INTERNAL


def cmd_config(args) -> int:
    """Validate the configuration and ping every endpoint it names."""
    import httpx

    from attribution.config import load_config

    try:
        cfg = load_config(args.config)
    except (FileNotFoundError, ValueError) as exc:
        raise BadInput(str(exc).splitlines()[0]) from None
    print(f"warehouse: {cfg.warehouse}")
    failures = 0

    def ping(label: str, url: str, path: str, headers: dict | None = None) -> None:
        nonlocal failures
        try:
            r = httpx.get(url.rstrip("/") + path, timeout=5, headers=headers or {})
            ok = r.status_code < 400
            print(f"  {'ok  ' if ok else 'FAIL'} {label}: {url} ({r.status_code})")
        except httpx.HTTPError as exc:
            ok = False
            print(f"  FAIL {label}: {url} ({type(exc).__name__})")
        failures += not ok

    for name, cl in cfg.clusters.items():
        print(f"cluster {name} (scheduler {cl.scheduler}, timezone {cl.timezone})")
        if cl.slurm and cl.slurm.rest_url:
            ping("slurmrestd", cl.slurm.rest_url, "/openapi",
                 {"X-SLURM-USER-NAME": cl.slurm.user, "X-SLURM-USER-TOKEN": os.environ.get(cl.slurm.token_env, "")})
        if cl.kueue and cl.kueue.url:
            ping("kubernetes", cl.kueue.url, "/version")
        for src, sc in cl.sources.items():
            if sc.connector == "prometheus":
                ping(f"{src} (prometheus)", sc.url, "/-/ready")
            elif sc.connector == "loki":
                ping(f"{src} (loki)", sc.url, "/ready")
            else:
                print(f"  ok   {src} (files): {sc.path}")
    return EXIT_OK if not failures else EXIT_INTERNAL


def cmd_query(args) -> int:
    import csv
    import io

    import duckdb

    from attribution.config import load_config
    from warehouse.store import Warehouse, views

    if args.list:
        for name, what in views().items():
            print(f"{name:24} {what}")
        return EXIT_OK
    if not args.query:
        raise BadInput("give a view name (see --list) or SQL")
    try:
        cfg = load_config(args.config, warehouse=args.warehouse)
    except (FileNotFoundError, ValueError) as exc:
        raise BadInput(str(exc).splitlines()[0]) from None
    try:
        wh = Warehouse(cfg.warehouse)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if not wh.exists():
        raise BadInput(f"{cfg.warehouse}: no warehouse yet (diagnose something first)")
    try:
        cols, rows = wh.query(args.query)
    except duckdb.Error as exc:
        raise BadInput(f"query failed: {str(exc).splitlines()[0]}") from None
    if args.format == "json":
        print(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=2))
    elif args.format == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(cols)
        w.writerows(rows)
        print(buf.getvalue(), end="")
    else:
        cells = [cols] + [[("" if v is None else str(v)) for v in r] for r in rows]
        widths = [min(60, max(len(row[i]) for row in cells)) for i in range(len(cols))]
        for j, row in enumerate(cells):
            print("  ".join(v[:60].ljust(widths[i]) for i, v in enumerate(row)).rstrip())
            if j == 0:
                print("  ".join("-" * w for w in widths))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", file=sys.stderr)
    return EXIT_OK


def cmd_eval(args) -> int:
    from rules.evaluation import evaluate, find_bundles
    from rules.pack import RuleFileError, default_pack, load_pack

    if not Path(args.dir).is_dir():
        raise BadInput(f"{args.dir}: no such directory")
    if not find_bundles(Path(args.dir)):
        raise BadInput(f"{args.dir}: no bundle with an expected.json under it")
    try:
        pack = load_pack(args.rules_dir) if args.rules_dir else default_pack()
    except RuleFileError as exc:
        raise BadInput(str(exc)) from None

    def progress(i, n):
        if sys.stderr.isatty() or i == n or i % 50 == 0:
            print(f"\r[{i}/{n}] diagnosed", end="" if i < n else "\n", file=sys.stderr, flush=True)

    report = evaluate(Path(args.dir), pack, progress)
    if args.json:
        print(json.dumps([{"bundle": o.bundle, "class": o.cls, "exact": o.exact, "expected": o.expected, "got": o.got,
                           "error": o.error} for o in report.outcomes], indent=2))
    else:
        print(report.table())
        misses = report.misses()
        if misses:
            print(f"\n{len(misses)} miss(es):")
            for o in misses:
                e = o.expected
                g = o.got or {}
                print(f"  {o.bundle}\n    expected {e['terminal_state']}/{e['sub_domain']} {sorted(e.get('affected_nodes') or [])}"
                      f"\n    got      {g.get('terminal_state')}/{g.get('sub_domain')} {sorted(g.get('affected_nodes') or [])}"
                      f" root={g.get('root')} {o.error or ''}")
        n = len(report.outcomes)
        print(f"\n{n} bundle(s) in {report.seconds:.1f} s ({report.seconds / n:.2f} s each), rules {pack.version}")
    return EXIT_OK if not report.misses() else EXIT_INTERNAL


def _load(args, **overrides):
    from attribution.config import load_config

    try:
        return load_config(getattr(args, "config", None), **overrides)
    except (FileNotFoundError, ValueError) as exc:
        raise BadInput(str(exc).splitlines()[0]) from None


def _need_prefect_server() -> None:
    if not os.environ.get("PREFECT_API_URL"):
        raise BadInput("set PREFECT_API_URL to the Prefect server the workers poll (e.g. http://127.0.0.1:4200/api)")


def cmd_serve(args) -> int:
    import uvicorn

    from attribution.service import create_app

    cfg = _load(args)
    _need_prefect_server()
    svc = cfg.service
    missing = [name for name in (svc.token_env, svc.webhook_secret_env) if not os.environ.get(name)]
    if missing and not args.insecure_no_auth:
        raise BadInput(f"set {' and '.join(missing)} (or pass --insecure-no-auth on a trusted network)")
    _prefect_env()
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
    uvicorn.run(create_app(cfg), host=args.host or svc.host, port=args.port or svc.port,
                log_level="warning", access_log=False)
    return EXIT_OK


def cmd_deploy(args) -> int:
    import subprocess

    _need_prefect_server()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "ATTRIBUTION_PROJECT_DIR": str(root), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = [sys.executable, "-m", "prefect"]
    have = subprocess.run([*prefect, "work-pool", "inspect", args.pool], capture_output=True, text=True, env=env)
    if have.returncode != 0:
        made = subprocess.run([*prefect, "work-pool", "create", args.pool, "--type", "process"],
                              capture_output=True, text=True, env=env)
        if made.returncode != 0:
            print(made.stdout + made.stderr, file=sys.stderr)
            return EXIT_INTERNAL
        print(f"work pool {args.pool} (process) created")
    r = subprocess.run([*prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(root / "deployments/prefect.yaml")],
                       cwd=root, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
        return EXIT_INTERNAL
    print("deployments applied: attribute-attempt/attempt, backfill/nightly")
    return EXIT_OK


def cmd_worker(args) -> int:
    _need_prefect_server()
    _load(args)   # fail here, not in every flow run, when the configuration is broken
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.process:
        os.execvp(sys.executable, [sys.executable, "-m", "prefect", "worker", "start", "--pool", args.pool,
                                   "--limit", str(args.limit), "--type", "process"])
    import logging
    import signal

    from flows.worker import InProcessWorker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = InProcessWorker(args.pool, queues=args.queue, limit=args.limit, poll_s=args.poll)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop.set())
    print(f"worker {worker.name}: polling pool {args.pool!r} every {args.poll:g} s, up to {args.limit} run(s) "
          "at once in this process", file=sys.stderr, flush=True)
    worker.run()
    return EXIT_OK


def cmd_backfill(args) -> int:
    from flows.backfill import parse_when

    cfg = _load(args, warehouse=args.warehouse, rules_dir=args.rules_dir)
    for flag in ("since", "until"):
        if getattr(args, flag):
            try:
                parse_when(getattr(args, flag))
            except ValueError as exc:
                raise BadInput(f"--{flag}: {exc}") from None
    if args.cluster and not args.bundles:
        try:
            cfg.cluster(args.cluster)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    if args.bundles and not Path(args.bundles).is_dir():
        raise BadInput(f"{args.bundles}: no such directory")
    if not args.bundles and not cfg.backfill.bundles_dir and not cfg.clusters:
        raise BadInput("nothing to backfill: configure clusters or give --bundles DIR")
    kwargs = dict(since=args.since, until=args.until, cluster=args.cluster, bundles_dir=args.bundles,
                  force=args.force, concurrency=args.concurrency, warehouse=cfg.warehouse, rules_dir=cfg.rules_dir)
    try:
        if args.inline:
            from flows.backfill import backfill_inline

            def progress(i, n, a, outcome):
                print(f"[{i}/{n}] {a.key}: {outcome}", file=sys.stderr, flush=True)

            summary = backfill_inline(**kwargs, progress=progress, cfg=cfg).as_dict()
        else:
            _prefect_env()
            os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"   # the flow's log is the progress
            from flows.backfill_flow import backfill

            summary = backfill(**kwargs)
    except ValueError as exc:
        raise BadInput(str(exc).splitlines()[0]) from None
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"found {summary['found']}, skipped {summary['skipped']} (current rules), diagnosed {summary['diagnosed']}"
              f" ({summary['redone_stale']} re-diagnosed after a rules change), failed {summary['failed']}"
              f" in {summary['seconds']:.1f}s")
        for state, n in summary["by_terminal_state"].items():
            print(f"  {state:24} {n}")
        for f in summary["failures"]:
            print(f"  FAILED {f['attempt']}: {f['error']}")
    return EXIT_OK if not summary["failed"] else EXIT_INTERNAL


def cmd_topology(args) -> int:
    import yaml

    from connectors.topology import TopologyError, links_from_ibnetdiscover, links_from_yaml
    from flows.backfill import parse_when
    from warehouse.store import Warehouse

    cfg = _load(args, warehouse=args.warehouse)
    path = Path(args.file)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    text = path.read_text(encoding="utf-8", errors="replace")
    fmt = args.format
    if fmt == "auto":
        fmt = "ibnetdiscover" if any(line.startswith("Switch") for line in text.splitlines()) else "yaml"
    try:
        valid_from = parse_when(args.valid_from) if args.valid_from else None
        if valid_from is None:
            from datetime import datetime, timezone
            valid_from = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        if fmt == "yaml":
            from connectors.bundle import SAFE_LOADER
            links = links_from_yaml(yaml.load(text, Loader=SAFE_LOADER) or {})
        else:
            links = links_from_ibnetdiscover(text)
    except (ValueError, TopologyError, yaml.YAMLError) as exc:
        raise BadInput(f"{path}: {str(exc).splitlines()[0]}") from None
    added = Warehouse(cfg.warehouse).load_topology(args.cluster, links, valid_from, f"{fmt} {path.name}")
    hosts = sum(1 for link in links if link[3] == "host")
    print(f"{path}: {len(links)} link(s) ({hosts} to hosts) as of {valid_from.isoformat()}, {added} new in {cfg.warehouse}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attribution", description=(
        "Why did this GPU training attempt die, and whom should we isolate? "
        "Scopes an attempt, collects its evidence, runs versioned rules and writes a diagnosis."))
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("diagnose", help="diagnose attempt bundle(s)", description=(
        "Diagnose one or more attempt bundles (see README: bundle format). By default runs the Prefect flow "
        "with an embedded ephemeral server and stores each diagnosis in the local warehouse."))
    d.add_argument("bundles", nargs="*", metavar="BUNDLE", help="attempt bundle directory")
    d.add_argument("--job", metavar="JOBID", help="scope a Slurm job / Kueue workload from the cluster's scheduler")
    d.add_argument("--cluster", metavar="NAME", help="configured cluster (default: the only one configured)")
    d.add_argument("--nodes", metavar="H1,H2", help="explicit scope: these hosts ...")
    d.add_argument("--start", metavar="TIME", help="... from this RFC 3339 time ...")
    d.add_argument("--end", metavar="TIME", help="... to this one")
    d.add_argument("--json", action="store_true", help="print the diagnosis JSON instead of the summary")
    d.add_argument("--out", metavar="DIR", help="write DIR/<bundle-name>.json for each bundle")
    d.add_argument("--inline", action="store_true", help="run the same steps without Prefect (fast, local)")
    d.add_argument("--warehouse", metavar="PATH", help="warehouse DuckDB file (default from config)")
    d.add_argument("--no-warehouse", action="store_true", help="do not store the diagnosis")
    d.add_argument("--config", metavar="FILE", help="YAML config file (default ./attribution.yaml)")
    d.add_argument("--rules-dir", metavar="DIR", help="use another rules pack")
    d.set_defaults(func=cmd_diagnose)

    r = sub.add_parser("rules", help="list, validate or test the rules pack")
    r.add_argument("action", choices=["list", "validate", "test"])
    r.add_argument("--rules-dir", metavar="DIR", help="rules pack directory (default: the shipped pack)")
    r.add_argument("--rule", metavar="ID", help="test only this rule")
    r.add_argument("--json", action="store_true", help="list as JSON")
    r.add_argument("-v", "--verbose", action="store_true", help="show passing test cases too")
    r.set_defaults(func=cmd_rules)

    c = sub.add_parser("config", help="check the configuration", description=(
        "Validate the YAML configuration (clusters, schedulers, sources) and ping every endpoint it names."))
    c.add_argument("action", choices=["check"])
    c.add_argument("--config", metavar="FILE", help="YAML config file (default ./attribution.yaml)")
    c.set_defaults(func=cmd_config)

    q = sub.add_parser("query", help="query the warehouse (named views or SQL)", description=(
        "Run a named analyst view or any SQL against the warehouse, read-only. `--list` shows the views."))
    q.add_argument("query", nargs="?", metavar="NAME|SQL")
    q.add_argument("--list", action="store_true", help="list the named views and what each answers")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--warehouse", metavar="PATH")
    q.add_argument("--config", metavar="FILE")
    q.set_defaults(func=cmd_query)

    e = sub.add_parser("eval", help="measure the rules on bundles that carry expected.json", description=(
        "Diagnose every bundle under DIR that has an expected.json (inline runner, nothing stored) and print a "
        "per-class table: exact match of terminal_state + sub_domain + affected_nodes, and each field; then every "
        "miss with expected vs got. Exit 0 when every bundle matches exactly, 1 otherwise."))
    e.add_argument("dir", metavar="DIR")
    e.add_argument("--rules-dir", metavar="DIR", help="rules pack directory (default: the shipped pack)")
    e.add_argument("--json", action="store_true", help="one JSON record per bundle")
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser("backfill", help="diagnose the failed attempts of a window not yet diagnosed", description=(
        "Find the failed attempts that ended in [--since, --until) (Slurm accounting / Kueue workloads of the "
        "configured clusters, or the bundles under --bundles), skip those already diagnosed by the current rules "
        "version, re-diagnose those diagnosed by an older one, and print a summary. Exit 1 when any attempt failed."))
    b.add_argument("--since", metavar="TIME", help="RFC 3339, or a span ago: 26h, 7d (default: backfill.lookback_hours)")
    b.add_argument("--until", metavar="TIME", help="RFC 3339 or a span ago (default: now)")
    b.add_argument("--cluster", metavar="NAME", help="only this cluster (default: every configured cluster)")
    b.add_argument("--bundles", metavar="DIR", help="offline: backfill the bundles under DIR")
    b.add_argument("--force", action="store_true", help="re-diagnose even attempts diagnosed by the current rules")
    b.add_argument("--concurrency", type=int, metavar="N", help="attempts at once (default: backfill.concurrency)")
    b.add_argument("--inline", action="store_true", help="run without Prefect")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.add_argument("--warehouse", metavar="PATH")
    b.add_argument("--rules-dir", metavar="DIR")
    b.add_argument("--config", metavar="FILE")
    b.set_defaults(func=cmd_backfill)

    sv = sub.add_parser("serve", help="run the trigger API (webhooks, /v1/attempts, /v1/diagnoses, /metrics)",
                        description="Serve the HTTP API (OpenAPI at /docs and /openapi.json). Needs PREFECT_API_URL and "
                                    "the secrets named by service.token_env / service.webhook_secret_env.")
    sv.add_argument("--host", help="listen address (default: service.host)")
    sv.add_argument("--port", type=int, help="listen port (default: service.port)")
    sv.add_argument("--insecure-no-auth", action="store_true", help="accept requests without token/signature")
    sv.add_argument("--config", metavar="FILE")
    sv.set_defaults(func=cmd_serve)

    tp = sub.add_parser("topology", help="record a fabric topology snapshot in the warehouse", description=(
        "Record which host or switch each switch port is cabled to, as of --valid-from (default: the file's time), "
        "from a topology.yaml (the bundle format) or `ibnetdiscover` output. Diagnoses join to the topology of "
        "their attempt's time (view topology_history)."))
    tp.add_argument("action", choices=["load"])
    tp.add_argument("file", metavar="FILE")
    tp.add_argument("--cluster", required=True, metavar="NAME")
    tp.add_argument("--valid-from", metavar="TIME", help="RFC 3339 or a span ago")
    tp.add_argument("--format", choices=["auto", "yaml", "ibnetdiscover"], default="auto")
    tp.add_argument("--warehouse", metavar="PATH")
    tp.add_argument("--config", metavar="FILE")
    tp.set_defaults(func=cmd_topology)

    dp = sub.add_parser("deploy", help="apply deployments/prefect.yaml to the Prefect server (PREFECT_API_URL)")
    dp.add_argument("--pool", default="attribution", help="process work pool (created if missing)")
    dp.set_defaults(func=cmd_deploy)

    wk = sub.add_parser("worker", help="run the attribution pool's flow runs (warm, in this process)",
                        description="Take flow runs from the work pool and run them in this already-warm process "
                                    "(no Python start per run). --process uses Prefect's process worker instead "
                                    "(a process per run: crash isolation, ~5 s more per run).")
    wk.add_argument("--pool", default="attribution")
    wk.add_argument("--queue", action="append", help="only these work queues (repeatable; default all)")
    wk.add_argument("--limit", type=int, default=4, help="flow runs at once on this worker")
    wk.add_argument("--poll", type=float, default=0.25, help="seconds between polls of the pool")
    wk.add_argument("--process", action="store_true", help="Prefect's process worker (a process per flow run)")
    wk.add_argument("--config", metavar="FILE")
    wk.set_defaults(func=cmd_worker)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BadInput as exc:
        print(f"attribution: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        print(f"attribution: internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
              " (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
