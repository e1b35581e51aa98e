"""`python -m workload_attribution ...` is the `attribution` command."""

import sys

from workload_attribution.cli import main

sys.exit(main())
