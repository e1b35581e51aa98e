"""Alertmanager: one alert per affected node, POSTed to /api/v2/alerts, so the operators' routing,
grouping, inhibitions and silences apply to diagnoses as to any alert.

The labels say what and where (alertname WorkloadAttribution, cluster, node, terminal_state,
sub_domain, action: the recommended action, diagnosis_id: two attempts blaming one node are two
alerts); the annotations say why (summary, the root cause's evidence lines, the dashboard link,
and what was done to isolate the node or why not). An alert is sent once with `endsAt`
`resolve_after_h` ahead (Alertmanager would otherwise resolve it after its resolve_timeout, as it
does for a Prometheus that stopped sending); an undo, or a re-diagnosis that changes the verdict,
sends it again with `endsAt` now: resolved.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pydantic import Field

from workload_attribution.actions import http
from workload_attribution.actions.message import dashboard_link, evidence_lines, summary
from workload_attribution.actions.registry import NotifierConfig, Request, register
from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.errors import ActionError

ALERTNAME = "WorkloadAttribution"


class AlertmanagerConfig(NotifierConfig):
    kind: Literal["alertmanager"] = "alertmanager"
    url: str = Field(description="Alertmanager's base URL, e.g. http://alertmanager:9093")
    timeout_s: float = Field(10.0, gt=0)
    resolve_after_h: float = Field(24.0, gt=0, description="an alert no undo resolved ends by itself after this")

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "http", self.url.rstrip("/") + "/-/ready", {}


class Alertmanager:
    def __init__(self, config: AlertmanagerConfig):
        self.config = config

    def _post(self, alert: dict[str, Any]) -> None:
        with http.client(self.config.url, self.config.timeout_s) as c:
            http.send(c, "POST", "/api/v2/alerts", "alertmanager", json=[alert])

    def act(self, request: Request) -> dict[str, Any]:
        d, node = request.diagnosis, request.node
        labels = {
            "alertname": ALERTNAME,
            "cluster": d.attempt.cluster,
            "terminal_state": d.terminal_state.value,
            "sub_domain": d.sub_domain.value,
            "action": d.recommended_action.value,
            "diagnosis_id": d.diagnosis_id,
        } | ({"node": node} if node else {})
        link = dashboard_link(request.dashboard_url, d)
        annotations = {
            "summary": summary(d, node),
            "evidence": evidence_lines(d),
            "isolation": request.isolation,
        } | ({"dashboard": link} if link else {})
        now = datetime.now(timezone.utc)
        alert = {
            "labels": labels,
            "annotations": annotations,
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(hours=self.config.resolve_after_h)).isoformat(),
        } | ({"generatorURL": link} if link else {})
        self._post(alert)
        return {"labels": labels, "annotations": annotations, "startsAt": alert["startsAt"]}

    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]:
        sent = record.details
        if not sent.get("labels"):
            raise ActionError(f"action {record.action_id} kept no labels: its alert cannot be named")
        ends = datetime.now(timezone.utc).isoformat()
        annotations = {**(sent.get("annotations") or {}), "resolved": why}
        alert = {"labels": sent["labels"], "annotations": annotations, "startsAt": sent.get("startsAt") or ends}
        self._post({**alert, "endsAt": ends})
        return {"labels": sent["labels"], "endsAt": ends}


@register("alertmanager", AlertmanagerConfig, operation="alert", reversal="resolve")
def build(config: AlertmanagerConfig, cluster: Any) -> Alertmanager:
    return Alertmanager(config)
