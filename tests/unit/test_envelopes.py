"""A container runtime's envelope changes no verdict (tests/envelopes.py): one-attempt bundles of
varied prefixes (a one-rank exception behind [rankN]:, srun labels, Open MPI's [1,N]<stderr>:, a
collector's time, a traceback with no time) diagnosed bare and with every application log line
wrapped as CRI, CRI split in partial records, Docker json-file (whole, split, Go's escapes) and
kubectl logs --timestamps write it."""

from pathlib import Path

import pytest

from tests.envelopes import ENVELOPES, changes

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = [
    ROOT / "real" / "torch-cuda-oom-rank3-1",  # a collector's time before [defaultN]:
    ROOT / "real" / "app-thunder-traceback-srun-label-1",  # a traceback behind srun labels
    ROOT / "real" / "app-thunder-keyerror-host-rank-prefix-1",  # [host:N]: prefixes
    ROOT / "real" / "nccl-ib-local-catastrophic-ompi-1",  # Open MPI's [1,N]<stderr>:
    ROOT / "real" / "lsf-python-traceback-exit1-snakemake2274-1",  # a traceback with no time at all
    ROOT / "regression" / "python_exception_one_rank_cascade-1-0",  # generated: one rank's exception, the rest cascade
]


@pytest.mark.slow  # 6 bundles in 6 envelopes, each diagnosed: one to two minutes of one core
@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda b: b.name)
def test_an_envelope_changes_no_verdict(bundle, tmp_path):
    assert changes([bundle], ENVELOPES, tmp_path) == []
