"""Where a key goes for the first time: the placeholder gateway of the starter profile, and the hosts a key was
already sent to.

conduit ships no default gateway. ``conduit init`` without a gateway to propose (and without ``--base-url``)
writes ``PLACEHOLDER_BASE_URL``, a name under the reserved ``.example`` top-level domain that never resolves;
``is_placeholder_url`` recognizes it (and any other ``.example`` host), and every command that would send a
request refuses it before any request is made (``conduit sync`` writes nothing for a tool on such a channel).

Each command that sends a key to a host says so the first time: ``first_contact`` returns the one line
``sending the key of channel X to host H for the first time`` and records ``H`` in
``state_dir()/contacts.json`` (``{"hosts": {"HOST[:PORT]": first Unix seconds}}``, 0600, no key); a host already
recorded returns None. A record that cannot be read or written is not an error: the line is then said again
next time, never skipped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from conduit.daemon.config import paths
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, make_private_dirs, read_regular_file

PLACEHOLDER_BASE_URL = "https://your-gateway.example/api"
"""The base URL ``conduit init`` writes when no gateway was named: the reserved ``.example`` domain (it never
resolves), so nothing is ever sent to it."""
CONTACTS_MAX_BYTES = 1 << 20
"""Cap on ``contacts.json`` read back (bytes); a real one is a few hundred."""


def is_placeholder_url(url: str) -> bool:
    """``url``'s host is under the reserved ``.example`` top-level domain (``PLACEHOLDER_BASE_URL``): a profile
    still waiting for its gateway. Never raises."""
    try:
        host = (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    return host == "example" or host.endswith(".example")


def placeholder_message(channel: str, url: str) -> str:
    """The one line every command says for a channel whose ``base_url`` is still the placeholder."""
    return (f"channel `{channel}` has the placeholder base_url {url}: set it to your gateway's root (as its docs "
            "give it) in the profile, or run `conduit init --force --base-url URL`; nothing is sent to it")


def host_of(url: str) -> str:
    """``HOST`` or ``HOST:PORT`` (an explicit port) of ``url``, lower-cased; ``""`` when it has none."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        return f"{host}:{parts.port}" if host and parts.port else host
    except ValueError:
        return ""


def contacts_path() -> Path:
    """``state_dir()/contacts.json``: the hosts a key was sent to."""
    return paths.state_dir() / "contacts.json"


def contacted() -> dict[str, float]:
    """``{host: first Unix seconds}`` from ``contacts.json``; ``{}`` when missing, unreadable or damaged."""
    try:
        doc = json.loads(read_regular_file(contacts_path(), max_bytes=CONTACTS_MAX_BYTES, what="contacts record"))
        hosts = doc["hosts"]
        return {str(h): float(t) for h, t in hosts.items()}
    except (OSError, ConduitError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}


def first_contact(channel: str, url: str) -> str | None:
    """The line ``sending the key of channel CHANNEL to host HOST for the first time`` when ``url``'s host is not
    recorded yet (and records it), else None. Never raises."""
    host = host_of(url)
    if not host:
        return None
    seen = contacted()
    if host in seen:
        return None
    seen[host] = time.time()
    try:
        make_private_dirs(contacts_path().parent)
        atomic_write(contacts_path(), (json.dumps({"hosts": seen}, indent=1, sort_keys=True) + "\n").encode(),
                     0o600)
    except OSError:
        pass  # said again next time: better twice than never
    return f"sending the key of channel {channel} to host {host} for the first time"


def announce(channel: str, url: str, key: str | None) -> None:
    """Write ``first_contact``'s line to stderr when ``key`` is set and ``url``'s host is new. Never raises."""
    if not key:
        return
    line = first_contact(channel, url)
    if line is not None:
        try:
            sys.stderr.write(f"note: {line}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


__all__ = ["PLACEHOLDER_BASE_URL", "announce", "contacted", "contacts_path", "first_contact", "host_of",
           "is_placeholder_url", "placeholder_message"]
