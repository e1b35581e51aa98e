"""Durable intake: every trigger the service answers 202 is on disk until its flow run exists.

    receive -> validate -> outbox (a file, fsynced) -> create the flow run (Prefect, idempotent by key)
            -> run exists: the file is removed;  Prefect slow: answered 'queued', the drainer creates it;
               Prefect unreachable: the file is removed and the answer is 503 + Retry-After (the sender
               keeps the trigger: the Slurm hook spools it)

The drainer starts with the service (entries left by a service that was stopped or killed are
created first, oldest first) and keeps going while it runs. A run whose flow run crashed or failed
does not block its attempt: the next trigger for it starts a new run (Trigger.start).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("workload_attribution.service")

# States of a run that will not diagnose its attempt: a new trigger for the attempt starts a new run.
DEAD_STATES = {"CRASHED", "FAILED", "CANCELLED", "CANCELLING"}
MAX_RESTARTS = 20


@dataclass
class Entry:
    path: Path
    key: str
    parameters: dict[str, Any]
    tags: list[str]
    source: str
    received: float


class Outbox:
    """One JSON file per accepted trigger, written atomically (temp file, fsync, rename, fsync of
    the directory), read back in arrival order."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        probe = self.dir / f".probe-{os.getpid()}"
        probe.write_bytes(b"")  # refuse to start on a directory that cannot be written
        probe.unlink()

    def put(self, key: str, parameters: dict[str, Any], tags: list[str], source: str) -> Entry:
        now = time.time()
        name = f"{time.time_ns():020d}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
        path = self.dir / name
        tmp = self.dir / f".{name}.tmp"
        body = json.dumps(
            {"key": key, "parameters": parameters, "tags": tags, "source": source, "received": now}
        ).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        self._sync_dir()
        return Entry(path, key, parameters, tags, source, now)

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, entry: Entry) -> None:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass

    def pending(self) -> list[Entry]:
        out = []
        for p in sorted(self.dir.glob("[0-9]*.json")):
            try:
                doc = json.loads(p.read_bytes())
                out.append(
                    Entry(
                        p,
                        doc["key"],
                        doc["parameters"],
                        doc.get("tags") or [],
                        doc.get("source") or "?",
                        float(doc.get("received") or p.stat().st_mtime),
                    )
                )
            except (OSError, ValueError, KeyError) as exc:  # a torn or foreign file: kept aside, said once
                bad = p.with_suffix(".unreadable")
                log.error("outbox entry %s unreadable (%s): moved to %s", p.name, exc, bad.name)
                try:
                    p.rename(bad)
                except OSError:
                    pass
        return out

    def stats(self) -> tuple[int, float]:
        """(entries waiting, age in seconds of the oldest)."""
        names = sorted(self.dir.glob("[0-9]*.json"))
        if not names:
            return 0, 0.0
        oldest_ns = int(names[0].name.split("-", 1)[0])
        return len(names), max(0.0, time.time() - oldest_ns / 1e9)


RETRY_AFTER_S = "10"  # what a 503 tells the sender to wait before it sends the trigger again


class Unreachable(Exception):
    """Prefect could not be reached (connection refused, DNS, the deployment missing)."""


async def create_flow_run(
    client: Any, deployment_id: Any, key: str, parameters: dict[str, Any], tags: list[str]
) -> Any:
    """The deployment's flow run for `key` (Prefect's create_flow_run_from_deployment, Scheduled now),
    named as the flow names it (run_name), without the server's check of the parameters against
    the deployment's schema: they are a Target this service validated (pydantic) and the flow
    validates them again when it runs. The server's check first validates the schema itself
    (jsonschema's metaschema), ~6 ms of its CPU a run: ~5% of its busy samples in a storm
    (tests/bench/trigger_storm.py). The deployment still enforces its schema for every other
    caller (the UI, the CLI, the API)."""
    from prefect.client.schemas.actions import DeploymentFlowRunCreate
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Scheduled, to_state_create

    create = DeploymentFlowRunCreate(
        parameters=parameters,
        enforce_parameter_schema=False,
        state=to_state_create(Scheduled()),
        tags=list(tags),
        name=run_name(key, parameters),
        idempotency_key=key,
    )
    response = await client.request(
        "POST",
        "/deployments/{id}/create_flow_run",
        path_params={"id": deployment_id},
        json=create.model_dump(mode="json", exclude_unset=True),
    )
    return FlowRun.model_validate(response.json())


