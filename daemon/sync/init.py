"""``conduit init``: write a starter profile, or propose one built from the tools already configured.

When tools already point at a gateway (each adapter's ``discover``: Claude Code, Cline and CC Switch today),
the proposal reuses what they hold: one channel per distinct gateway root, the model each tool uses, and the
key moved into conduit's own secrets file (0600) so the profile never holds it.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import tomlkit

from conduit.adapters.base import Env, Proposal
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.edit import save_profile
from conduit.daemon.config.firstuse import PLACEHOLDER_BASE_URL
from conduit.daemon.config.normalize import clean_key, normalize_base_url
from conduit.daemon.config.secrets import SecretsStore
from conduit.errors import BadArguments, ConduitError, KeyError_, ProfileError
from conduit.fileio import PROFILE_MAX_BYTES, read_regular_file
from conduit.redact import fingerprint

TEMPLATES = ("hosted", "local-vllm", "both")


def starter_text(template: str = "hosted") -> str:
    """The text of a shipped starter profile. Raises ConduitError for an unknown template name."""
    if template not in TEMPLATES:
        raise BadArguments(f"no starter profile `{template}`", f"choose one of: {', '.join(TEMPLATES)}")
    return resources.files("conduit.profiles").joinpath(f"{template}.toml").read_text(encoding="utf-8")


STARTER_CHANNEL = "gateway"
"""The hosted channel's name in the shipped ``hosted`` and ``both`` starters (``--channel`` renames it)."""
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_RENAME = re.compile(rf'(?<=")({STARTER_CHANNEL})(?=")|(?<=channels\.){STARTER_CHANNEL}(?=\])'
                     rf"|(?<=key set ){STARTER_CHANNEL}\b|(?<=pass show ){STARTER_CHANNEL}\b")


def present_tools(env: Env) -> list[str]:
    """The registered tools present on this machine, in registry order: a command of the tool on ``PATH``
    (``one_shot.binaries``), or its own file or directory (``inspect``'s ``file``, ``dir``, ``data_dir`` or
    ``settings``; a file's own folder counts unless it is HOME or ``~/.config``). Never raises."""
    path = env.environ.get("PATH")
    generic = {env.home, env.home / ".config"}
    present = []
    for name, adapter in ADAPTERS.items():
        if adapter.one_shot is not None and any(shutil.which(b, path=path) for b in adapter.one_shot.binaries):
            present.append(name)
            continue
        try:
            details = adapter.inspect(env).details
        except Exception:  # an adapter that cannot even look: not counted as present
            continue
        spots = {k: Path(str(details[k])) for k in ("file", "dir", "data_dir", "settings")
                 if isinstance(details.get(k), str | Path)}
        own_folder = spots["file"].parent if "file" in spots else env.home
        if any(p.exists() for p in spots.values()) or (own_folder not in generic and own_folder.is_dir()):
            present.append(name)
    return present


def starter_for(template: str, *, base_url: str | None, channel: str | None, tools: list[str],
                notes: list[str]) -> str:
    """``template``'s text with its hosted channel renamed ``channel`` (and its secret with it), its
    ``base_url`` set to ``base_url``'s root (``PLACEHOLDER_BASE_URL`` kept when None), and ``[tools.<name>]``
    tables for ``tools`` only. Appends what the person must still do to ``notes``.
    Raises BadArguments for a bad name or URL, or flags the ``local-vllm`` template has no channel for."""
    text = starter_text(template)
    if STARTER_CHANNEL not in text and (base_url or channel):
        raise BadArguments(f"the `{template}` starter has no hosted channel for --base-url/--channel",
                           "use --template hosted or both")
    name = channel or STARTER_CHANNEL
    if not _NAME.fullmatch(name):
        raise BadArguments(f"--channel {name!r}: use letters, digits, `-` and `_` only")
    text = _RENAME.sub(name, text)  # the channel, its table, its secret and the commands in comments
    doc = tomlkit.parse(text)
    if base_url is not None:
        try:
            root = normalize_base_url(base_url, where="--base-url").root.url
        except ProfileError as exc:
            raise BadArguments(exc.message, "give the gateway's root as its docs give it: https://HOST/PATH") from None
        doc["channels"][name]["base_url"] = root
    elif STARTER_CHANNEL in starter_text(template):
        notes.append(f"no gateway named: channel `{name}` has the placeholder base_url {PLACEHOLDER_BASE_URL}, "
                     "which every command refuses; set your gateway's root in the profile, or run "
                     f"`conduit init --force --base-url URL --channel {name}`")
    table = doc.get("tools")
    for t in [t for t in (table or {}) if t not in tools]:
        del table[t]  # type: ignore[union-attr]
    for t in tools:
        if table is None:
            table = tomlkit.table(is_super_table=True)
            doc.add("tools", table)
        if t not in table:
            table.add(t, tomlkit.table())
    if not tools:
        doc.pop("tools", None)
        notes.append("no coding tool found on this machine (no command on PATH, no config folder): add a "
                     "`[tools.<name>]` table (e.g. `[tools.claude_code]`) once one is installed")
    return tomlkit.dumps(doc)


