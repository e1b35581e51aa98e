"""Reads: diagnoses from the warehouse, for people and programs with the `read` scope (a bearer
token, or the dashboard's session: the diagnosis page links to its JSON)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from workload_attribution.contracts.identity import NAME_PATTERN
from workload_attribution.service.auth import Scope, require

router = APIRouter(dependencies=[Depends(require(Scope.read, session=True))])
DIAGNOSIS_ID = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


def warehouse_call(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a read; a warehouse held by a writer past the wait is 503 + Retry-After, not an error."""
    from workload_attribution.warehouse.store import WarehouseLocked

    try:
        return fn(request.app.state.svc.warehouse, *args)
    except WarehouseLocked:
        raise HTTPException(503, "warehouse busy, retry", headers={"Retry-After": "2"}) from None


WHEN = "an RFC 3339 time (no zone: UTC), 'now', or a span ago: 90m, 26h, 7d"


def when(field: str, value: str | None) -> datetime | None:
    """A time filter as the CLI takes it; 422 naming the field otherwise."""
    from workload_attribution.contracts.errors import BadInput
    from workload_attribution.contracts.times import parse_when

    if not value:
        return None
    try:
        return parse_when(value)
    except (BadInput, OverflowError, ValueError):  # not a time, or a span further back than a datetime goes
        raise HTTPException(422, [{"field": field, "error": WHEN}]) from None


def diagnosis_id_ok(value: str) -> str:
    if not re.fullmatch(DIAGNOSIS_ID, value):
        raise HTTPException(422, [{"field": "diagnosis_id", "error": "not a diagnosis id (UUID)"}])
    return value.lower()


@router.get("/v1/diagnoses/{diagnosis_id}")
def get_diagnosis(diagnosis_id: str, request: Request) -> dict[str, Any]:
    """One diagnosis, the full document."""
    from workload_attribution.warehouse.reads import get_diagnosis as read

    doc = warehouse_call(request, read, diagnosis_id_ok(diagnosis_id))
    if doc is None:
        raise HTTPException(404, "no such diagnosis")
    return doc


@router.get("/v1/diagnoses")
def list_diagnoses(
    request: Request,
    cluster: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    since: Annotated[str | None, Query(max_length=40, description=WHEN)] = None,
    until: Annotated[str | None, Query(max_length=40, description=WHEN)] = None,
    terminal_state: Annotated[str | None, Query(pattern=r"^[a-z_]{1,40}$")] = None,
    sub_domain: Annotated[str | None, Query(pattern=r"^[a-z_]{1,40}$")] = None,
    node: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    symptom: Annotated[str | None, Query(pattern=r"^[a-z0-9_]{1,64}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> dict[str, Any]:
    """Diagnoses, newest attempt end first, filtered; `node` matches affected nodes and the root's node.
    Page with `offset` until it reaches `total`."""
    from workload_attribution.warehouse.reads import Filters
    from workload_attribution.warehouse.reads import list_diagnoses as read

    since_t, until_t = when("since", since), when("until", until)
    items, total = warehouse_call(
        request,
        read,
        Filters(
            cluster=cluster,
            since=since_t,
            until=until_t,
            terminal_state=terminal_state,
            sub_domain=sub_domain,
            node=node,
            symptom=symptom,
        ),
        limit,
        offset,
    )
    return {"items": items, "limit": limit, "offset": offset, "total": total}
