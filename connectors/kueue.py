"""Kueue: scope a Workload, collect its scheduler history, find the Workloads that ended badly, read
the forwarder's notice (deployments/kubernetes/forwarder.py). Its states: data/kueue_states.csv.

Reads the Workload (conditions, eviction reasons, requeue count), the pods that ran it (by a
configurable label selector), their nodes' conditions and the Workload's events, over httpx with a
bearer token (or a kubeconfig's server/token/CA). The objects go through the same parsers as the
bundle's scheduler/*.json files, so rules see identical records whichever way they came.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from workload_attribution.connectors import scheduler_records as sr
from workload_attribution.connectors.coverage import Cover, Tally
from workload_attribution.connectors.http import http_get, tls
from workload_attribution.connectors.registry import CollectContext, Collected, SourceConfig, register
from workload_attribution.connectors.schedulers import Notice, Scheduler, Webhook, register_scheduler, state_table
from workload_attribution.contracts.errors import BadInput, SourceError
from workload_attribution.contracts.identity import NAME_PATTERN, AttemptId, EndedAttempt, Target
from workload_attribution.contracts.models import AttemptScope, CoverageStatus, Details, Observation
from workload_attribution.contracts.vocabulary import Source
from workload_attribution.staging.database import connected
from workload_attribution.staging.observations import insert_observations

if TYPE_CHECKING:  # at run time httpx is imported where a request is made: the offline path never pays for it
    import httpx

CONNECTOR = "kubernetes"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"
STATES = state_table("kueue")
K8S_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")  # RFC 1123 subdomain
K8S_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label


class KueueSource(SourceConfig):
    url: str | None = Field(default=None, description="API server URL (else from kubeconfig)")
    namespace: str = "default"
    token_env: str | None = Field(default="KUBE_TOKEN", description="env var holding a bearer token")
    kubeconfig: str | None = Field(default=None, description="path to a kubeconfig (server, token, CA)")
    ca_file: str | None = None
    verify_tls: bool = True
    timeout_s: float = Field(10.0, gt=0)
    max_pages: int = Field(1000, ge=1, description="a workload listing that pages longer than this is an error")
    pod_selector: str = Field(
        "kueue.x-k8s.io/workload-name={workload}",
        description="label selector for the workload's pods; {workload} and {owner} are filled in",
    )

    def probe(self) -> tuple[str, str, dict[str, str]] | None:
        if not self.url:
            return ("path", self.kubeconfig, {}) if self.kubeconfig else None
        token = os.environ.get(self.token_env or "", "")
        return "http", self.url.rstrip("/") + "/version", {"Authorization": f"Bearer {token}"} if token else {}


class KueueError(SourceError):
    """The Kubernetes API answered, but not with what was asked: a refusal, an error, an odd body."""


class NotFound(KueueError):
    """The API server answered 404: it has no such object (an empty answer, not a failure)."""


class NotAKubernetesName(BadInput):
    """A name Kubernetes could never hold: it never reaches a URL path or a selector."""


def _name_ok(kind: str, value: str) -> str:
    if not isinstance(value, str) or not K8S_NAME.fullmatch(value):
        raise NotAKubernetesName(f"not a Kubernetes name ({kind}): {value!r}")
    return value


def check_job_id(job_id: str) -> str:
    """A Workload as `[namespace/]name` (RFC 1123), or ValueError naming the form."""
    namespace, _, name = job_id.rpartition("/")
    if (namespace and not K8S_NAMESPACE.fullmatch(namespace)) or not K8S_NAME.fullmatch(name):
        raise ValueError(f"not a Kubernetes workload name: {job_id!r} ([namespace/]name, RFC 1123)")
    return job_id


def _client(src: KueueSource, transport: httpx.BaseTransport | None) -> httpx.Client:
    url, token = src.url, None
    verify: bool | str = src.verify_tls
    if src.kubeconfig:
        cfg = yaml.safe_load(Path(src.kubeconfig).read_text()) or {}
        ctx_name = cfg.get("current-context")
        ctx: dict[str, Any] = next((c["context"] for c in cfg.get("contexts", []) if c.get("name") == ctx_name), {})
        cluster: dict[str, Any] = next(
            (c["cluster"] for c in cfg.get("clusters", []) if c.get("name") == ctx.get("cluster")), {}
        )
        user: dict[str, Any] = next((u["user"] for u in cfg.get("users", []) if u.get("name") == ctx.get("user")), {})
        url = url or cluster.get("server")
        token = user.get("token")
        if cluster.get("certificate-authority"):
            verify = cluster["certificate-authority"]
    if src.token_env and os.environ.get(src.token_env):
        token = os.environ[src.token_env]
    if src.ca_file:
        verify = src.ca_file
    if not url:
        raise KueueError("no API server URL (set url or kubeconfig)")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    import httpx

    return httpx.Client(
        base_url=url.rstrip("/"),
        headers=headers,
        verify=tls(verify),
        transport=transport,
        timeout=httpx.Timeout(src.timeout_s, connect=min(src.timeout_s, 5.0)),
    )


def _get(client: httpx.Client, path: str, params: dict | None = None) -> Any:
    r = http_get(client, path, "kubernetes", params)
    if r.status_code in (401, 403):
        raise KueueError(f"HTTP {r.status_code} for {path}: not authorised (check the token)")
    if r.status_code == 404:
        raise NotFound(f"{path}: not found")
    if r.status_code >= 400:
        raise KueueError(f"HTTP {r.status_code} for {path}: {r.text[:200]}")
    try:
        body = r.json()
    except ValueError:
        raise KueueError(f"{path}: body is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("items", []), list):
        raise KueueError(f"{path}: unexpected answer (not a Kubernetes object or list)")
    return body


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def fetch(src: KueueSource, job_id: str, transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """The Workload `[namespace/]name` (the configured namespace by default), its pods, their nodes
    and its events, as Kubernetes returns them."""
    namespace, _, workload = job_id.rpartition("/")
    ns, workload = _name_ok("namespace", namespace or src.namespace), _name_ok("workload", workload)
    with _client(src, transport) as client:
        wl = _get(client, f"{KUEUE_API}/namespaces/{ns}/workloads/{workload}")
        owners = (wl.get("metadata") or {}).get("ownerReferences") or [{}]
        owner = owners[0].get("name") if K8S_NAME.fullmatch(str(owners[0].get("name"))) else workload
        selector = src.pod_selector.format(workload=workload, owner=owner)
        pods = _get(client, f"/api/v1/namespaces/{ns}/pods", {"labelSelector": selector})
        events = _get(
            client,
            f"/api/v1/namespaces/{ns}/events",
            {"fieldSelector": f"involvedObject.kind=Workload,involvedObject.name={workload}"},
        )
        names = sorted(n for n in {(p.get("spec") or {}).get("nodeName") for p in pods.get("items", [])} if n)
        nodes: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "items": []}
        for n in names:
            if not K8S_NAME.fullmatch(n):
                continue  # not a name Kubernetes could hold: never put into a URL
            try:
                nodes["items"].append(_get(client, f"/api/v1/nodes/{n}"))
            except KueueError:
                continue  # a node deleted since: its absence is itself evidence, reported by the rules
    return {"workload": wl, "pods": pods, "events": events, "nodes": nodes}


def scope_from(objects: dict[str, Any], cluster: str) -> AttemptScope:
    """Scope a Kueue attempt: nodes from the pods, window from admission to finish/eviction."""
    wl = objects["workload"]
    meta, status = wl.get("metadata") or {}, wl.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    nodes = sorted(n for n in {(p.get("spec") or {}).get("nodeName") for p in objects["pods"].get("items", [])} if n)
    if not nodes:
        raise KueueError(f"workload {meta.get('name')}: no pod has a node; nothing ran")
    start = _ts((conds.get("PodsReady") or conds.get("Admitted") or {}).get("lastTransitionTime"))
    ended = conds.get("Finished") or conds.get("Evicted") or {}
    end = _ts(ended.get("lastTransitionTime")) or datetime.now(timezone.utc)
    state = (
        "Evicted"
        if conds.get("Evicted", {}).get("status") == "True"
        else (f"Finished:{ended.get('reason')}" if ended else "Running")
    )
    codes = [
        ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
        for p in objects["pods"].get("items", [])
        for cs in (p.get("status") or {}).get("containerStatuses") or []
    ]
    exit_code = next((str(c) for c in codes if c not in (None, 0)), "0" if codes else None)
    job_id = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return AttemptScope(
        cluster=cluster,
        scheduler="kueue",
        job_id=job_id,
        attempt=int(((status.get("requeueState") or {}).get("count")) or 0),
        nodes=nodes,
        start=start or end,
        end=end,
        state=state,
        exit_code=exit_code,
    )


class KubernetesDetails(Details):
    pods: int
    nodes_not_found: list[str]


@register(CONNECTOR, KueueSource, kind="scheduler")
def collect(ctx: CollectContext[KueueSource]) -> Collected:
    """The Workload, its pods, their nodes and events (source `kueue`)."""
    cover = Cover(ctx.source, CONNECTOR)
    try:
        objects = fetch(ctx.config, ctx.scope.job_id, ctx.transport)
    except (KueueError, NotAKubernetesName) as exc:  # the workload gone (404) is an empty answer; else an error
        return cover.outcome(CoverageStatus.empty if isinstance(exc, NotFound) else CoverageStatus.error, str(exc))
    return store(ctx, objects, cover)


def store(ctx: CollectContext[KueueSource], objects: dict[str, Any], cover: Cover | None = None) -> Collected:
    """Stage objects already fetched (by `fetch`, or by a scope step that read them first)."""
    cover = cover or Cover(ctx.source, CONNECTOR)
    src, scope = ctx.config, ctx.scope
    obs: list[Observation] = []
    namespace, _, name = scope.job_id.rpartition("/")
    ref = f"kubernetes:{namespace or src.namespace}"
    obs += sr.workload_observations(objects["workload"], f"{ref}/workloads/{name}", CONNECTOR)
    obs += sr.pod_observations(objects["pods"], f"{ref}/pods", CONNECTOR)
    obs += sr.event_observations(objects["events"], f"{ref}/events", CONNECTOR)
    obs += sr.node_observations(objects["nodes"], "kubernetes:nodes", CONNECTOR)
    with connected(ctx.staging) as con:
        insert_observations(con, obs)
    missing_nodes = sorted(
        set(scope.nodes) - {(n.get("metadata") or {}).get("name") for n in objects["nodes"]["items"]}
    )
    return cover.judged(
        Tally(observations=len(obs), gaps=bool(missing_nodes)),
        nodes=sorted(set(scope.nodes) - set(missing_nodes)),
        details=KubernetesDetails(pods=len(objects["pods"].get("items", [])), nodes_not_found=missing_nodes),
    )


def ending(conditions: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The condition that ended a Workload's attempt (Evicted, else Finished), as the state it
    stands for (`Evicted`, `Finished:<reason>`) and the condition itself; None while it runs."""
    conds = {c.get("type"): c for c in conditions or [] if isinstance(c, dict)}
    evicted = conds.get("Evicted") or {}
    if evicted.get("status") == "True":
        return "Evicted", evicted
    finished = conds.get("Finished") or {}
    if finished.get("status") == "True":
        return f"Finished:{finished.get('reason')}", finished
    return None


