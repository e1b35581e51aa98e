"""The documentation's fenced blocks, each with what it is, so a test can run every one.

Every fenced block of the documents below is preceded (on the nearest non-blank line) by a marker
that says what it is and how it is checked:

    <!-- doc: run -->               shell: run with bash (-e, pipefail) in a sandbox: a temporary HOME
                                    and working directory holding a copy of the bundle folders
                                    (tests/examples, tests/regression, tests/real), deployments/
                                    and the shipped rules pack (rules/, to copy and change),
                                    `.venv` the test environment's; must exit 0
    <!-- doc: run, exits N -->      the same, and it must exit N
    <!-- doc: output -->           what the run (or python) block above prints on stdout, compared
                                    line by line: `...` inside a line stands for any text, a line
                                    that is only `...` for any number of lines (times, digests, paths)
    <!-- doc: python -->            Python, run in the sandbox (`python -`)
    <!-- doc: config -->            YAML: a valid attribution.yaml (flows/config.py)
    <!-- doc: config, defaults -->  ... and every value it shows is the default
    <!-- doc: rule -->              a rule file: added to a copy of the shipped pack, which must
                                    validate, and its own tests must pass
    <!-- doc: excerpt of PATH -->   an excerpt: its lines are lines of PATH, in order (`...` skips)
    <!-- doc: ci -->                commands .ci/run runs word for word (checked there; CI runs them)
    <!-- doc: services, start -->   shell that starts services (tests/integration/test_docs_services.py:
                                    ports 4200 and 8080 replaced by free ones, its last command run in
                                    the background, its exported environment kept for the blocks below)
    <!-- doc: services -->          shell run against what the start block started
    <!-- doc: figure -->            a drawing or a layout, not code
    <!-- doc: not run: REASON -->   cannot run here (a production cluster, root); listed by the test

A block without a marker fails the test: nothing in the documentation is silently unexecuted.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The documentation: the README, docs/, and the folders' own guides. tests/real/SOURCES.md is not
# documentation but the corpus's provenance: its fenced blocks are quoted logs.
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "deployments" / "README.md",
    ROOT / "rules" / "README.md",
    ROOT / "rules" / "data" / "README.md",
]
KINDS = ("run", "output", "python", "config", "rule", "excerpt", "ci", "services", "figure", "not run")
# copied into each sandbox: what the documented commands read
SANDBOX_COPIES = ("tests/examples", "tests/regression", "tests/real", "deployments", "rules")

_MARKER = re.compile(r"^\s*<!--\s*doc:\s*(?P<spec>.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # the opening fence's line, 1-based
    kind: str  # one of KINDS, or "" when the marker is missing or unknown
    arg: str  # what follows the kind: "exits 1", "defaults", "start", the excerpt's path, the reason
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def parse_marker(spec: str) -> tuple[str, str]:
    """`run, exits 1` -> ("run", "exits 1"); `excerpt of a/b.py` -> ("excerpt", "a/b.py");
    `not run: why` -> ("not run", "why")."""
    if spec.startswith("not run:"):
        return "not run", spec.removeprefix("not run:").strip()
    if spec.startswith("excerpt of "):
        return "excerpt", spec.removeprefix("excerpt of ").strip()
    kind, _, arg = spec.partition(",")
    kind = kind.strip()
    return (kind if kind in KINDS else ""), arg.strip()


def blocks(doc: Path) -> list[Block]:
    """Every fenced block of a markdown file, with its marker (indented fences in lists included)."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        body = "\n".join(_dedent(line, indent) for line in lines[i + 1 : end])
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(prev)
        kind, arg = parse_marker(marker["spec"]) if marker else ("", "")
        out.append(Block(doc, i + 1, kind, arg, m["lang"], body + "\n" if body else ""))
        i = end + 1
    return out


def _dedent(line: str, indent: int) -> str:
    """A fenced line without the fence's own indentation (a block inside a list item)."""
    return line[min(indent, len(line) - len(line.lstrip())) :]


def all_blocks() -> list[Block]:
    return [b for doc in DOCS if doc.exists() for b in blocks(doc)]


def expected_exit(block: Block) -> int:
    m = re.fullmatch(r"exits (\d+)", block.arg)
    return int(m[1]) if m else 0


# ---- output, compared


def _line_pattern(line: str) -> str:
    return ".*?".join(re.escape(part) for part in line.split("..."))


def output_matches(expected: str, actual: str) -> bool:
    """`actual` has every line of `expected` and nothing else, `...` eliding (see the module's doc).
    Trailing spaces and trailing blank lines are ignored on both sides."""
    pattern = []
    for line in expected.rstrip("\n").splitlines():
        line = line.rstrip()
        pattern.append(r"(?:[^\n]*\n)*?" if line.strip() == "..." else _line_pattern(line) + r"\n")
    text = "\n".join(line.rstrip() for line in actual.rstrip("\n").splitlines()) + "\n"
    return re.fullmatch("".join(pattern), text, flags=re.DOTALL) is not None


def output_diff(expected: str, actual: str) -> str:
    return "\n".join(
        difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), "the document shows", "it printed", lineterm=""
        )
    )


def excerpt_missing(excerpt: str, source: str) -> list[str]:
    """The lines of an excerpt not found in `source` in order (whitespace runs and trailing comments
    of the excerpt aside; a line holding only `...` skips)."""

    def norm(line: str) -> str:
        return " ".join(line.split())

    source_lines = [norm(line) for line in source.splitlines()]
    at, missing = 0, []
    for line in excerpt.splitlines():
        want = norm(re.sub(r"\s+#\s.*$", "", line))  # a comment added in the document
        if not want or want == "...":
            continue
        pattern = re.compile(_line_pattern(want))
        found = next((i for i in range(at, len(source_lines)) if pattern.fullmatch(source_lines[i])), None)
        if found is None:
            missing.append(line)
        else:
            at = found + 1
    return missing


# ---- the sandbox the commands run in


class Sandbox:
    """A temporary HOME and working directory, the bundle folders copied into it, `.venv` this test
    environment's (read through, never installed into), Prefect and attribution settings of the
    caller's environment left out."""

    def __init__(self, base: Path):
        self.home = base / "home"
        self.cwd = base / "work"
        self.home.mkdir(parents=True)
        self.cwd.mkdir(parents=True)
        for rel in SANDBOX_COPIES:
            shutil.copytree(ROOT / rel, self.cwd / rel, ignore=shutil.ignore_patterns("__pycache__"))
        (self.cwd / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("ATTRIBUTION_", "PREFECT_", "XDG_"))}
        self.env = {
            **keep,
            "HOME": str(self.home),
            "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),  # `python -m tests.…` is the checkout's
            "PREFECT_HOME": str(self.home / ".prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "LC_ALL": "C.UTF-8",
            "COLUMNS": "100",
        }

    # docs/accuracy.md's eval --leave-out runs diagnose tests/real twice: minutes on a busy host
    def run(self, script: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", "set -eo pipefail\n" + script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-"],
            input=code,
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def failure(block: Block, what: str, proc: subprocess.CompletedProcess[str] | None = None) -> str:
    tail = f"\n  stdout: {proc.stdout[-1500:]}\n  stderr: {proc.stderr[-1500:]}" if proc is not None else ""
    return f"{block.where}: {what}{tail}"
