"""What publishing a diagnosis keeps besides the diagnosis itself: its blamed subjects' history
from the warehouse (tasks/memory.py) and its evidence in the archive (tasks/archiving.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workload_attribution.contracts.models import Diagnosis
from workload_attribution.rules.engine import Settings
from workload_attribution.rules.pack import Pack
from workload_attribution.tasks.archiving import archive_attempt
from workload_attribution.tasks.memory import MemoryPolicy, remember
from workload_attribution.warehouse.archive import Outcome

if TYPE_CHECKING:  # a diagnosis with no warehouse never loads it
    from workload_attribution.warehouse.store import Warehouse


@dataclass
class Keeping:
    archive: str | None = None  # the archive's location; None: nothing archived
    archive_max_bytes: int = 256 * 2**20
    memory: MemoryPolicy = field(default_factory=MemoryPolicy)
    pack: Pack | None = None  # the pack and settings the diagnosis was made with (the archive's manifest)
    settings: Settings = field(default_factory=Settings)

    @property
    def archives(self) -> bool:
        """Whether a published attempt's evidence is archived (keep; flows.pipeline.Options.archives)."""
        return bool(self.archive and self.pack is not None)


def keep(d: Diagnosis, wh: Warehouse, topology: list[tuple] | None, staging: str | None, keeping: Keeping) -> Diagnosis:
    """The diagnosis with its history (the action escalated when it calls for it), its evidence
    archived (or a note saying why not); the archive keeps the rules' own verdict."""
    outcome = Outcome.of(d)
    d = remember(d, wh, topology, keeping.memory)
    if staging and keeping.archives:
        assert keeping.archive and keeping.pack is not None  # what archives says
        note = archive_attempt(
            staging, d, outcome, keeping.archive, keeping.pack, keeping.settings, keeping.archive_max_bytes
        )
        if note:
            d.notes.append(note)
    return d
