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
