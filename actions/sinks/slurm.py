"""Slurm: drain the affected nodes, the reason naming the diagnosis id and its root symptom
(`attribution <diagnosis_id> <root symptom> <terminal_state>/<sub_domain>`); undo resumes a node
whose reason is still ours.

How it talks to Slurm: nodes are read through slurmrestd when the cluster's `slurm:` block names
one (the connector's client and JWT: connectors/slurm.py Rest), else with `scontrol show node -o`.
Nodes are updated through slurmrestd only where its API offers it: POST /slurm/<v>/node/{name}
exists from v0.0.39 (Slurm 23.02) on; slurmrestd 22.05 (v0.0.38, what Debian 12 ships and the tests
run) can read nodes but not change them, so the update is `scontrol update nodename=N state=drain
reason=...` (state=resume to undo) with the cluster's SLURM_CONF (`slurm_conf`, else this
process's) and this host's Slurm credentials (munge), as an operator's own scontrol would.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from workload_attribution.actions import http
from workload_attribution.actions.registry import Fleet, Request, SinkConfig, register
from workload_attribution.connectors.slurm import Rest, SlurmSource
from workload_attribution.contracts.actions import ActionRecord
from workload_attribution.contracts.errors import ActionError, ActionSkipped, SourceError, first_line

# node states (base or flag, as scontrol and slurmrestd spell them) that put a node out of service
OUT_OF_SERVICE = ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "MAINT", "REBOOT", "POWER")
UPDATE_PATH = "/slurm/{v}/node/{name}"
# scontrol's answers that mean the controller was not reached: worth trying again
_UNREACHED = ("Unable to contact slurm controller", "Connection refused", "Socket timed out", "Zero Bytes")


class SlurmSinkConfig(SinkConfig):
    kind: Literal["slurm"] = "slurm"
    scontrol: str = Field("scontrol", description="the scontrol command")
    slurm_conf: str | None = Field(None, description="SLURM_CONF for scontrol (default: this process's)")
    timeout_s: float = Field(15.0, gt=0)

    def probe(self) -> tuple[str, str, dict[str, str]]:
        return "command", self.scontrol, {}


@dataclass(frozen=True)
class Node:
    name: str
    states: frozenset[str]  # base state and flags, upper case: IDLE, DRAIN, NOT_RESPONDING ...
    partitions: tuple[str, ...]
    reason: str

    @property
    def drained(self) -> bool:
        return any("DRAIN" in s for s in self.states)

    @property
    def out_of_service(self) -> bool:
        return any(word in s for s in self.states for word in OUT_OF_SERVICE)


def parse_scontrol(text: str) -> list[Node]:
    """`scontrol show node -o`: one node a line, `Key=value` fields, Reason= last (with `[user@time]`)."""
    nodes = []
    for line in text.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        if not name:
            continue
        state = re.search(r"\bState=(\S+)", line)
        parts = re.search(r"\bPartitions=(\S+)", line)
        reason = re.search(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$", line)
        nodes.append(
            Node(
                name=name.group(1),
                states=frozenset(state.group(1).upper().split("+")) if state else frozenset(),
                partitions=tuple(parts.group(1).split(",")) if parts else (),
                reason=reason.group(1).strip() if reason else "",
            )
        )
    return nodes


def parse_rest(doc: dict[str, Any]) -> list[Node]:
    """slurmrestd's /nodes: `state` a word (v0.0.38) or a list (v0.0.40 on), `state_flags` the rest."""
    nodes = []
    for n in doc.get("nodes") or []:
        state = n.get("state")
        words = [state] if isinstance(state, str) else list(state or [])
        words += list(n.get("state_flags") or [])
        nodes.append(
            Node(
                name=str(n.get("name")),
                states=frozenset(str(w).upper() for w in words),
                partitions=tuple(n.get("partitions") or ()),
                reason=str(n.get("reason") or ""),
            )
        )
    return nodes


def drain_reason(request: Request) -> str:
    """The reason a drained node shows: the diagnosis id first, what scontrol passes as one word each."""
    d = request.diagnosis
    root = d.root_cause.symptom if d.root_cause else "no_root"
    text = f"attribution {d.diagnosis_id} {root} {d.terminal_state.value}/{d.sub_domain.value}"
    return re.sub(r"[^\w ./:-]", "_", text)


