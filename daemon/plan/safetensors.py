"""Exact weight bytes from safetensors headers, without reading the tensor data (torch is not needed).

Format (safetensors spec): 8 bytes little-endian unsigned header length N, then N bytes of JSON
``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the
data. A sharded checkpoint adds ``model.safetensors.index.json`` (``metadata.total_size``, ``weight_map``).
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conduit.daemon.plan.dtypes import SAFETENSORS_DTYPE_BYTES
from conduit.daemon.plan.errors import ModelError
from conduit.units import MiB


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header: dtype (``BF16``...), shape, and its size in bytes."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        """Number of elements (product of the shape; 1 for a scalar)."""
        return math.prod(self.shape)


_MAX_HEADER = 100 * MiB  # the safetensors reference implementation refuses headers above 100 MB


def _header_bytes(p: Path) -> bytes:
    """The raw JSON header of ``p``. Raises ModelError for a short file or an impossible header length."""
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelError(f"{p}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            size = p.stat().st_size
            if n > _MAX_HEADER or 8 + n > size:
                raise ModelError(f"{p}: safetensors header length {n} is impossible for a {size}-byte file",
                                 hint="the file is truncated or not safetensors; download it again")
            return fh.read(n)
    except OSError as exc:
        raise ModelError(f"{p}: cannot read: {exc.strerror or exc}") from exc


def _tensor(p: Path, name: str, entry: Any) -> TensorInfo:
    """One header entry; its size is ``end - begin`` of ``data_offsets``, else ``numel x dtype bytes``."""
    if not isinstance(entry, dict) or "dtype" not in entry or "shape" not in entry:
        raise ModelError(f"{p}: tensor {name!r} has no dtype/shape in the safetensors header")
    dtype = str(entry["dtype"])
    shape = tuple(int(x) for x in entry["shape"])
    offs = entry.get("data_offsets")
    if isinstance(offs, list) and len(offs) == 2:
        nbytes = int(offs[1]) - int(offs[0])
    elif dtype in SAFETENSORS_DTYPE_BYTES:
        nbytes = math.ceil(math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype])
    else:
        raise ModelError(f"{p}: tensor {name!r} has unknown dtype {dtype!r} and no data_offsets")
    return TensorInfo(dtype=dtype, shape=shape, nbytes=nbytes)


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, TensorInfo]:
    """Read a safetensors file's header without reading the tensor data (format in the module docstring).

    Returns: tensor name -> ``TensorInfo`` (``__metadata__`` dropped).

    Raises:
        ModelError: the file is too short, the header length is implausible, the JSON is invalid, or a
            tensor entry lacks dtype/shape. The message names the file and the tensor.
    """
    p = Path(path)
    raw = _header_bytes(p)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{p}: safetensors header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelError(f"{p}: safetensors header is not a JSON object")
    return {name: _tensor(p, name, entry) for name, entry in header.items() if name != "__metadata__"}


@dataclass(frozen=True)
class WeightScan:
    """What the safetensors files of a model hold.

    Attributes:
        files: the ``*.safetensors`` files read (names relative to the model directory).
        total_bytes: sum of all tensors' sizes on disk, bytes.
        bytes_by_dtype / numel_by_dtype: the same split by safetensors dtype (``BF16``, ``F32``, ``I32``...).
        index_total_bytes: ``metadata.total_size`` of ``model.safetensors.index.json`` when present.
        missing_shards: shards the index names that are not on disk.
    """

    files: tuple[str, ...]
    total_bytes: int
    bytes_by_dtype: dict[str, int]
    numel_by_dtype: dict[str, int]
    index_total_bytes: int | None = None
    missing_shards: tuple[str, ...] = ()


def _read_indexes(d: Path) -> tuple[int | None, list[str]]:
    """``(sum of metadata.total_size or None, shards named in a weight_map but missing)`` of the index files.

    Raises:
        ModelError: an index file is unreadable or not JSON.
    """
    index_total: int | None = None
    missing: list[str] = []
    for idx in sorted(d.glob("*.safetensors.index.json")):
        try:
            data = json.loads(idx.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{idx}: cannot read the safetensors index: {exc}") from exc
        meta = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("total_size"), (int, float)):
            index_total = (index_total or 0) + int(meta["total_size"])
        wmap = data.get("weight_map") if isinstance(data, dict) else None
        if isinstance(wmap, dict):
            missing += [shard for shard in sorted(set(map(str, wmap.values()))) if not (d / shard).is_file()]
    return index_total, missing


def scan_safetensors(model_dir: str | os.PathLike[str]) -> WeightScan | None:
    """Sum the tensor sizes of every ``*.safetensors`` file in ``model_dir`` (and read the index json).

    Returns None when the directory holds no safetensors file and no index.

    Raises:
        ModelError: a header is unreadable, or the index json is invalid.
    """
    d = Path(model_dir)
    files = sorted(d.glob("*.safetensors"))
    index_total, missing = _read_indexes(d)
    if not files and index_total is None:
        return None
    by_dtype: dict[str, int] = {}
    numel: dict[str, int] = {}
    for f in files:
        for t in read_safetensors_header(f).values():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
            numel[t.dtype] = numel.get(t.dtype, 0) + t.numel
    return WeightScan(
        files=tuple(f.name for f in files),
        total_bytes=sum(by_dtype.values()),
        bytes_by_dtype=by_dtype,
        numel_by_dtype=numel,
        index_total_bytes=index_total,
        missing_shards=tuple(missing),
    )
