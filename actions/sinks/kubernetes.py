"""Kubernetes: cordon the affected nodes and taint them `attribution.io/diagnosis=<id>:NoSchedule`
(one PATCH of the Node, `application/strategic-merge-patch+json`); undo removes the taint, and
uncordons a node that was schedulable before.

A Node's `spec.taints` is an atomic list (no merge key: a patch replaces it whole), so the patch
carries the node's taints as read plus or minus ours, with the node's `metadata.resourceVersion`
as a precondition: a node changed since it was read answers 409 Conflict, and the patch is tried
again on a fresh read (act.py's retries). The API server is the cluster's `kueue:` block (URL,
token, CA: connectors/kueue.py's client), or the sink's own `api:`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from workload_attribution.actions import http
from workload_attribution.actions.registry import Fleet, Request, SinkConfig, register
from workload_attribution.connectors.kueue import KueueSource, api_client
from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.errors import ActionError, ActionSkipped, SourceError, first_line

TAINT_KEY = "attribution.io/diagnosis"
PATCH = "application/strategic-merge-patch+json"
ALL = "all"  # the partition of every node when no label names one


class KubernetesSinkConfig(SinkConfig):
    kind: Literal["kubernetes"] = "kubernetes"
    api: KueueSource | None = Field(None, description="the API server (default: the cluster's kueue: block)")
    taint_key: str = TAINT_KEY
    partition_label: str | None = Field(
        None, description="the node label whose value is the node's partition (none: the cluster is one)"
    )
    max_pages: int = Field(100, ge=1, description="node list pages of 500 read at most")

    def probe(self) -> tuple[str, str, dict[str, str]] | None:
        return self.api.probe() if self.api else None


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Kubernetes:
    def __init__(self, config: KubernetesSinkConfig, api: KueueSource, transport: Any = None):
        self.config, self.api, self.transport = config, api, transport

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            client = api_client(self.api, self.transport)
        except SourceError as exc:
            raise ActionError(f"kubernetes: {first_line(exc)}") from None
        with client:
            r = http.send(client, method, path, "kubernetes", **kwargs)
        body = r.json()
        return body if isinstance(body, dict) else {}

    def _node(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/nodes/{name}")

    def _patch(self, name: str, node: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        version = (node.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "spec": spec}
        body = json.dumps(patch).encode()
        return self._request("PATCH", f"/api/v1/nodes/{name}", content=body, headers={"Content-Type": PATCH})

    def fleet(self) -> Fleet:
        partitions: dict[str, set[str]] = {}
        out: set[str] = set()
        token = ""
        for _ in range(self.config.max_pages):
            page = self._request(
                "GET", "/api/v1/nodes", params={"limit": 500, **({"continue": token} if token else {})}
            )
            for n in page.get("items") or []:
                meta = n.get("metadata") or {}
                name = str(meta.get("name"))
                label = (meta.get("labels") or {}).get(self.config.partition_label or "") or ALL
                partitions.setdefault(label, set()).add(name)
                if (n.get("spec") or {}).get("unschedulable") or not _ready(n):
                    out.add(name)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return Fleet({p: frozenset(m) for p, m in partitions.items()}, frozenset(out))
        raise ActionError(f"kubernetes: the node list pages on past {self.config.max_pages} pages")

    def act(self, request: Request) -> dict[str, Any]:
        if request.node is None:
            raise ActionSkipped("kubernetes: no node to cordon")
        node = self._node(request.node)
        taints = list((node.get("spec") or {}).get("taints") or [])
        ours = [t for t in taints if t.get("key") == self.config.taint_key]
        if ours and ours[0].get("value") != request.diagnosis.diagnosis_id:
            raise ActionSkipped(f"{request.node} is tainted for diagnosis {ours[0].get('value')} already")
        taint = {"key": self.config.taint_key, "value": request.diagnosis.diagnosis_id, "effect": "NoSchedule"}
        was = bool((node.get("spec") or {}).get("unschedulable"))
        kept = [t for t in taints if t.get("key") != self.config.taint_key]
        self._patch(request.node, node, {"unschedulable": True, "taints": [*kept, taint]})
        return {"taint": taint, "was_unschedulable": was}

    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]:
        name = record.node or ""
        node = self._node(name)
        taints = list((node.get("spec") or {}).get("taints") or [])
        kept = [
            t for t in taints if not (t.get("key") == self.config.taint_key and t.get("value") == record.diagnosis_id)
        ]
        if len(kept) == len(taints):
            raise ActionSkipped(f"{name} carries no taint of diagnosis {record.diagnosis_id} any more: left as it is")
        spec: dict[str, Any] = {"taints": kept}
        if not record.details.get("was_unschedulable"):
            spec["unschedulable"] = None  # as `kubectl uncordon` patches it: the field removed, schedulable
        self._patch(name, node, spec)
        return {"uncordoned": "unschedulable" in spec}


@register("kubernetes", KubernetesSinkConfig, operation="cordon", reversal="uncordon", isolates=True)
def build(config: KubernetesSinkConfig, cluster: Any) -> Kubernetes:
    api = config.api or getattr(cluster, "kueue", None)
    if api is None:
        raise ActionError("kubernetes sink: no API server (give it `api:` or the cluster a `kueue:` block)")
    return Kubernetes(config, api)
