"""The diagnosis vocabulary (../shared/spec/diagnosis.md), as types: one place for every word a
rule may emit and a consumer may read. A value outside these is an error wherever it appears
(a rule file, a rule's output, a model), naming the allowed values.

The project may add values (the contract allows it); it never renames or drops one.
"""

from __future__ import annotations

from enum import Enum


class Vocabulary(str, Enum):
    """A closed set of lower_snake_case words."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class Source(Vocabulary):
    """The sources of an attempt's evidence, by what they hold. The bundle format holds each (in this
    order, the order of a diagnosis' coverage); a configured source collects one of them."""

    app = "app"  # the workload's own output, per host
    syslog = "syslog"  # the kernel and the daemons, per host (syslog, journald)
    fabricmanager = "fabricmanager"  # NVIDIA Fabric Manager, per host
    scheduler_log = "scheduler_log"  # the scheduler's daemons (slurmctld, slurmd)
    sacct = "sacct"  # Slurm's accounting record of the job and its steps
    kueue = "kueue"  # the Kueue Workload, its pods, their nodes and events
    scheduler_record = "scheduler_record"  # another scheduler's record of the job and its history (PBS, LSF, Flux ...)
    metrics = "metrics"  # metric samples (Prometheus, DCGM)
    topology = "topology"  # the fabric's cabling: which host sits under which switch port
    scope = "scope"  # the attempt's scope itself (attempt.yaml's state line)


class TerminalState(Vocabulary):
    completed = "completed"
    hardware_failure = "hardware_failure"
    infrastructure_failure = "infrastructure_failure"
    application_failure = "application_failure"
    scheduler_action = "scheduler_action"
    unknown = "unknown"


class SubDomain(Vocabulary):
    none = "none"
    # hardware_failure
    gpu = "gpu"
    gpu_memory = "gpu_memory"
    nvlink = "nvlink"
    nic = "nic"
    host = "host"
    # infrastructure_failure
    network_link = "network_link"
    network_fabric = "network_fabric"
    storage = "storage"
    node_unreachable = "node_unreachable"
    # application_failure
    user_code = "user_code"
    gpu_oom = "gpu_oom"
    host_oom = "host_oom"
    numerical = "numerical"
    gpu_app_error = "gpu_app_error"
    # scheduler_action
    time_limit = "time_limit"
    preemption = "preemption"
    cancelled = "cancelled"
    eviction = "eviction"
    # unknown
    hang = "hang"
    insufficient_evidence = "insufficient_evidence"
    ambiguous = "ambiguous"  # may pair with any terminal_state but completed


# Which sub_domains belong to which terminal_state; `ambiguous` pairs with every failure state.
SUB_DOMAINS: dict[TerminalState, frozenset[SubDomain]] = {
    TerminalState.completed: frozenset({SubDomain.none}),
    TerminalState.hardware_failure: frozenset(
        {SubDomain.gpu, SubDomain.gpu_memory, SubDomain.nvlink, SubDomain.nic, SubDomain.host, SubDomain.ambiguous}
    ),
    TerminalState.infrastructure_failure: frozenset(
        {
            SubDomain.network_link,
            SubDomain.network_fabric,
            SubDomain.storage,
            SubDomain.node_unreachable,
            SubDomain.ambiguous,
        }
    ),
    TerminalState.application_failure: frozenset(
        {
            SubDomain.user_code,
            SubDomain.gpu_oom,
            SubDomain.host_oom,
            SubDomain.numerical,
            SubDomain.gpu_app_error,
            SubDomain.ambiguous,
        }
    ),
    TerminalState.scheduler_action: frozenset(
        {SubDomain.time_limit, SubDomain.preemption, SubDomain.cancelled, SubDomain.eviction, SubDomain.ambiguous}
    ),
    TerminalState.unknown: frozenset({SubDomain.hang, SubDomain.insufficient_evidence, SubDomain.ambiguous}),
}


# The verdicts whose blame is a host: the diagnosis names it (affected_nodes) whenever the evidence
# determines it, or says why it cannot (rules/python/hosts.py, rules/settle.py).
NODE_LEVEL: frozenset[tuple[TerminalState, SubDomain]] = frozenset(
    {(TerminalState.hardware_failure, sd) for sd in SUB_DOMAINS[TerminalState.hardware_failure]}
    | {
        (TerminalState.infrastructure_failure, SubDomain.node_unreachable),
        (TerminalState.infrastructure_failure, SubDomain.network_link),
    }
) - {(TerminalState.hardware_failure, SubDomain.ambiguous)}


def node_level(terminal_state: str | None, sub_domain: str | None) -> bool:
    """Whether a verdict of these words blames a host (an unknown word: no)."""
    try:
        return (TerminalState(terminal_state), SubDomain(sub_domain)) in NODE_LEVEL
    except ValueError:
        return False


class Action(Vocabulary):
    """What recovery should do. Actions that isolate (drain, reset, reboot) apply to exactly the
    diagnosis' affected_nodes; with no node named, the action is `investigate`, never a drain."""

    none = "none"  # nothing to recover (completed, a user's cancel)
    restart_job = "restart_job"  # resubmit / requeue as is
    fix_code = "fix_code"  # the workload's own bug: restarting will fail again
    investigate = "investigate"  # a node's fault that the evidence cannot place
    drain_node = "drain_node"
    drain_and_reset_gpu = "drain_and_reset_gpu"
    reboot_node = "reboot_node"


ISOLATING_ACTIONS = frozenset({Action.drain_node, Action.drain_and_reset_gpu, Action.reboot_node})


class Role(Vocabulary):
    # in this order a diagnosis lists its symptoms (rules/report.py): root first
    root = "root"
    contributing = "contributing"
    cascade = "cascade"
    context = "context"


class Confidence(Vocabulary):
    high = "high"
    medium = "medium"
    low = "low"


class CoverageStatus(Vocabulary):
    ok = "ok"
    empty = "empty"
    partial = "partial"
    error = "error"
    timeout = "timeout"
    unavailable = "unavailable"
    skipped = "skipped"


def check_pair(terminal_state: str, sub_domain: str) -> None:
    """Raise ValueError unless the two words are known and belong together."""
    ts, sd = TerminalState(terminal_state), SubDomain(sub_domain)
    if sd not in SUB_DOMAINS[ts]:
        allowed = ", ".join(sorted(s.value for s in SUB_DOMAINS[ts]))
        raise ValueError(f"sub_domain {sd.value!r} does not belong to terminal_state {ts.value!r} (allowed: {allowed})")