def ended_badly(conditions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The condition that ended a Workload's attempt in failure (a failed state of
    kueue_states.csv: Evicted, or Finished with a reason other than Succeeded), or None: the one
    rule triggers and backfills share."""
    ended = ending(conditions)
    return ended[1] if ended and STATES.failed(ended[0]) else None


def discover_failed(
    src: KueueSource, start: datetime, end: datetime, transport: httpx.BaseTransport | None = None, page_size: int = 500
) -> list[dict[str, Any]]:
    """Workloads of the namespace whose attempt ended badly inside [start, end), following the
    list's `continue` tokens (bounded: a server that never stops paging is an error)."""
    out, token, seen = [], None, set()
    _name_ok("namespace", src.namespace)
    with _client(src, transport) as client:
        for _ in range(src.max_pages):
            params = {"limit": page_size, **({"continue": token} if token else {})}
            page = _get(client, f"{KUEUE_API}/namespaces/{src.namespace}/workloads", params)
            for wl in page.get("items") or []:
                status = wl.get("status") or {}
                cond = ended_badly(status.get("conditions") or [])
                t = _ts(cond.get("lastTransitionTime")) if cond else None
                if t and start <= t < end:
                    out.append(
                        {
                            "job_id": f"{src.namespace}/{(wl.get('metadata') or {}).get('name')}",
                            "attempt": int((status.get("requeueState") or {}).get("count") or 0),
                            "end": t,
                            "reason": cond.get("reason") if cond else None,
                        }
                    )
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return sorted(out, key=lambda w: w["end"])
            if token in seen:
                raise KueueError("workload list paging loops: the server repeated a continue token")
            seen.add(token)
    raise KueueError(f"workload list did not stop paging after {src.max_pages} pages")


