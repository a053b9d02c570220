"""One grammar for sizes and durations, one byte formatter and one percentile, for every command.

Sizes (``parse_size``) read the way ``nvidia-smi`` and ``free`` count memory:

    ======================  ===========  =====================================
    written                 meaning      example
    ======================  ===========  =====================================
    ``K M G T`` (any case)  binary       ``8G`` = ``8g`` = 8 GiB = 8589934592
    ``KiB MiB GiB TiB``     binary       ``512MiB`` = 536870912
    ``KB MB GB TB``         decimal      ``80GB`` = 80000000000
    ``B``                   bytes        ``1500000000B``
    a bare number           refused      ``80`` -> "did you mean 80GiB?"
    ======================  ===========  =====================================

A bare number is refused because every place a person types a size (``--gpu-memory``, ``--vram-free``) means
gibibytes far more often than bytes, and reading ``80`` as 80 bytes gives a silently wrong answer. The one
exception is an option whose name says its unit (``--kv-cache-memory-bytes``, vLLM's own flag, which takes
bytes): there ``bare_bytes=True`` reads a bare number as bytes.

Durations (``parse_duration``): ``500ms``, ``30s``, ``10m``, ``1h30m``, ``2d``, or a bare number of seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from conduit.errors import BadArguments

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)\s*")
_SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "k": KiB, "m": MiB, "g": GiB, "t": TiB,
    "ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE_HINT = "write it like 80GiB, 80G, 512MiB, 80GB (decimal) or 1500000000B"

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(text: str, *, option: str = "size", bare_bytes: bool = False) -> int:
    """Parse a memory size into bytes (grammar in the module docstring).

    Args:
        text: what the person typed, e.g. ``"80GiB"``.
        option: the option or key it came from (``--gpu-memory``), named in the error.
        bare_bytes: read a bare number as bytes (only for an option named ``...-bytes``).

    Returns: bytes, > 0.

    Raises:
        BadArguments: not a size, a bare number (with a "did you mean NGiB?" hint), an unknown unit,
            zero or negative (exit code 3).
    """
    m = _SIZE_RE.fullmatch(str(text))
    if not m:
        raise BadArguments(f"{option}: {text!r} is not a size", hint=_SIZE_HINT)
    number, unit = float(m.group(1)), m.group(2)
    if not unit and bare_bytes:
        unit = "b"
    if not unit:
        raise BadArguments(f"{option}: {text!r} has no unit; did you mean {m.group(1)}GiB?", hint=_SIZE_HINT)
    mult = _SIZE_UNITS.get(unit.lower())
    if mult is None:
        raise BadArguments(f"{option}: unknown size unit {unit!r} in {text!r}", hint=_SIZE_HINT)
    value = int(number * mult)
    if value <= 0:
        raise BadArguments(f"{option}: a size must be positive, got {text!r}", hint=_SIZE_HINT)
    return value


def parse_duration(text: str, *, option: str = "duration") -> float:
    """``"10m"``, ``"1h30m"``, ``"90s"``, ``"500ms"`` or a bare number of seconds -> seconds (float).

    Raises:
        BadArguments: anything else, or a value that is not finite (exit code 3).
    """
    t = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise BadArguments(f"{option}: {text!r} is not a duration", hint="write it like 30s, 10m, 1h30m or 500ms")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def format_bytes(n: int | float | None) -> str:
    """Bytes for people, in binary units as ``nvidia-smi`` counts: ``21474836480`` -> ``20.00 GiB``,
    ``536870912`` -> ``512.0 MiB``, ``1000`` -> ``1000 B``; None -> ``?``."""
    if n is None:
        return "?"
    a = abs(n)
    if a >= TiB:
        return f"{n / TiB:.2f} TiB"
    if a >= GiB:
        return f"{n / GiB:.2f} GiB"
    if a >= MiB:
        return f"{n / MiB:.1f} MiB"
    if a >= KiB:
        return f"{n / KiB:.1f} KiB"
    return f"{int(n)} B"


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) by linear interpolation (numpy ``method="linear"``).

    With the values sorted as v[0..n-1], rank h = (n - 1) * q / 100 and the result is
    v[floor h] + (h - floor h) * (v[floor h + 1] - v[floor h]). Returns None for no values.

    Raises:
        ValueError: q outside [0, 100] (a programming error, not a user's).
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    data = sorted(values)
    if not data:
        return None
    h = (len(data) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (h - lo) * (data[hi] - data[lo])
