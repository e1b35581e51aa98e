"""Slurm hostlist expressions: 'node[01-04,07],gpu-a3-[157-160]' -> explicit host names."""

from __future__ import annotations

import itertools
import re

from workload_attribution.contracts.errors import BadInput

_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
MAX_HOSTS = 1_000_000  # more than any cluster; a bracket product past it is a malformed (or hostile) list


class HostlistError(BadInput):
    """Not a hostlist expression (unbalanced brackets, bad range, a product past MAX_HOSTS)."""


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        if int(hi) - int(lo) > 100_000:
            raise HostlistError(f"range {item!r} too large in hostlist {expr!r}")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def expand_hostlist(expr: str | None) -> list[str]:
    if not expr or expr.strip() in ("", "None assigned", "(null)"):
        return []
    hosts: list[str] = []
    for part in _split_top(expr.strip()):
        pieces = re.split(r"(\[[^\]]*\])", part)
        choices = [_expand_ranges(p[1:-1], expr) if p.startswith("[") else [p] for p in pieces if p != ""]
        n = 1
        for c in choices:
            n *= len(c)
        if n + len(hosts) > MAX_HOSTS:
            raise HostlistError(f"too many hosts (over {MAX_HOSTS:,}) in hostlist {expr[:80]!r}")
        hosts.extend("".join(c) for c in itertools.product(*choices))
    return list(dict.fromkeys(hosts))  # in order, each once
