"""What the notifiers say about a diagnosis (Alertmanager's annotations, the webhook's data): one
wording for every sink."""

from __future__ import annotations

from workload_attribution.contracts.models import Diagnosis


def dashboard_link(base: str | None, d: Diagnosis) -> str:
    """The diagnosis' page on the dashboard (`attribution serve`), when its URL is configured."""
    return f"{base.rstrip('/')}/ui/diagnoses/{d.diagnosis_id}" if base else ""


def evidence_lines(d: Diagnosis, most: int = 3) -> str:
    """The root cause's evidence, `ref: text`, one per line."""
    by_id = {e.id: e for e in d.evidence}
    refs = [by_id[i] for i in (d.root_cause.evidence if d.root_cause else []) if i in by_id]
    return "\n".join(f"{e.ref}: {e.text[:300]}" for e in refs[:most])


def summary(d: Diagnosis, node: str | None) -> str:
    """One line: the root cause, where, the verdict, the attempt and the recommended action."""
    cause = d.root_cause.title if d.root_cause else "no root cause"
    where = f" on {node}" if node else ""
    return (
        f"{cause}{where}: {d.terminal_state.value}/{d.sub_domain.value} (confidence {d.confidence.value}), "
        f"{d.attempt.cluster} job {d.attempt.job_id} attempt {d.attempt.attempt}; action {d.recommended_action.value}"
    )
