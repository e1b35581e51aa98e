#!/usr/bin/env python3
"""Kueue -> workload-attribution forwarder: watches Workloads and posts each one whose attempt
ended (Finished or Evicted) to `attribution serve` at /v1/webhooks/kubernetes, HMAC-signed.

Runs in the cluster (deployments/kubernetes/forwarder.yaml: service account allowed to get, list
and watch workloads.kueue.x-k8s.io) or anywhere with a token. Python 3 standard library only.

    ATTRIBUTION_URL      https://attribution.example.org/v1/webhooks/kubernetes
    ATTRIBUTION_SECRET   the service's ATTRIBUTION_WEBHOOK_SECRET
    ATTRIBUTION_CLUSTER  the cluster's name in attribution.yaml
    KUBE_URL             default: the in-cluster API (KUBERNETES_SERVICE_HOST)
    KUBE_TOKEN           default: the service account token; KUBE_CA: its CA
    NAMESPACE            default: all namespaces

The service decides what is diagnosed (failed or evicted) and what is only recorded (succeeded),
and de-duplicates: a re-sent event returns the same flow run. `--once` lists instead of watching
and posts the Workloads that ended in the last --since-minutes (a catch-up after downtime).
"""

import argparse
import hashlib
import hmac
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
API = "/apis/kueue.x-k8s.io/v1beta1"


def kube():
    url = os.environ.get("KUBE_URL") or (
        f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
    )
    token = os.environ.get("KUBE_TOKEN") or (
        open(f"{SA}/token").read().strip() if os.path.exists(f"{SA}/token") else ""
    )
    ca = os.environ.get("KUBE_CA") or (f"{SA}/ca.crt" if os.path.exists(f"{SA}/ca.crt") else None)
    ctx = ssl.create_default_context(cafile=ca) if url.startswith("https") else None
    return url.rstrip("/"), token, ctx


def kube_get(path, timeout=30):
    url, token, ctx = kube()
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    return urllib.request.urlopen(req, timeout=timeout, context=ctx)


def workloads_path(namespace):
    return f"{API}/namespaces/{namespace}/workloads" if namespace else f"{API}/workloads"


def ended(wl):
    """(condition, its time) when the Workload's attempt is over, else None."""
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Finished", "Evicted") and c.get("status") == "True":
            return c
    return None


def event(wl, cluster):
    meta, status = wl.get("metadata") or {}, wl.get("status") or {}
    return {
        "cluster": cluster,
        "namespace": meta.get("namespace") or os.environ.get("NAMESPACE") or "default",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "attempt": int((status.get("requeueState") or {}).get("count") or 0),
        "conditions": status.get("conditions") or [],
    }


def post(ev):
    body = json.dumps(ev, separators=(",", ":")).encode()
    ts = str(int(time.time()))
    sig = hmac.new(os.environ["ATTRIBUTION_SECRET"].encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(
        os.environ["ATTRIBUTION_URL"],
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-Attribution-Timestamp": ts,
            "X-Attribution-Signature": f"sha256={sig}",
        },
    )
    for delay in (1, 3, 10, None):
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                return exc.code, {"error": exc.read()[:300].decode(errors="replace")}
        except (urllib.error.URLError, OSError):
            pass
        if delay is None:
            return None, {"error": "service unreachable"}
        time.sleep(delay)


def forward(wl, cluster, sent):
    cond = ended(wl)
    if not cond:
        return
    ev = event(wl, cluster)
    mark = (ev["uid"] or ev["name"], ev["attempt"], cond.get("type"), cond.get("lastTransitionTime"))
    if mark in sent:
        return
    status, answer = post(ev)
    print(
        json.dumps(
            {
                "workload": f"{ev['namespace']}/{ev['name']}",
                "attempt": ev["attempt"],
                "condition": cond.get("type"),
                "reason": cond.get("reason"),
                "http": status,
                "answer": answer,
            }
        ),
        flush=True,
    )
    if status is not None and status < 500:
        sent.add(mark)


def list_all(namespace):
    items, token = [], None
    while True:
        q = "?limit=500" + (f"&continue={urllib.parse.quote(token)}" if token else "")
        page = json.load(kube_get(workloads_path(namespace) + q))
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items, (page.get("metadata") or {}).get("resourceVersion")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--once", action="store_true", help="list, post what ended recently, exit")
    ap.add_argument("--since-minutes", type=float, default=60)
    args = ap.parse_args()
    cluster, namespace, sent = os.environ["ATTRIBUTION_CLUSTER"], os.environ.get("NAMESPACE"), set()
    cutoff = datetime.now(timezone.utc) - timedelta(minutes=args.since_minutes)
    while True:
        items, rv = list_all(namespace)
        for wl in items:  # catch up on what ended while we were not watching
            cond = ended(wl)
            t = cond and cond.get("lastTransitionTime")
            if t and datetime.fromisoformat(t.replace("Z", "+00:00")) >= cutoff:
                forward(wl, cluster, sent)
        if args.once:
            return 0
        try:
            stream = kube_get(
                f"{workloads_path(namespace)}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}", timeout=330
            )
            for line in stream:
                change = json.loads(line)
                if change.get("type") == "ERROR":  # 410 Gone: our resourceVersion is too old; list again
                    break
                if change.get("type") in ("ADDED", "MODIFIED"):
                    forward(change["object"], cluster, sent)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            print(json.dumps({"watch": "restarting", "error": str(exc)[:200]}), file=sys.stderr, flush=True)
            time.sleep(2)
        cutoff = datetime.now(timezone.utc) - timedelta(minutes=10)


if __name__ == "__main__":
    sys.exit(main())