def api_client(src: KueueSource, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """A client of the API server `src` names (its URL, bearer token and CA, or a kubeconfig's), as
    this connector talks to it; the Kubernetes action sink (actions/sinks/kubernetes.py) uses it too."""
    return _client(src, transport)


# ------------------------------------------------------------------------------ as a scheduler


def scope(src: KueueSource, target: Target) -> AttemptScope:
    return scope_from(fetch(src, target.job_id or ""), target.cluster or "")


def discover(src: KueueSource, cluster: str, since: datetime, until: datetime) -> list[EndedAttempt]:
    return [
        EndedAttempt.recorded(
            AttemptId(cluster=cluster, scheduler="kueue", job_id=w["job_id"], attempt=w["attempt"]), w["end"]
        )
        for w in discover_failed(src, since, until)
    ]


class WorkloadCondition(BaseModel):
    """One of a Workload's status.conditions, as Kubernetes writes it (other keys kept as they are)."""

    model_config = ConfigDict(extra="allow", str_max_length=4096)
    type: str = Field(max_length=316)
    status: str = Field(max_length=16)
    reason: str | None = None
    message: str | None = None
    lastTransitionTime: str | None = Field(None, max_length=64)  # Kubernetes spells it so


class KubernetesWorkloadEvent(BaseModel):
    """A Kueue Workload whose Finished or Evicted condition changed (deployments/kubernetes/forwarder.py)."""

    # its validator built when a notice first arrives: a process diagnosing a bundle never needs it
    model_config = ConfigDict(extra="forbid", str_max_length=4096, defer_build=True)

    cluster: str = Field(pattern=NAME_PATTERN)
    namespace: str = Field(pattern=f"^{K8S_NAMESPACE.pattern}$")
    name: str = Field(pattern=f"^{K8S_NAME.pattern}$")
    uid: str | None = Field(None, pattern=r"^[0-9a-fA-F-]{1,64}$")
    attempt: int = Field(0, ge=0, le=100000, description="status.requeueState.count")
    # typed: a condition whose type is not a string was a 500 (found by tests/unit/test_fuzz_service.py)
    conditions: list[WorkloadCondition] = Field(max_length=64, description="the Workload's status.conditions")
    diagnose: bool = False


def read_notice(event: KubernetesWorkloadEvent) -> Notice:
    workload = f"{event.namespace}/{event.name}"
    attempt = AttemptId(cluster=event.cluster, scheduler="kueue", job_id=workload, attempt=event.attempt)
    return Notice(
        Target.completed(attempt),
        ended_badly([c.model_dump(exclude_none=True) for c in event.conditions]) is not None,
        "workload did not end in failure or eviction",
        asked=event.diagnose,
    )


KUEUE = register_scheduler(
    Scheduler(
        name="kueue",
        scope=scope,
        states=STATES,
        config=KueueSource,
        records=(Source.kueue.value, CONNECTOR),
        job_id=check_job_id,
        discover=discover,
        webhook=Webhook(
            "kubernetes",
            KubernetesWorkloadEvent,
            read_notice,
            "a Kueue workload",
            "A Kueue Workload finished or was evicted. Evicted, or Finished but not Succeeded -> diagnosed.",
        ),
    )
)
