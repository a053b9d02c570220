"""What the writer knows of a tool's file at one moment (``Seen``), and whether bytes are a whole file.

``Seen`` holds the bytes, the ``fstat`` and a SHA-256 of one read; two reads are the same file only when the
device, inode, size, ``mtime_ns`` and content hash all match (an in-place save can keep the inode and, within the
kernel's timestamp granularity, the mtime; a rename-style save keeps neither). The writer compares the file with
what it merged from immediately before (and, with ``conduit.adapters.writer.exchange``, right after) putting its own
file in place.

A tool that saves by truncate-then-write leaves its file empty (or cut short) for a moment: ``blank`` says the
first, and ``whole_text_problem`` says why bytes are not a whole file of the format the file's name says
(JSON/JSONC, TOML, YAML), so no such state is merged from, kept as a backup or restored.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from conduit.adapters.formats.jsonc import parse_jsonc
from conduit.adapters.formats.textformats import parse_toml, parse_yaml
from conduit.errors import ToolFileError

__all__ = ["SETTLE_WAITS_S", "Seen", "blank", "read_seen", "whole_text_problem"]

SETTLE_WAITS_S = (0.05, 0.05, 0.1)
"""Waits (seconds) before each re-read of a file that is blank or does not parse: about 200 ms in all, far longer
than another program's truncate-then-write save takes."""


@dataclass(frozen=True)
class Seen:
    """One read of a file: its bytes, stat and SHA-256 (hex), or all None when it does not exist."""

    data: bytes | None
    st: os.stat_result | None
    digest: str | None

    def same(self, other: Seen) -> bool:
        """True when ``other`` is the same file with the same content: device, inode, size, mtime_ns and hash."""
        if self.st is None or other.st is None:
            return self.st is None and other.st is None
        a, b = self.st, other.st
        return ((a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, self.digest)
                == (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, other.digest))


MISSING = Seen(None, None, None)


def read_seen(path: Path) -> Seen:
    """Read ``path`` whole (opened with ``O_NONBLOCK``, so a FIFO put there cannot hang the writer).

    Returns:
        A ``Seen``; ``MISSING`` when the file does not exist.

    Raises:
        IsADirectoryError: ``path`` is a directory.
        ToolFileError: ``path`` is a FIFO, socket or device (the message names it; nothing is written).
        OSError: it cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return MISSING
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise ToolFileError(f"{path} is not a regular file",
                                hint="a tool's settings file is an ordinary file; move this one away. "
                                "conduit left it alone")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return Seen(data, st, hashlib.sha256(data).hexdigest())


def blank(data: bytes | None) -> bool:
    """True for a file that exists and holds nothing but whitespace (a truncate-then-write save in progress)."""
    return data is not None and not data.strip()


def whole_text_problem(path: Path, data: bytes) -> str | None:
    """Why ``data`` is not a whole file of the format ``path``'s name says, or None when it is.

    Blank data and data that is not UTF-8 never are; ``.json``/``.jsonc`` must parse as JSON with comments,
    ``.toml`` as TOML, ``.yaml``/``.yml`` as YAML; other names (``.env``...) are taken as whole.
    """
    if blank(data):
        return f"it is empty ({len(data)} bytes)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "it is not UTF-8 text"
    suffix = path.suffix.lower()
    try:
        if suffix in (".json", ".jsonc"):
            parse_jsonc(text, path=path)
        elif suffix == ".toml":
            parse_toml(text, path=path)
        elif suffix in (".yaml", ".yml"):
            parse_yaml(text, path=path)
    except ToolFileError as err:
        return f"it does not parse ({err.message})"
    return None
