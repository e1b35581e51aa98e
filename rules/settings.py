"""What the rules run with (`rules:` in the configuration)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    """What the rules run with (`rules:` in the configuration)."""

    model_config = ConfigDict(extra="forbid")

    skew_tolerance_s: float = Field(
        30.0, ge=0, le=3600, description="clock skew between hosts tolerated when ordering events"
    )
    default_collective_timeout_s: float = Field(
        600.0, gt=0, le=86400, description="NCCL timeout assumed when none is printed"
    )
    lookback_margin_s: float = Field(120.0, ge=0, le=86400, description="extra look-back before the first cascade")
    burst_window_s: float = Field(
        300.0, ge=0, le=86400, description="repeats of one symptom within this window are one burst"
    )
    rule_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="a rule running longer is interrupted and reported failed"
    )
