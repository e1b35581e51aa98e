"""The user's cache directory: what a new process takes from disk instead of building it again (the
rules pack, its data tables, Hyperscan's databases, the grammar's macros), as Python keeps bytecode.

Each entry is named by what it is built from, so a changed source is another name, never a stale
entry. It is written whole under a name of its own process and thread, then renamed into place:
a reader sees a whole entry or none, and two processes building at once each keep a whole one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """A folder of this project's cache: $XDG_CACHE_HOME (else ~/.cache)/workload-attribution/<parts>."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "workload-attribution", *parts)


def temporary_name(path: Path) -> Path:
    """Where an entry is written before it is renamed to `path`: a hidden name of this process and
    thread, beside it (a rename within one folder is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
