"""The project as a user installs it: the built wheel in a fresh virtualenv, outside the checkout.

The venv gets the wheel alone (`--no-deps`); its dependencies come from the test environment's
site-packages through a .pth line, which adds that directory to the path without running the .pth
files in it, so the checkout's editable install (an import hook) is not seen: every import of
`workload_attribution` in the venv is the wheel's.
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_venv(base: Path) -> Path:
    """Build the wheel and install it into base/venv; returns the venv's bin/ directory."""
    dist = base / "dist"
    # an isolated build, as pip builds it for a user (the build backend from the package index)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(dist)],
        check=True,
        cwd=base,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("workload_attribution-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in [sysconfig.get_paths()["purelib"], *site.getsitepackages()] if Path(p).is_dir()]
    (Path(purelib) / "test-deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", purelib, str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # console scripts: --target installs none, so write the one the wheel declares
    script = venv / "bin" / "attribution"
    script.write_text(f"#!{py}\nimport sys\nfrom workload_attribution.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return venv / "bin"
