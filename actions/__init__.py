"""Acting on a stored diagnosis, safely, where operators already look: a cluster's action sinks
(sinks/: Slurm drains, Kubernetes cordons and taints, Alertmanager alerts, CloudEvents webhooks)
behind one protocol (registry.py), configured per cluster (config.py), with a guard before any
node is isolated (guard.py); act.py runs them after the diagnosis is written and undoes them.
Every decision is a row of the warehouse's `actions` table. docs/actions.md is the manual."""
