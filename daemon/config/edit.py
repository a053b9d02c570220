"""Changing the profile file: writing it atomically, and ``conduit use``'s edit that keeps every comment and
the layout (tomlkit round-trips the document; only the keys set change).

Reading and validating the profile is ``conduit.daemon.config.profile``; this module only writes, and every
write is validated first, so an edit can never leave an invalid profile behind.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Item

from conduit.daemon.config.fields import check_model_id
from conduit.daemon.config.profile import LoadedProfile, load_profile, parse_profile
from conduit.daemon.config.resolve import require_channel
from conduit.errors import BadArguments, ProfileError
from conduit.fileio import atomic_write

__all__ = ["save_profile", "set_vllm_keys", "use_model"]


def save_profile(path: Path, text: str, *, validate: bool = True) -> LoadedProfile | None:
    """Write profile ``text`` to ``path`` atomically (temp file, fsync, rename), keeping the file's mode
    (0600 for a new file; a missing directory is created 0700).

    Args:
        path: the profile file.
        text: the whole new profile.
        validate: parse and validate first; an invalid text raises ProfileError and nothing is written.
    Returns:
        the validated profile, or None when ``validate`` is false.
    Raises:
        ProfileError: ``text`` is invalid (with ``validate``), or the file cannot be written (the old profile
            is unchanged).
    """
    loaded = parse_profile(text, path) if validate else None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    try:
        atomic_write(path, text.encode("utf-8"), mode)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot write the profile: {exc.strerror}",
                           "check that the directory is writable; the old profile is unchanged") from None
    return loaded


def use_model(path: str | Path | None, model: str, channel: str | None = None, *,
              small_model: str | None = None) -> tuple[LoadedProfile, list[str]]:
    """Set the profile's active ``model`` (and ``channel``, ``small_model``) with tomlkit, keeping comments and
    layout.

    Args:
        path: the profile file (None: ``CONDUIT_PROFILE`` or the default).
        model: the model id, as the gateway lists it.
        channel: a channel the profile defines, or None to keep the active one.
        small_model: the background model to set; ``""`` removes ``small_model`` (the tools then use ``model``
            for background requests too); None leaves it as it is.
    Returns:
        (the saved profile, warnings such as "model not in channels.X.models").
    Raises:
        BadArguments: a model id with whitespace or control characters, or a channel that does not exist.
        ProfileError: unreadable/invalid profile. Nothing is written in either case.
    """
    for what, given in (("model", model), ("--small-model", small_model or None)):
        try:
            check_model_id(given) if given is not None else None  # "" as --small-model: remove the key
        except ValueError as exc:
            raise BadArguments(f"{what} {given!r}: {exc}", "give the model id exactly as the gateway lists it") from None
    model = check_model_id(model)
    small_model = check_model_id(small_model) if small_model else small_model
    loaded = load_profile(path)
    doc = tomlkit.parse(loaded.text)
    if channel is not None:
        require_channel(loaded, channel)
        doc["channel"] = channel
    doc["model"] = model
    if small_model == "":
        doc.pop("small_model", None)
    elif small_model is not None:
        doc["small_model"] = small_model
    new = save_profile(loaded.path, tomlkit.dumps(doc))
    assert new is not None
    warnings = []
    models = new.model.channels[new.model.channel].models
    if models and model not in models:
        warnings.append(f"`{model}` is not in channels.{new.model.channel}.models ({', '.join(models)}); "
                        "the gateway may answer 404 for it")
    return new, warnings


def set_vllm_keys(path: str | Path | None, changes: Mapping[str, Any]) -> tuple[LoadedProfile, dict[str, Any]]:
    """Set top-level keys of the profile's ``[vllm]`` table with tomlkit (comments and layout kept), validated
    and written atomically; a value of None removes the key (vLLM's default again).

    Args:
        path: the profile file (None: ``CONDUIT_PROFILE`` or the default).
        changes: ``{key: value}``; a value may be a tomlkit item returned by an earlier call (its comment kept).
    Returns:
        (the saved profile, the previous ``{key: tomlkit item or None}``): passing the second back as
        ``changes`` restores the table as it was.
    Raises:
        ProfileError: no profile or no ``[vllm]`` table, or the changed table is invalid (names
            ``[vllm].<key>``); nothing is written then.
    """
    loaded = load_profile(path)
    doc = tomlkit.parse(loaded.text)
    table = doc.get("vllm")
    if not isinstance(table, dict):
        raise ProfileError(f"{loaded.path}: the profile has no [vllm] table",
                           "add one for the local vLLM the agent supervises (see docs/reference/vllm.md)")
    previous: dict[str, Any] = {}
    for key, value in changes.items():
        previous[key] = copy.deepcopy(table.item(key)) if key in table else None  # type: ignore[attr-defined]
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value if isinstance(value, Item) else _inline(value)
    new = save_profile(loaded.path, tomlkit.dumps(doc))
    assert new is not None
    return new, previous


def _inline(value: Any) -> Item:
    """``value`` as a tomlkit item; a mapping as an inline table, so it stays on its key's line."""
    if isinstance(value, Mapping):
        table = tomlkit.inline_table()
        table.update(value)
        return table
    item: Item = tomlkit.item(value)
    return item
