"""The import picture has no arrow from a lower layer to a higher one (checked on the source's AST,
every import, module level or inside a function):

    interfaces (CLI, service, dashboard: the package root, interfaces/)
      -> flows -> tasks | actions (never on each other)
      -> connectors | rules | warehouse (never on each other)
      -> staging -> contracts (nothing)

The folders and their import names come from pyproject.toml's package-dir table, the one place
that maps them.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "workload_attribution"
MAPPING = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
# layer name -> folder, from the mapping: the package root is the interfaces
FOLDERS = {(name.split(".")[1] if "." in name else "interfaces"): folder for name, folder in MAPPING.items()}
LAYER = {
    "contracts": 0,
    "staging": 1,
    "connectors": 2,
    "rules": 2,
    "warehouse": 2,
    "tasks": 3,
    "actions": 3,
    "flows": 4,
    "interfaces": 5,
}
TOP_LEVEL_NAMES = set(FOLDERS.values()) | set(FOLDERS)


def package_of(module: str) -> str:
    """workload_attribution.<sub>... -> the layer's name ('interfaces' for the package root's own modules)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYER and parts[1] != "interfaces":
        return parts[1]
    return "interfaces"


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module)] + [
                (node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module == PACKAGE
            ]
    return out


def sources():
    for layer, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield layer, path


def test_every_module_is_checked():
    assert set(FOLDERS) == set(LAYER), "every mapped folder has a layer here"
    found = {layer for layer, _ in sources()}
    assert found == set(LAYER)
    assert sum(1 for _ in sources()) > 40


@pytest.mark.parametrize("layer, path", list(sources()), ids=lambda v: str(v).replace(str(ROOT) + "/", ""))
def test_no_arrow_points_up_or_sideways(layer, path):
    wrong = []
    for line, name in imports(path):
        head = name.split(".")[0]
        if head in TOP_LEVEL_NAMES or head == "tests":
            wrong.append(f"{path.name}:{line} imports {name} (by its folder name, not {PACKAGE}.*)")
            continue
        if head != PACKAGE or name == PACKAGE:
            continue
        if name in (f"{PACKAGE}.version",):  # the package root's version(): metadata, no layer
            continue
        target = package_of(name)
        if target == layer:
            continue
        if LAYER[target] >= LAYER[layer]:
            wrong.append(f"{path.relative_to(ROOT)}:{line} ({layer}) imports {name} ({target})")
    assert wrong == []


def test_the_ground_layer_imports_nothing_of_the_project():
    for path in sorted((ROOT / "contracts").glob("*.py")):
        assert all(package_of(n) == "contracts" for _, n in imports(path) if n.startswith(PACKAGE + ".")), path
