"""Scheduler commands that are not installed here (qstat, bjobs, flux ...), stood in on PATH by a
script that prints a recorded output (tests/recorded/, SOURCES.md) for the exact command line it
expects, fails like the real command for any other, and logs each call with its TZ."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = """#!{python}
import json, os, sys
spec = json.load(open({spec!r}))
argv = sys.argv[1:]
with open(spec["log"], "a") as log:
    log.write(json.dumps({{"argv": [{name!r}, *argv], "tz": os.environ.get("TZ")}}) + "\\n")
for answer in spec["answers"]:
    if answer["argv"] == argv:
        sys.stdout.write(open(answer["stdout"]).read() if answer["stdout"] else "")
        sys.stderr.write(answer["stderr"])
        sys.exit(answer["exit"])
sys.stderr.write({name!r} + ": unexpected command line: " + " ".join(argv) + "\\n")
sys.exit(99)
"""


@dataclass
class FakeCommands:
    """A bin folder of stand-ins; `path` goes first on PATH (or in a connector's command settings)."""

    path: Path

    def add(self, name: str, argv: list[str], stdout: Path | None, stderr: str = "", exit: int = 0) -> Path:
        """`name argv...` prints stdout's file (and stderr) and exits `exit`; other command lines fail."""
        spec_path = self.path / f"{name}.json"
        spec = json.loads(spec_path.read_text()) if spec_path.exists() else {"answers": [], "log": str(self.log)}
        spec["answers"].append({"argv": argv, "stdout": str(stdout) if stdout else "", "stderr": stderr, "exit": exit})
        spec_path.write_text(json.dumps(spec))
        command = self.path / name
        command.write_text(SCRIPT.format(python=sys.executable, spec=str(spec_path), name=name))
        command.chmod(0o755)
        return command

    @property
    def log(self) -> Path:
        return self.path / "calls.jsonl"

    def calls(self) -> list[dict[str, object]]:
        """Each call: its argv (the command's name first) and the TZ it ran with."""
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def fake_commands(tmp_path: Path) -> FakeCommands:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    return FakeCommands(folder)