class Slurm:
    def __init__(self, config: SlurmSinkConfig, rest_source: SlurmSource | None, transport: Any = None):
        self.config = config
        self.rest_source = rest_source if rest_source is not None and rest_source.rest_url else None
        self.transport = transport
        self._rest: Rest | None = None

    def _api(self) -> Rest | None:
        """The connector's slurmrestd client (negotiated once), when the cluster names slurmrestd."""
        if self.rest_source is None:
            return None
        if self._rest is None:
            try:
                self._rest = Rest(self.rest_source, self.transport)
            except SourceError as exc:
                raise ActionError(f"slurmrestd: {first_line(exc)}", transient=exc.transient) from None
        return self._rest

    def _scontrol(self, *args: str) -> str:
        env = {**os.environ, **({"SLURM_CONF": self.config.slurm_conf} if self.config.slurm_conf else {})}
        try:
            out = subprocess.run(
                [self.config.scontrol, *args], capture_output=True, text=True, timeout=self.config.timeout_s, env=env
            )
        except subprocess.TimeoutExpired:
            raise ActionError(f"scontrol did not answer within {self.config.timeout_s:g}s", transient=True) from None
        except FileNotFoundError:
            raise ActionError(f"{self.config.scontrol}: not installed") from None
        if out.returncode != 0:
            said = (out.stderr or out.stdout).strip().splitlines()
            msg = said[0] if said else f"exit {out.returncode}"
            raise ActionError(f"scontrol {args[0]} failed: {msg}", transient=any(s in msg for s in _UNREACHED))
        return out.stdout

    def nodes(self, name: str | None = None) -> list[Node]:
        api = self._api()
        if api is None:
            return parse_scontrol(self._scontrol("show", "node", *([name] if name else []), "-o"))
        try:
            doc = api.get(f"/slurm/{api.version}/node/{name}" if name else f"/slurm/{api.version}/nodes")
        except SourceError as exc:
            raise ActionError(f"slurmrestd: {first_line(exc)}", transient=exc.transient) from None
        return parse_rest(doc)

    def node(self, name: str) -> Node:
        found = [n for n in self.nodes(name) if n.name == name]
        if not found:
            raise ActionError(f"slurm: no node {name!r}")
        return found[0]

    def update(self, name: str, state: str, reason: str | None = None) -> str:
        """Set a node's state (DRAIN with a reason, RESUME); says which way it went."""
        api = self._api()
        if api is not None and api.offers("post", UPDATE_PATH.replace("{name}", "{node_name}")):
            body: dict[str, Any] = {"state": [state]} | ({"reason": reason} if reason else {})
            r = http.send(api.client, "POST", f"/slurm/{api.version}/node/{name}", "slurmrestd", json=body)
            errors = (r.json() or {}).get("errors") if r.content else None
            if errors:
                raise ActionError(f"slurmrestd: node {name}: {errors}")
            return "slurmrestd"
        self._scontrol("update", f"nodename={name}", f"state={state}", *([f"reason={reason}"] if reason else []))
        return "scontrol"

    def fleet(self) -> Fleet:
        partitions: dict[str, set[str]] = {}
        out = set()
        for n in self.nodes():
            for p in n.partitions:
                partitions.setdefault(p, set()).add(n.name)
            if n.out_of_service:
                out.add(n.name)
        return Fleet({p: frozenset(m) for p, m in partitions.items()}, frozenset(out))

    def act(self, request: Request) -> dict[str, Any]:
        name = request.node
        if name is None:
            raise ActionSkipped("slurm: no node to drain")
        node = self.node(name)
        reason = drain_reason(request)
        if node.drained and request.diagnosis.diagnosis_id not in node.reason:
            raise ActionSkipped(f"{name} is drained already ({node.reason or 'no reason'}): that drain stands")
        via = self.update(name, "DRAIN", reason)
        return {"reason": reason, "via": via, "state_before": "+".join(sorted(node.states))}

    def revert(self, record: ActionRecord, why: str) -> dict[str, Any]:
        name = record.node or ""
        node = self.node(name)
        if not node.drained:
            raise ActionSkipped(f"{name} is not drained ({'+'.join(sorted(node.states))}): nothing to resume")
        if record.diagnosis_id not in node.reason:
            raise ActionSkipped(f"{name} is drained for another reason now ({node.reason}): left drained")
        via = self.update(name, "RESUME")
        return {"via": via, "reason_before": node.reason}


@register("slurm", SlurmSinkConfig, operation="drain", reversal="resume", isolates=True)
def build(config: SlurmSinkConfig, cluster: Any) -> Slurm:
    """The cluster's `slurm:` block (slurmrestd and its JWT) is how nodes are read."""
    return Slurm(config, getattr(cluster, "slurm", None))
