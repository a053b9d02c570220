"""The planner's two errors: the model cannot be read (exit 1), or a setting or argument is bad (exit 3).

Sizes (``--gpu-memory 80GiB``) are parsed by ``conduit.units.parse_size``, which raises ``BadArguments``
itself; ``PlanArgumentError`` is a ``BadArguments`` too, so the CLI treats both alike (exit code 3).
"""

from __future__ import annotations

from conduit.errors import BadArguments, ConduitError


class ModelError(ConduitError):
    """The model directory, its config.json or its safetensors files cannot be used (exit code 1)."""

    exit_code = 1


class PlanArgumentError(BadArguments):
    """A setting or command-line argument of ``conduit plan`` is invalid (exit code 3, bad arguments)."""

    exit_code = 3
