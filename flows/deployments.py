"""The Prefect deployments of this project, in one place.

`attribution deploy` applies them to the server in PREFECT_API_URL (creating the work pool when
missing); deployments/prefect.yaml is the same list for `prefect deploy` users, rendered from this
one (`render_yaml`; a test keeps the two equal). Flows are referenced by import path, so a worker
needs the package installed, never a checkout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

POOL = "attribution"


@dataclass(frozen=True)
class Deployment:
    name: str
    flow: str  # import path: module.function
    queue: str
    description: str
    cron: str | None = None  # UTC
    tags: tuple[str, ...] = field(default=("workload-attribution",))

    @property
    def full_name(self) -> str:
        return f"{self.flow_name}/{self.name}"

    @property
    def flow_name(self) -> str:
        return {"attribute_attempt": "attribute-attempt", "backfill": "backfill"}[self.flow.rsplit(".", 1)[1]]


DEPLOYMENTS = (
    Deployment(
        "attempt",
        "workload_attribution.flows.attempt.attribute_attempt",
        "triggers",
        "Diagnose one attempt (the parameter is its target) and write the diagnosis to the warehouse. "
        "Started by `attribution serve` (webhooks, /v1/attempts) under the attempt's idempotency key.",
    ),
    Deployment(
        "nightly",
        "workload_attribution.flows.backfill_flow.backfill",
        "backfill",
        "Diagnose the failed attempts of the last backfill.lookback_hours that have no diagnosis by the current rules.",
        cron="30 2 * * *",
    ),
)


ZOMBIE_AUTOMATION = "workload-attribution: crash flow runs whose worker died"


# What says a run's worker is alive. Each of these (in `after` and in `expect`) starts the window
# again; a terminal state (`expect` only) closes it. Pending and Running are among them because a
# worker can die after it claimed a run and before its first heartbeat left: heartbeats alone
# (Prefect's documented automation) would never watch that run, which would stay Pending forever.
ALIVE = ("prefect.flow-run.Pending", "prefect.flow-run.Running", "prefect.flow-run.heartbeat")
ENDED = (
    "prefect.flow-run.Completed",
    "prefect.flow-run.Failed",
    "prefect.flow-run.Cancelled",
    "prefect.flow-run.Crashed",
)


def crash_unresponsive_runs(after_s: float) -> None:
    """A run claimed or running whose worker goes silent (killed, its host lost) is marked Crashed
    after `after_s`, so no run stays Pending or Running forever and the automation below runs it
    again (Prefect's documented zombie-run automation, from the claim on; our workers send the
    heartbeats, flows/worker.py). A claimed run must reach Running within `after_s`."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    with get_client(sync_client=True) as client:  # applied again: the newest settings win
        for old in client.read_automations_by_name(name=ZOMBIE_AUTOMATION):
            client.delete_automation(old.id)
    Automation(
        name=ZOMBIE_AUTOMATION,
        description=f"A claimed or running flow run with no heartbeat for {after_s:g} s is Crashed.",
        trigger=EventTrigger(
            after=set(ALIVE),
            expect={*ALIVE, *ENDED},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=after_s),
        ),
        actions=[
            ChangeFlowRunState(state=StateType.CRASHED, message=f"no heartbeat for {after_s:g} s: its worker is gone")
        ],
    ).create()


RETRY_AUTOMATION = "workload-attribution: run a crashed attempt again"
# How many times a crashed attempt run is run again: a worker or host lost mid-run costs the attempt
# a retry, not its diagnosis; an attempt that crashes every worker that takes it stops after these
# (flows/attempt.py fails its run, naming the crashes).
CRASH_RETRIES = 3


