"""Webhook: a CloudEvents 1.0 event in structured mode (one JSON document,
`application/cloudevents+json`) POSTed to any URL, for incident tools, signed with the scheme the
service's own webhooks use (contracts/signature.py: X-Attribution-Timestamp and
X-Attribution-Signature, HMAC-SHA256 over "<timestamp>.<body>" with the secret in `secret_env`).

Two event types: `io.attribution.diagnosis.raised` (a node to look at or isolated, the event's
`id` the action's) and `io.attribution.diagnosis.withdrawn` (an undo or a re-diagnosis took it
back; `data.withdraws` names the raised event). No secret set: nothing is sent unsigned.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import Field

from workload_attribution.actions import http
from workload_attribution.actions.message import dashboard_link, evidence_lines, summary
from workload_attribution.actions.registry import NotifierConfig, Request, register
from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.errors import ActionError
from workload_attribution.contracts.signature import sign

RAISED = "io.attribution.diagnosis.raised"
WITHDRAWN = "io.attribution.diagnosis.withdrawn"
CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"


class WebhookConfig(NotifierConfig):
    kind: Literal["webhook"] = "webhook"
    url: str = Field(description="where the events are POSTed")
    secret_env: str = Field("ATTRIBUTION_ACTIONS_WEBHOOK_SECRET", description="env var: the HMAC-SHA256 key")
    source: str = Field("/workload-attribution", description="the events' `source`; the cluster is appended")
    timeout_s: float = Field(10.0, gt=0)


class Webhook:
    def __init__(self, config: WebhookConfig):
        self.config = config

    def _post(self, event: dict[str, Any]) -> None:
        secret = os.environ.get(self.config.secret_env)
        if not secret:
            raise ActionError(f"webhook: ${self.config.secret_env} is not set: nothing is sent unsigned")
        body = json.dumps(event, separators=(",", ":")).encode()
        headers = {"Content-Type": CONTENT_TYPE, **sign(secret, body)}
        with http.client(self.config.url, self.config.timeout_s) as c:
            http.send(c, "POST", "", "webhook", content=body, headers=headers)

    def _event(self, kind: str, event_id: str, cluster: str, subject: str, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "specversion": "1.0",
            "id": event_id,
            "source": f"{self.config.source.rstrip('/')}/{cluster}",
            "type": kind,
            "subject": subject,
            "time": datetime.now(timezone.utc).isoformat(),
            "datacontenttype": "application/json",
            "data": data,
        }

    def act(self, request: Request) -> dict[str, Any]:
        d, node = request.diagnosis, request.node
        data = {
            "diagnosis_id": d.diagnosis_id,
            "attempt": d.attempt.id.model_dump(mode="json"),
            "node": node,
            "terminal_state": d.terminal_state.value,
            "sub_domain": d.sub_domain.value,
            "confidence": d.confidence.value,
            "recommended_action": d.recommended_action.value,
            "root_cause": d.root_cause.model_dump(mode="json") if d.root_cause else None,
            "summary": summary(d, node),
            "evidence": evidence_lines(d),
            "isolation": request.isolation,
            "dashboard": dashboard_link(request.dashboard_url, d) or None,
            "rules_version": d.rules.version,
        }
        event = self._event(RAISED, request.action_id, d.attempt.cluster, node or d.attempt.id.key, data)
        self._post(event)
        return {"event_id": event["id"], "subject": event["subject"], "source": event["source"]}

    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]:
        data = {"diagnosis_id": record.diagnosis_id, "node": record.node, "withdraws": record.action_id, "why": why}
        subject = record.details.get("subject") or record.node or record.diagnosis_id
        event = self._event(WITHDRAWN, f"{record.action_id}-withdrawn", record.cluster, subject, data)
        self._post(event)
        return {"event_id": event["id"]}


@register("webhook", WebhookConfig, operation="notify", reversal="withdraw")
def build(config: WebhookConfig, cluster: Any) -> Webhook:
    return Webhook(config)
