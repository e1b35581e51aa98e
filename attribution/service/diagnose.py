"""POST /v1/diagnose: an attempt's evidence in, its diagnosis out, in the same call."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