def run_name(key: str, parameters: dict[str, Any]) -> str:
    """The run's name: its target described, the name the flow gives its run (flows/attempt.py
    _named), so the flow need not rename it; the key for parameters that are no Target."""
    from workload_attribution.contracts.identity import Target

    try:
        return Target.model_validate(parameters["target"]).describe()
    except (KeyError, TypeError, ValueError):
        return key.replace(":", "-")[:200]


class Trigger:
    """Creates the attempt deployment's flow run, once per idempotency key.

    Prefect's idempotency key is the truth across service replicas; a short memory spares the server
    the duplicates of a webhook storm. A key whose run crashed, failed or was cancelled gets a new
    run under `<key>#<n>`: a dead run never blocks its attempt."""

    def __init__(self, deployment: str, memory_s: float = 60.0, memory: int = 100_000):
        self.deployment = deployment
        self.memory: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.memory_s, self.memory_size = memory_s, memory
        self.locks: dict[str, asyncio.Lock] = {}
        self._client: Any = None
        self._deployment_id: Any = None
        self._setup = asyncio.Lock()
        # A storm of webhooks must not become a storm of concurrent writes on the Prefect server
        # (with SQLite it answers "database is locked"): one create at a time, a busy answer retried.
        self._gate = asyncio.Semaphore(1)

    async def _connected(self) -> tuple[Any, Any]:
        async with self._setup:
            if self._client is None:
                from prefect.client.orchestration import get_client

                client = get_client()
                await client.__aenter__()
                try:
                    self._deployment_id = (await client.read_deployment_by_name(self.deployment)).id
                except BaseException as exc:
                    await client.__aexit__(None, None, None)
                    raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
                self._client = client
            return self._client, self._deployment_id

    async def reset(self) -> None:
        async with self._setup:
            client, self._client = self._client, None
            if client is not None:
                try:
                    await client.__aexit__(None, None, None)
                except Exception:
                    pass

    async def _create(self, key: str, parameters: dict[str, Any], tags: list[str]) -> Any:
        from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

        client, deployment_id = await self._connected()
        for delay in (0.2, 0.5, 1.0, 2.0, None):
            try:
                # This loop is the retry: Prefect's client would also retry a refused connection, once
                # it has connected before, for half a minute, so a server gone since the last trigger
                # was answered "queued" instead of 503 (the sender keeping the trigger), as it is
                # when the service never reached it.
                async with self._gate:
                    t0 = time.perf_counter()
                    with temporary_settings(updates={PREFECT_CLIENT_MAX_RETRIES: 0}):
                        run = await create_flow_run(client, deployment_id, key, parameters, tags)
                    log.debug("flow run %s for %s created in %.3f s", run.id, key, time.perf_counter() - t0)
                    return run
            except Exception as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status in (429, 503) and delay is not None:  # busy, not gone: the same key is safe to repeat
                    await asyncio.sleep(delay)
                    continue
                await self.reset()  # the server restarted or the deployment was re-applied: reconnect next time
                if status is None or status >= 500 or status == 404:
                    raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
                raise
        raise AssertionError("unreachable")

    async def start(self, key: str, parameters: dict[str, Any], tags: list[str]) -> tuple[str, bool]:
        """(flow run id, whether a live run for the attempt existed already)."""
        if len(self.locks) > 10_000:
            self.locks = {k: v for k, v in self.locks.items() if v.locked()}
        async with self.locks.setdefault(key, asyncio.Lock()):
            known = self.memory.get(key)
            if known and time.monotonic() - known[1] < self.memory_s:
                return known[0], True
            asked = datetime.now(timezone.utc)
            run_key = key
            for n in range(MAX_RESTARTS):
                run = await self._create(run_key, parameters, tags)
                state = getattr(getattr(run, "state", None), "type", None)
                if state is None or str(getattr(state, "value", state)) not in DEAD_STATES:
                    break
                log.info("flow run %s for %s ended %s: starting a new run", run.id, key, state)
                run_key = f"{key}#{n + 1}"
            # Prefect answers a known key with the existing run: one created before we asked is a repeat
            duplicate = run.created is not None and (asked - run.created).total_seconds() > 1.0
            self.memory[key] = (str(run.id), time.monotonic())
            while len(self.memory) > self.memory_size:
                self.memory.popitem(last=False)
            return str(run.id), duplicate