def retry_crashed_runs(deployment_id: str) -> None:
    """A run of the attempt deployment that crashed (its worker killed, its host lost: the
    automation above, or the worker's own report) is scheduled again at once as AwaitingRetry,
    the same flow run under the same idempotency key, for any worker of the pool to take. Its
    state history keeps the crash and its reason. The bound (CRASH_RETRIES) is kept by the flow,
    which counts its runs; the nightly backfill is then no longer what diagnoses a lost run's
    attempt (it skips static clusters, and a day is too late)."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    with get_client(sync_client=True) as client:  # applied again: the newest settings win
        for old in client.read_automations_by_name(name=RETRY_AUTOMATION):
            client.delete_automation(old.id)
    Automation(
        name=RETRY_AUTOMATION,
        description=f"A crashed run of attribute-attempt/attempt is scheduled again (at most {CRASH_RETRIES} times).",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification(
                {"prefect.resource.id": f"prefect.deployment.{deployment_id}", "prefect.resource.role": "deployment"}
            ),
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="AwaitingRetry",
                message=f"crashed (the reason is the state before this one): run again, at most {CRASH_RETRIES} times",
            )
        ],
    ).create()


def apply(pool: str = POOL, zombie_after_s: float = 90.0) -> list[str]:
    """Create the process work pool if missing, apply every deployment, the automation that
    crashes runs whose worker died and the one that runs a crashed attempt again; returns the
    deployments' names."""
    import importlib

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments.runner import EntrypointType, RunnerDeployment
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        except ObjectAlreadyExists:
            pass
    applied, ids = [], {}
    for d in DEPLOYMENTS:
        module, func = d.flow.rsplit(".", 1)
        flow = getattr(importlib.import_module(module), func)
        ids[d.name] = RunnerDeployment.from_flow(
            flow,
            name=d.name,
            cron=d.cron,
            description=d.description,
            tags=list(d.tags),
            work_pool_name=pool,
            work_queue_name=d.queue,
            entrypoint_type=EntrypointType.MODULE_PATH,
        ).apply()
        applied.append(d.full_name)
    crash_unresponsive_runs(zombie_after_s)
    retry_crashed_runs(str(ids["attempt"]))
    return applied


# The Prefect server's settings for this project's load: many small flow runs, each with four task
# runs whose states arrive as events (three each) that the server's services write to its database.
# `prefect server start` with these in its environment; deployments/prefect-server.env is the same
# list (`attribution deploy --print-server-env`; a test keeps the two equal). Measured with
# tests/bench/trigger_storm.py (PostgreSQL, one worker, before/after in turn; docs/benchmarks.md):
# the server's CPU 0.53 -> 0.41 s an attempt (five runs each), its PostgreSQL's transactions 70 -> 48.
SERVER_SETTINGS = {
    # Task runs are recorded from their state events by the task-run recorder, one transaction per
    # event by default (12 an attempt: ~18% of the server's CPU samples in a storm). Batched, an
    # attempt's task runs are written together, each task run once with its three states; a task
    # run reaches the UI up to a second after its state changed. Nothing reads task runs back.
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
    # Events are kept (the UI's event feed, automations' history): written 200 at a time or every
    # second, not 20 at a time. Automations act on events as they arrive, not on the stored ones.
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "1",
    # Connections kept open to PostgreSQL: the default 5 (+10 opened and closed again on demand) is
    # below what a storm's requests and the services use at once; a new connection costs its
    # handshake and asyncpg's type introspection.
    "PREFECT_SERVER_DATABASE_SQLALCHEMY_POOL_SIZE": "10",
    # A scheduled run not started 15 s after its time is marked Late by default: a storm's queue is
    # that deep by design (100 attempts diagnosed at two or three a second: 80 of 100 storm runs
    # went Late), and each Late is a state change, an event and the automations' work on it for
    # nothing an operator acts on. Late after a minute still shows a fleet that has fallen behind
    # or lost its workers (the zombie automation watches claimed runs, not scheduled ones).
    "PREFECT_SERVER_SERVICES_LATE_RUNS_AFTER_SECONDS": "60",
}


def render_server_env() -> str:
    """deployments/prefect-server.env: SERVER_SETTINGS as an environment file for `prefect server start`."""
    head = (
        "# Generated from workload_attribution/flows/deployments.py (SERVER_SETTINGS, which says why each)\n"
        "# by `attribution deploy --print-server-env`; a test keeps it equal. The Prefect server's\n"
        "# environment, e.g.  set -a; . deployments/prefect-server.env; set +a; prefect server start\n"
    )
    return head + "".join(f"{k}={v}\n" for k, v in SERVER_SETTINGS.items())


def render_yaml(pool: str = POOL) -> str:
    """deployments/prefect.yaml, for `prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml`."""
    import yaml

    doc: dict[str, Any] = {
        "name": "workload-attribution",
        "prefect-version": __import__("prefect").__version__,
        "deployments": [],
    }
    for d in DEPLOYMENTS:
        entry: dict[str, Any] = {
            "name": d.name,
            "entrypoint": d.flow,
            "description": d.description,
            "tags": list(d.tags),
            "work_pool": {"name": pool, "work_queue_name": d.queue},
        }
        if d.cron:
            entry["schedules"] = [{"cron": d.cron, "timezone": "UTC", "active": True}]
        doc["deployments"].append(entry)
    head = (
        "# Generated from workload_attribution/flows/deployments.py by `attribution deploy --print-yaml`;\n"
        "# a test keeps it equal. Flows are referenced by import path: workers need the package installed\n"
        "# (pip install workload-attribution), never a checkout.\n"
        "#   attribution deploy             # what this file declares, applied to $PREFECT_API_URL\n"
        "#   prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml   # the same, by Prefect\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=100)