Found = Proposal
"""A gateway a tool is already configured for (``conduit.adapters.base.Proposal``; the key is held only to move
it to the secrets file)."""


def discover(env: Env) -> list[Proposal]:
    """Read-only: what each registered tool is configured with today (``Adapter.discover``), in the adapters'
    ``discover_rank`` order (Claude Code, Cline, CC Switch first: the tools people configure by hand)."""
    found: list[Proposal] = []
    for adapter in sorted(ADAPTERS.values(), key=lambda a: (a.discover_rank, a.name)):
        proposal = adapter.discover(env)
        if proposal is not None:
            found.append(proposal)
    return found


@dataclass
class _Channel:
    """A channel being proposed: its root, the protocols the tools were seen using, its secret's name."""

    base_url: str
    protocols: set[str] = field(default_factory=set)
    key: str | None = None


def _channels(found: list[Proposal], secrets: SecretsStore | None,
              notes: list[str]) -> tuple[dict[str, _Channel], dict[str, str]]:
    """One channel per distinct root of ``found`` (``gateway``, ``gateway2``...) and each tool's channel; each
    channel's first usable key moved into ``secrets``."""
    channels: dict[str, _Channel] = {}
    tool_channel: dict[str, str] = {}
    for f in found:
        try:
            root = normalize_base_url(f.base_url, where=f"{f.tool} config").root.url
        except ProfileError:
            notes.append(f"{f.tool}: ignored base URL that is not a URL")
            continue
        name = next((n for n, c in channels.items() if c.base_url == root), None)
        if name is None:
            name = "gateway" if not channels else f"gateway{len(channels) + 1}"
            channels[name] = _Channel(root)
        channel = channels[name]
        channel.protocols.add(f.protocol)
        if f.key and channel.key is None and secrets is not None:
            try:
                key = clean_key(f.key, source=f"{f.tool} config").key
                secrets.set(name, key)
                channel.key = name
                notes.append(f"copied {f.tool}'s key {fingerprint(key)} into the secrets file as `{name}` (the profile "
                             "reads it from there; the tool's own file keeps its copy)")
            except KeyError_ as exc:
                notes.append(f"{f.tool}: key not imported: {exc.message}")
        tool_channel[f.tool] = name
    return channels, tool_channel


