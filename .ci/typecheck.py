"""mypy over the checkout as it is laid out.

The package's folders sit at the top of the checkout and pyproject.toml's
[tool.setuptools.package-dir] says which folder is which part of `workload_attribution`. mypy finds
modules by folder name, so it is handed each file with its module name, read from that same table:
no link tree, no installed copy, and errors name the checkout's own paths.
Run: .venv/bin/python .ci/typecheck.py   (exit status: mypy's)
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def sources() -> list[BuildSource]:
    """Every .py file of every mapped folder, under the module name the installed package gives it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found: dict[Path, str] = {}
    for package, folder in mapping.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[path] = ".".join([package, *parts])
    return [BuildSource(str(path), module) for path, module in sorted(found.items())]


def main() -> int:
    # mypy's own command line wants a target; the sources below are the real ones
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), "-c", "pass"])
    options.cache_dir = str(ROOT / ".mypy_cache")
    checked = sources()
    try:
        result = build.build(checked, options)
    except CompileError as exc:
        print("\n".join(exc.messages), file=sys.stderr)
        return 2
    for line in result.errors:
        print(line.replace(str(ROOT) + "/", ""))
    n = len([e for e in result.errors if ": error:" in e])
    print(f"{'Found ' + str(n) + ' errors' if n else 'Success: no issues found'} in {len(checked)} source files")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
