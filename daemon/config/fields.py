"""Field types of the profile's models that take TOML values at their word.

pydantic's lax mode turns ``true`` into ``1`` (``version = true``, ``port = true`` were accepted) and ``1`` into
``True``; TOML has real booleans and integers, so the profile's numbers and switches are strict about them. A
float field takes an integer (``timeout = 600``) but never a boolean, infinity or NaN (``timeout = inf`` gave
"internal error: OverflowError" when turned into milliseconds): the models set ``allow_inf_nan=False`` and a
number of seconds has an upper bound.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, StrictBool, StrictInt

from conduit.daemon.config.normalize import describe_chars

__all__ = ["MAX_SECONDS", "Bool", "Float", "Int", "ModelId", "check_model_id", "refuse_bool", "refuse_bool_int"]

MAX_SECONDS = 86400.0
"""Upper bound of a duration in the ``[vllm]`` table, seconds (one day); far above any real one, and finite
for the event loop's timers."""


def refuse_bool(value: Any, expected: str = "a number") -> Any:
    """``value`` unless it is a boolean (a bool is an int in Python, so pydantic would take it for a number).

    Raises:
        ValueError: ``value`` is True or False: "expected ``expected``, not `true`" (as the profile writes it).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {expected}, not `{str(value).lower()}`")
    return value


def refuse_bool_int(value: Any) -> Any:
    """``refuse_bool`` worded for an integer field. Raises ValueError for True/False."""
    return refuse_bool(value, "an integer")


Int = Annotated[StrictInt, BeforeValidator(refuse_bool_int)]
"""An integer, not a boolean and not a float."""

Float = Annotated[float, BeforeValidator(refuse_bool)]
"""A number (an integer is fine), not a boolean; with ``allow_inf_nan=False`` on the model, finite."""

Bool = StrictBool
"""``true`` or ``false``, not ``1`` or ``"yes"``."""


def check_model_id(value: str) -> str:
    """A model id as gateways name them: surrounding whitespace dropped; empty, inner whitespace, control or
    invisible characters refused (they would be sent verbatim and answered 404 "model not found").

    Raises:
        ValueError: with the character named (pydantic turns it into the profile error).
    """
    text = value.strip()
    if not text:
        raise ValueError("a model id cannot be empty")
    for pos, ch in enumerate(text):
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            raise ValueError(f"a model id cannot hold {describe_chars(ch)} (position {pos})")
    return text


ModelId = Annotated[str, AfterValidator(check_model_id)]