def propose(found: list[Proposal], secrets: SecretsStore | None, notes: list[str]) -> str:
    """A profile text built from ``found``: one channel per distinct root. Keys go to ``secrets`` (when given).

    Appends what it did to ``notes`` (keys shown only as fingerprints). Returns "" when nothing usable was found.
    """
    channels, tool_channel = _channels(found, secrets, notes)
    if not channels:
        return ""  # nothing usable was found: the caller writes a starter profile instead
    doc = tomlkit.document()
    doc.add(tomlkit.comment("conduit profile proposed by `conduit init` from the tools already configured."))
    doc.add("version", 1)
    first = next(iter(channels))
    main_model = next((f.model for f in found if f.model), None) or "MODEL-NAME"
    if main_model == "MODEL-NAME":
        notes.append("no model found in the tools' settings: replace `MODEL-NAME` in the profile with a model your "
                     "gateway serves before syncing")
    for name, c in channels.items():
        if not c.key:  # point at the secrets file anyway: a sync then says the key is missing, never writes none
            c.key = name
            notes.append(f"no key found for channel `{name}`: store it with `conduit key set {name}` (reads stdin); "
                         "remove its `key` line if the gateway needs none")
    doc.add("channel", first)
    doc.add("model", main_model)
    chans = tomlkit.table(is_super_table=True)
    for name, c in channels.items():
        t = tomlkit.table()
        t.add("base_url", c.base_url)
        t.add("protocols", sorted(c.protocols))  # what the tools were seen using; add the other if it speaks it
        if c.key:
            key = tomlkit.inline_table()
            key["secret"] = c.key
            t.add("key", key)
        chans.add(name, t)
    doc.add("channels", chans)
    tools = tomlkit.table(is_super_table=True)
    for f in found:
        t = tomlkit.table()
        if tool_channel.get(f.tool) and tool_channel[f.tool] != first:
            t.add("channel", tool_channel[f.tool])
        if f.model and f.model != main_model:
            t.add("model", f.model)
        tools.add(f.tool, t)
    doc.add("tools", tools)
    return tomlkit.dumps(doc)


def init_profile(path: Path, *, template: str = "hosted", force: bool = False, env: Env | None = None,
                 discover_tools: bool = True, base_url: str | None = None,
                 channel: str | None = None) -> tuple[str, list[str]]:
    """Write a starter (or proposed) profile to ``path``.

    Without ``base_url``, tools already pointing at a gateway give the proposal (``propose``); else the
    ``template`` starter is written with the gateway ``base_url`` (the placeholder when None: every command
    refuses it) as channel ``channel`` (default ``gateway``), and a ``[tools.<name>]`` table for each tool that
    is present on this machine (``present_tools``) only.

    Returns:
        (the text written, notes for the person).
    Raises:
        ConduitError: the profile exists and ``force`` is false (nothing is overwritten).
        BadArguments: a ``base_url`` that is not an http(s) URL, a ``channel`` that is not a plain name.
        ProfileError: with ``force``, the existing profile cannot be kept as ``.bak`` (not a regular file, over
            ``PROFILE_MAX_BYTES``, unreadable).
    """
    if path.exists() and not force:
        raise ConduitError(f"{path} already exists", "edit it, or pass --force to replace it (a copy is kept as .bak)")
    env = env or Env()
    notes: list[str] = []
    found = discover(env) if discover_tools and base_url is None and channel is None else []
    text = propose(found, SecretsStore(), notes) if found else ""
    if text:
        notes.insert(0, "found existing tool settings: " + ", ".join(f"{f.tool} -> {f.base_url}" for f in found))
    else:
        text = starter_for(template, base_url=base_url, channel=channel, tools=present_tools(env), notes=notes)
        name = channel or STARTER_CHANNEL
        if base_url is not None and STARTER_CHANNEL in starter_text(template) and SecretsStore().get(name):
            notes.append(f"a key named `{name}` is already stored and will be sent to {base_url}: if it belongs "
                         f"to another gateway, replace it with `conduit key set {name}`")
        if discover_tools and base_url is None and channel is None:
            notes.insert(0, f"no usable gateway settings found in the tools' files; wrote the `{template}` "
                         "starter profile")
    if path.exists():
        backup = path.with_suffix(path.suffix + ".bak")
        backup.write_bytes(read_regular_file(path, max_bytes=PROFILE_MAX_BYTES, what="profile", error=ProfileError))
        notes.append(f"previous profile kept as {backup}")
    # A proposal is validated before it is written; the shipped starters are validated by the test suite.
    save_profile(path, text, validate=bool(found) and "conduit init" in text.splitlines()[0])
    return text, notes
