"""A stand-in for the Kubernetes API server (with Kueue's Workload API).

No kube-apiserver runs on these machines (no package provides one; kind/k3s need Docker or
downloads), so this serves recorded objects the way the API does: GET .../workloads/{name} and
the paged workload list (kueue.x-k8s.io/v1beta1; `limit` + `continue`), pod lists with equality label
selectors, event lists with
involvedObject field selectors, GET /api/v1/nodes/{name} and the paged node list; `*List` kinds with
metadata, 404/401 as `Status` objects; bearer-token authentication when a token is set. `fail_next`
injects faults. `hold(workload)` keeps the answer to that Workload's event list waiting until
`release`: whatever reads it (a flow run's collection) is held mid-run, for a test to act on it then
(`holding` says when a request waits).

PATCH /api/v1/nodes/{name} as the API server answers a strategic merge patch of a Node (what a
cordon and a taint send): `Content-Type: application/strategic-merge-patch+json` (anything else:
415), `metadata.resourceVersion` in the patch a precondition (409 Conflict when the node changed),
`spec.taints` an atomic list (replaced whole: the API's Node has no merge key for it), a null
deleting its field; the answer is the patched Node with a new resourceVersion. Every PATCH is
recorded in `patches` as (path, content type, body).
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


def _status(code: int, reason: str, message: str) -> str:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    )


def _selector(expr: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in expr.split(",") if "=" in part) if expr else {}


class KubeStandIn:
    def __init__(self, namespace: str = "default", token: str | None = None):
        self.namespace, self.token = namespace, token
        self.workloads: dict[str, dict] = {}
        self.pods: list[dict] = []
        self.events: list[dict] = []
        self.nodes: dict[str, dict] = {}
        self.patches: list[tuple[str, str, dict]] = []
        self.fail_next: list[tuple[int, str]] = []
        # workload -> released (an Event); the requests held now, by workload
        self._holds: dict[str, threading.Event] = {}
        self._waiting: dict[str, int] = {}
        self._hold_lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code: int, body: str):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if outer.fail_next:
                    code, body = outer.fail_next.pop(0)
                    return self._send(code, body)
                if outer.token and self.headers.get("Authorization") != f"Bearer {outer.token}":
                    return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                u = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query).items()}
                parts = u.path.strip("/").split("/")
                ns = outer.namespace
                if u.path == f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads":
                    # a list, paged the way the API pages: `limit` items, then a `continue` token
                    names = sorted(outer.workloads)
                    first = int(q.get("continue") or 0)
                    limit = int(q.get("limit") or len(names) or 1)
                    rest = first + limit < len(names)
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "kind": "WorkloadList",
                                "apiVersion": "kueue.x-k8s.io/v1beta1",
                                "metadata": {
                                    "resourceVersion": "1",
                                    **({"continue": str(first + limit)} if rest else {}),
                                },
                                "items": [outer.workloads[n] for n in names[first : first + limit]],
                            }
                        ),
                    )
                if u.path.startswith(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads/"):
                    wl = outer.workloads.get(parts[-1])
                    if wl is None:
                        return self._send(
                            404, _status(404, "NotFound", f'workloads.kueue.x-k8s.io "{parts[-1]}" not found')
                        )
                    return self._send(200, json.dumps(wl))
                if u.path == f"/api/v1/namespaces/{ns}/pods":
                    want = _selector(q.get("labelSelector", ""))
                    items = [
                        p
                        for p in outer.pods
                        if all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in want.items())
                    ]
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "kind": "PodList",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": "1"},
                                "items": items,
                            }
                        ),
                    )
                if u.path == f"/api/v1/namespaces/{ns}/events":
                    want = {k.split(".", 1)[1]: v for k, v in _selector(q.get("fieldSelector", "")).items()}
                    outer._wait_if_held(want.get("name"))
                    items = [
                        e
                        for e in outer.events
                        if all((e.get("involvedObject") or {}).get(k) == v for k, v in want.items())
                    ]
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "kind": "EventList",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": "1"},
                                "items": items,
                            }
                        ),
                    )
                if u.path == "/api/v1/nodes":
                    return self._send(200, json.dumps(outer.node_page(q)))
                if u.path.startswith("/api/v1/nodes/"):
                    node = outer.nodes.get(parts[-1])
                    if node is None:
                        return self._send(404, _status(404, "NotFound", f'nodes "{parts[-1]}" not found'))
                    return self._send(200, json.dumps(node))
                return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))

            def do_PATCH(self):
                if outer.fail_next:
                    code, body = outer.fail_next.pop(0)
                    return self._send(code, body)
                if outer.token and self.headers.get("Authorization") != f"Bearer {outer.token}":
                    return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                path = urlparse(self.path).path
                kind = self.headers.get("Content-Type", "")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.patches.append((path, kind, body))
                if not path.startswith("/api/v1/nodes/"):
                    return self._send(405, _status(405, "MethodNotAllowed", "the server does not allow this method"))
                return self._send(*outer.patch_node(path.rsplit("/", 1)[-1], kind, body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def node_page(self, q: dict[str, str]) -> dict:
        """GET /api/v1/nodes: a NodeList, paged by `limit` and `continue` as the API pages."""
        names = sorted(self.nodes)
        first = int(q.get("continue") or 0)
        limit = int(q.get("limit") or len(names) or 1)
        more = {"continue": str(first + limit)} if first + limit < len(names) else {}
        return {
            "kind": "NodeList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1", **more},
            "items": [self.nodes[n] for n in names[first : first + limit]],
        }

    def patch_node(self, name: str, kind: str, patch: dict) -> tuple[int, str]:
        """A strategic merge patch of a Node's spec: (status, body) as the API server answers."""
        if kind.split(";")[0].strip() != "application/strategic-merge-patch+json":
            return 415, _status(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {kind}"
            )
        node = self.nodes.get(name)
        if node is None:
            return 404, _status(404, "NotFound", f'nodes "{name}" not found')
        meta = node.setdefault("metadata", {})
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != meta.get("resourceVersion"):
            message = (
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
            return 409, _status(409, "Conflict", message)
        spec = node.setdefault("spec", {})
        for key, value in (patch.get("spec") or {}).items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value  # unschedulable a scalar, taints an atomic list: both replaced
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        return 200, json.dumps(node)

    def add_node(self, name: str, labels: dict[str, str] | None = None, ready: bool = True) -> dict:
        """A Node as the API serves it: metadata with a resourceVersion, a spec, a Ready condition."""
        self.nodes[name] = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                "resourceVersion": "1",
            },
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }
        return self.nodes[name]

    def load_bundle(self, scheduler_dir, pod_labels: dict[str, str]) -> None:
        """Serve a bundle's scheduler/*.json (pods get the labels a real job controller would set)."""
        wl = json.loads((scheduler_dir / "workload.json").read_text())
        self.workloads[wl["metadata"]["name"]] = wl
        for p in json.loads((scheduler_dir / "pods.json").read_text())["items"]:
            p.setdefault("metadata", {}).setdefault("labels", {}).update(pod_labels)
            self.pods.append(p)
        self.events += json.loads((scheduler_dir / "events.json").read_text())["items"]
        for n in json.loads((scheduler_dir / "nodes.json").read_text())["items"]:
            self.nodes[n["metadata"]["name"]] = n

    def clone_workload(self, name: str, new_name: str) -> dict:
        """Another Workload like `name` (its pods and events too), for tests that need many attempts."""
        import copy

        wl = copy.deepcopy(self.workloads[name])
        wl["metadata"]["name"] = new_name
        wl["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"workload/{new_name}"))  # as the API server gives
        self.workloads[new_name] = wl
        label = "kueue.x-k8s.io/workload-name"
        for p in [p for p in self.pods if (p.get("metadata") or {}).get("labels", {}).get(label) == name]:
            q = copy.deepcopy(p)
            q["metadata"]["labels"][label] = new_name
            q["metadata"]["name"] = f"{new_name}-{p['metadata'].get('name', 'pod')}"
            self.pods.append(q)
        for e in [e for e in self.events if (e.get("involvedObject") or {}).get("name") == name]:
            f = copy.deepcopy(e)
            f["involvedObject"]["name"] = new_name
            self.events.append(f)
        return wl

    # a held request answers after this at the latest, so no handler waits for ever on a test that
    # forgot to release it (a client's own timeout may come first: it then sees a transient error)
    HOLD_S = 120.0

    def hold(self, workload: str) -> None:
        """From now on, a request for this Workload's events waits until `release(workload)`."""
        with self._hold_lock:
            self._holds[workload] = threading.Event()

    def holding(self, workload: str) -> bool:
        """Whether a request for this Workload's events is waiting now."""
        with self._hold_lock:
            return self._waiting.get(workload, 0) > 0

    def release(self, workload: str) -> None:
        """Answer the requests held for this Workload, and hold none after."""
        with self._hold_lock:
            released = self._holds.pop(workload, None)
        if released is not None:
            released.set()

    def _wait_if_held(self, workload: str | None) -> None:
        if not workload:
            return
        with self._hold_lock:
            released = self._holds.get(workload)
            if released is None:
                return
            self._waiting[workload] = self._waiting.get(workload, 0) + 1
        try:
            released.wait(self.HOLD_S)
        finally:
            with self._hold_lock:
                self._waiting[workload] -= 1

    def start(self) -> KubeStandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for workload in list(self._holds):
            self.release(workload)
        self.server.shutdown()
        self.server.server_close()
