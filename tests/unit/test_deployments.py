"""deployments/prefect.yaml is what flows/deployments.py declares (one list, two readers)."""

from tests.conftest import ROOT


def test_prefect_yaml_is_the_rendered_list():
    from workload_attribution.flows.deployments import render_yaml

    assert (ROOT / "deployments" / "prefect.yaml").read_text() == render_yaml(), (
        "regenerate: attribution deploy --print-yaml > deployments/prefect.yaml"
    )


def test_deployments_reference_installed_flows_by_import_path():
    import importlib

    from workload_attribution.flows.deployments import DEPLOYMENTS

    for d in DEPLOYMENTS:
        module, func = d.flow.rsplit(".", 1)
        flow = getattr(importlib.import_module(module), func)
        assert flow.name == d.flow_name and "/" not in d.flow and not d.flow.endswith(".py")


def test_a_crashed_attempt_run_is_run_again_a_bounded_number_of_times():
    """flows/deployments.py's automation schedules a crashed run again; the flow bounds how often."""
    import pytest

    from workload_attribution.flows.attempt import CrashedTooOften, crash_retry_note
    from workload_attribution.flows.deployments import CRASH_RETRIES

    reasons = ["no heartbeat for 90 s: its worker is gone"]
    assert crash_retry_note(2, reasons) == f"run 2 of this attempt, after a crash: {reasons[0]}"
    assert crash_retry_note(1 + CRASH_RETRIES, reasons * CRASH_RETRIES).startswith(f"run {1 + CRASH_RETRIES} ")
    with pytest.raises(CrashedTooOften, match=f"after {CRASH_RETRIES + 1} crash.*its worker is gone.*not again"):
        crash_retry_note(2 + CRASH_RETRIES, reasons * (CRASH_RETRIES + 1))


def test_prefect_server_env_is_the_rendered_settings():
    from workload_attribution.flows.deployments import render_server_env

    assert (ROOT / "deployments" / "prefect-server.env").read_text() == render_server_env(), (
        "regenerate: attribution deploy --print-server-env > deployments/prefect-server.env"
    )


def test_the_server_settings_are_prefect_settings_it_reads():
    """Each name is a Prefect setting (a misspelt one would be ignored silently) that parses to its value."""
    import os
    from datetime import timedelta
    from unittest import mock

    from prefect.settings import Settings

    from workload_attribution.flows.deployments import SERVER_SETTINGS

    with mock.patch.dict(os.environ, SERVER_SETTINGS):
        read = _flat(Settings().model_dump())
    for name, value in SERVER_SETTINGS.items():
        assert name in read, f"{name}: not a Prefect setting"
        got = read[name].total_seconds() if isinstance(read[name], timedelta) else read[name]  # seconds settings
        assert str(got).removesuffix(".0") == value, (name, read[name])


def _flat(doc: dict, prefix: str = "PREFECT") -> dict:
    out = {}
    for key, value in doc.items():
        name = f"{prefix}_{key.upper()}"
        out.update(_flat(value, name) if isinstance(value, dict) else {name: value})
    return out
