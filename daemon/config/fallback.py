"""The profile's ``[fallback]`` table: where tools go while the primary channel is unhealthy.

Shape (docs/design.md "Routing")::

    channel = "local"                    # the primary
    model = "qwen"
    [fallback]
    channel = "taotoken"                 # a channel of the profile, not the primary
    model = "claude-sonnet-4-20250514"   # the model to use there
    after_s = 20                         # seconds the primary must be unhealthy (or healthy again) to switch

The agent judges the primary and writes its decision to the routing file (``conduit.daemon.config.routing``); the
sync daemon renders every tool that uses the primary, and has not set ``[tools.X] fallback = false``, with the
fallback channel and model while that decision says ``fallback``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from conduit.daemon.config.fields import Float, ModelId

DEFAULT_AFTER_S = 20.0
"""Seconds the primary must stay unhealthy before tools switch, and healthy before they switch back."""

MAX_AFTER_S = 3600.0
"""Upper bound of ``fallback.after_s``, seconds."""


class FallbackSettings(BaseModel):
    """A validated ``[fallback]`` table.

    Attributes:
        channel: the channel tools use while the primary is unhealthy (must be defined, must not be the primary).
        model: the model id to use on that channel.
        small_model: the small/background model there, or None (the tool keeps none).
        after_s: hysteresis, seconds (over 0, at most ``MAX_AFTER_S``): the primary unhealthy this long -> fallback;
            ready and probed ok this long -> back.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    channel: str
    model: ModelId
    small_model: ModelId | None = None
    after_s: Float = Field(default=DEFAULT_AFTER_S, gt=0, le=MAX_AFTER_S)
