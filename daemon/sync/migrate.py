"""``conduit key migrate NAME --to keyring``: move a key from conduit's secrets file into the OS keychain.

Steps, each one only after the one before succeeded (a failure leaves everything after it as it was):

1. The key is read from the secrets file (``secret`` NAME) and stored in the keychain as entry NAME
   (``conduit.daemon.config.keychain``, bounded in time), then read back and compared.
2. Every channel of the profile whose key is ``{ secret = "NAME" }`` gets ``{ keyring = "NAME" }`` (tomlkit:
   comments and layout kept; the new profile is validated before it is written).
3. The secret is removed from the secrets file.
4. Every backup in conduit's backup store that holds the key has it replaced by its fingerprint
   (``conduit.daemon.sync.scrub.scrub_backups``, as a rotation does for an old key).

The key is the same before and after, so no tool file changes; a running daemon re-reads the profile when it
changes. Nothing here ever prints the key: only its fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from conduit.daemon.config.edit import save_profile
from conduit.daemon.config.keychain import keyring_get, keyring_set
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.secrets import SecretsStore, check_name
from conduit.daemon.sync.scrub import scrub_backups
from conduit.errors import BadArguments, KeyError_
from conduit.redact import fingerprint

__all__ = ["MigrateResult", "migrate_to_keyring"]


@dataclass
class MigrateResult:
    """What ``migrate_to_keyring`` did.

    Attributes:
        name: the key's name (secret and keychain entry).
        fingerprint: the key's fingerprint.
        channels: where the profile now reads the keychain, as dotted key paths (``channels.gw.key``,
            ``mcp.servers.web.bearer_token``...).
        scrubbed: backup files from which the key was removed.
        lines: what to tell the person, in order.
    """

    name: str
    fingerprint: str
    channels: list[str] = field(default_factory=list)
    scrubbed: int = 0
    lines: list[str] = field(default_factory=list)


def migrate_to_keyring(name: str, *, to: str = "keyring", profile_path: str | Path | None = None) -> MigrateResult:
    """Move secret ``name`` into the keychain (see the module docstring).

    Args:
        name: the secret's name; to: the destination (only ``keyring`` exists); profile_path: the profile
            (None: ``CONDUIT_PROFILE`` or the default).

    Raises:
        BadArguments: ``to`` is not ``keyring``. KeyError_: no such secret, or the keychain failed (nothing
        changed), or it gave back another value than stored. ProfileError: the profile is invalid or cannot
        be written (the key is then in both places; the secrets file and the profile are unchanged).
    """
    if to != "keyring":
        raise BadArguments(f"`--to {to}`: the only destination is `keyring`", "run `conduit key migrate NAME "
                           "--to keyring`")
    check_name(name)
    store = SecretsStore()
    key = store.get(name)
    if key is None:
        raise KeyError_(f"there is no key `{name}` in {store.shown}", "`conduit key list` shows the stored names")
    REDACTOR.add([key])
    result = MigrateResult(name=name, fingerprint=fingerprint(key))
    keyring_set(name, key)
    if keyring_get(name) != key:
        raise KeyError_(f"the keychain gave back another value for `{name}` than was stored; the secrets file "
                        "and the profile are unchanged", "check the keyring service, then run the migration again")
    result.lines.append(f"stored key `{name}` ({result.fingerprint}) in the keychain (service `conduit`)")
    result.channels = _repoint_channels(name, profile_path)
    if result.channels:
        result.lines.append("now reading the keychain: " + ", ".join(result.channels))
    else:
        result.lines.append(f"nothing in the profile read secret `{name}`; give a channel "
                            f'key = {{ keyring = "{name}" }}')
    store.delete(name)
    result.lines.append(f"removed key `{name}` from {store.shown}")
    result.scrubbed = scrub_backups([key])
    if result.scrubbed:
        result.lines.append(f"replaced the key by its fingerprint in {result.scrubbed} backup file(s)")
    return result


def _repoint_channels(name: str, profile_path: str | Path | None) -> list[str]:
    """Rewrite every ``{ secret = "name" }`` of the profile (a channel's ``key``, an MCP server's token, header or
    variable, ``[vllm] api_key``...) as ``{ keyring = "name" }``; returns where, as dotted key paths (the profile
    is not written when there are none)."""
    profile = load_profile(profile_path)
    doc = tomlkit.parse(profile.text)
    hits = _repoint(doc, name, ())
    if hits:
        save_profile(Path(profile.path), tomlkit.dumps(doc))
    return hits


def _repoint(table: Any, name: str, at: tuple[str, ...]) -> list[str]:
    """Replace, in place under ``table``, each ``{ secret = name }`` by ``{ keyring = name }``; the paths changed."""
    hits: list[str] = []
    for k in list(table.keys()):
        value = table[k]
        if isinstance(value, dict) and set(value.keys()) == {"secret"} and value["secret"] == name:
            table[k] = tomlkit.parse(f'x = {{ keyring = "{name}" }}')["x"]  # written as a person would
            hits.append(".".join((*at, str(k))))
        elif isinstance(value, dict):
            hits += _repoint(value, name, (*at, str(k)))
    return hits
