"""The profile: the one file a person edits (``~/.config/conduit/profile.toml``).

Shape (docs/design.md, "The minimal profile"; every version of conduit accepts that file as written)::

    version = 1
    channel = "taotoken"                 # the channel every tool uses
    model = "claude-sonnet-4-20250514"   # the model every tool uses
    small_model = "claude-3-5-haiku-20241022"   # optional
    on_drift = "report"                  # or "reapply" (the daemon's policy when a tool changes an owned key)

    [channels.taotoken]
    base_url = "https://taotoken.net/api"
    protocols = ["openai", "anthropic"]
    key = { file = "~/.config/conduit/keys/taotoken" }
    # base_urls = { anthropic = "https://api.deepseek.com/anthropic" }   # per-protocol roots
    # models = ["..."]; timeout = 600 (seconds); auth = "bearer" | "x-api-key"

    [tools.claude_code]                  # a [tools.<name>] table turns a tool on
    [tools.cline]
    # enabled = false; channel = "..."; model = "..."; small_model = "..."; plus the tool's own options

    [vllm]                               # optional: a local vLLM the agent supervises (docs/vllm.md)
    model = "/models/qwen2.5-7b-instruct"

A ``[vllm]`` table is validated into ``conduit.daemon.config.vllm.VllmSettings`` at load time (exposed as
``LoadedProfile.vllm``) and gives the profile an implicit channel ``local``: base URL ``http://host:port`` of
that server, both protocols (vLLM serves ``/v1/chat/completions`` and ``/v1/messages``), key = ``[vllm].api_key``
(a key source table, or the literal vLLM was given) or none. A ``[channels.local]`` written by the person wins
over the implicit one. With ``[vllm]`` the ``[channels]`` tables may be left out altogether.

The file is read with tomlkit (so ``conduit use`` can edit it keeping comments and layout; the edits and the
atomic write are in ``conduit.daemon.config.edit``) and validated with pydantic. Every problem becomes a
``ProfileError`` naming the file, the line where it can be found, the key path and the fix; unknown keys get a
"did you mean" hint.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tomlkit
import tomlkit.exceptions
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from conduit.adapters.base import Root
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config import paths
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.fields import Bool, Float, Int, ModelId, refuse_bool_int
from conduit.daemon.config.lines import where_in
from conduit.daemon.config.mcpconfig import McpConfig, check_mcp
from conduit.daemon.config.normalize import normalize_base_url
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.sources import KeySource, key_source_from
from conduit.daemon.config.tomlwords import toml_problem
from conduit.daemon.config.valuewords import missing_hint, plain_message, type_hint
from conduit.errors import ProfileError
from conduit.fileio import PROFILE_MAX_BYTES, read_regular_file

if TYPE_CHECKING:  # imported where a [vllm] table is read: its pydantic models cost a profile without one ~x0.4
    from conduit.daemon.config.vllm import VllmSettings

ProtocolName = Literal["openai", "anthropic", "gemini"]




DEFAULT_PROTOCOLS: tuple[ProtocolName, ...] = ("openai", "anthropic")

MAX_TIMEOUT_S = 3600.0
"""Upper bound of ``channels.<name>.timeout``, seconds: a request that may take longer than an hour is a
mistake (and ``inf`` cannot be turned into a tool's milliseconds)."""


class Channel(BaseModel):
    """A gateway: where requests go and how they authenticate.

    Attributes:
        base_url: the gateway root as its docs give it (``https://taotoken.net/api``); normalized
            per docs/design.md "Base URLs".
        base_urls: per-protocol roots for gateways that serve each protocol under its own path
            (``{anthropic = "https://api.deepseek.com/anthropic"}``); a protocol not listed uses ``base_url``.
        protocols: the wire APIs the gateway speaks.
        key: where the API key comes from, or absent for a gateway that needs none (a local vLLM).
        models: optional list of model ids the gateway serves (used for checks and hints).
        timeout: request timeout in seconds for tools that take one: finite, over 0, at most ``MAX_TIMEOUT_S``.
        auth: ``bearer`` (Authorization header) or ``x-api-key``.
        key_delivery: how the tools of this channel get its key where they have a choice: ``reference`` (a
            command, file or variable that yields the key) or ``copy`` (the key in the tool's own file); unset,
            each tool's default (a reference where the tool takes one). A tool's own option wins
            (``[tools.claude_code] key_delivery``, ``key_source``, ``key_method``: docs/keys.md).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    base_url: str
    base_urls: dict[ProtocolName, str] = Field(default_factory=dict)
    protocols: list[ProtocolName] = Field(default_factory=lambda: list(DEFAULT_PROTOCOLS), min_length=1)
    key: KeySource | None = None
    models: list[ModelId] = Field(default_factory=list)
    timeout: Float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)
    auth: Literal["bearer", "x-api-key"] = "bearer"
    key_delivery: Literal["reference", "copy"] | None = None


class ToolConfig(BaseModel):
    """One ``[tools.<name>]`` table. Keys other than the common ones below (``COMMON_TOOL_KEYS``) are the tool's
    own options, validated by that adapter's ``Options`` model.

    Attributes:
        enabled: sync this tool (default true).
        channel, model, small_model: this tool's own channel and models instead of the profile's.
        fallback: follow the profile's ``[fallback]`` when the primary channel is unhealthy (default true);
            false keeps this tool on the primary.
        context_window: the context window in tokens written to the tool where it has such a setting; wins over
            what the channel's ``GET /v1/models`` reports.
        max_output_tokens: the output limit in tokens, likewise.
        mcp: false: no MCP servers for this tool; a list: only these ``[mcp.servers]`` (docs/mcp.md).
    """

    model_config = ConfigDict(extra="allow")

    enabled: Bool = True
    channel: str | None = None
    model: ModelId | None = None
    small_model: ModelId | None = None
    fallback: Bool = True
    context_window: Annotated[Int, Field(gt=0)] | None = None
    max_output_tokens: Annotated[Int, Field(gt=0)] | None = None
    mcp: Bool | list[str] | None = None

    def options(self) -> dict[str, Any]:
        """The tool-specific options (every key not common to all tools)."""
        return dict(self.model_extra or {})


class Profile(BaseModel):
    """The whole profile. ``version`` is 1 (the integer: ``true`` is refused); a future format bumps it and keeps
    reading 1.

    Attributes:
        version: the profile format: 1
        channel: the channel every tool uses (a ``[channels.<name>]``, or ``local`` with a ``[vllm]`` table)
        model: the model every tool uses, as the gateway names it
        small_model: the background model (Claude Code's haiku slot, OpenCode's ``small_model``, Aider's weak model)
        on_drift: the sync daemon's policy when a tool changes a key conduit owns: report it, or write it back
        mcp: the ``[mcp.servers.NAME]`` tables: MCP servers written into each tool that reads them (docs/mcp.md)
    """

    model_config = ConfigDict(extra="forbid")

    version: Annotated[Literal[1], BeforeValidator(refuse_bool_int)]
    channel: str
    model: ModelId
    small_model: ModelId | None = None
    on_drift: Literal["report", "reapply"] = "report"
    channels: dict[str, Channel]
    tools: dict[str, ToolConfig] = Field(default_factory=dict)
    vllm: dict[str, Any] | None = None
    engines: dict[str, Any] | None = None  # [engines.NAME]: observed beside [vllm] (conduit.daemon.config.engines)
    fallback: FallbackSettings | None = None
    mcp: McpConfig | None = None


COMMON_TOOL_KEYS = ("enabled", "channel", "model", "small_model", "fallback", "context_window", "max_output_tokens",
                    "mcp")

#: The channel a ``[vllm]`` table defines unless the profile has its own ``[channels.local]``.
LOCAL_CHANNEL = "local"


@dataclass
class LoadedProfile:
    """A validated profile plus where it came from.

    Attributes:
        model: the validated profile.
        path: the file it was read from.
        text: the file's text (for line lookups and tomlkit edits).
        roots: ``{channel: {protocol: Root}}`` normalized once at load time.
        notices: what normalization changed in what the person typed, each said once, in words.
        vllm: the validated ``[vllm]`` table, or None without one. When ``[vllm].api_key`` is a key source
            table, ``vllm.api_key`` is None here and the source is in ``vllm_key`` (read it with
            ``conduit.daemon.config.resolve.vllm_settings``, which returns the settings with the key filled in).
        vllm_key: the key source of ``[vllm].api_key`` when it is a table (``{ secret = "vllm" }``), else None.
        implicit_channels: channels conduit added to ``model.channels`` (``("local",)`` from ``[vllm]``).
        tool_problems: ``{tool: ProfileError}``: a ``[tools.<name>]`` problem of that tool only (see ``_check_tool``);
            that tool is not synced (``Resolver.tool_settings`` raises it), the others are.
    """

    model: Profile
    path: Path
    text: str
    roots: dict[str, dict[str, Root]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    vllm: VllmSettings | None = None
    vllm_key: KeySource | None = None
    implicit_channels: tuple[str, ...] = ()
    tool_problems: dict[str, ProfileError] = field(default_factory=dict)

    @property
    def channels(self) -> dict[str, Channel]:
        """Shortcut for ``model.channels``."""
        return self.model.channels

    def where(self, *keys: str | int) -> str:
        """``path:line: key.path`` for error messages."""
        return where_in(self.path, self.text, keys)


def load_profile(path: str | Path | None = None) -> LoadedProfile:
    """Read, parse and validate the profile.

    Args:
        path: the profile file; None means ``--profile``/``CONDUIT_PROFILE``/the platformdirs default.
    Returns:
        the validated profile with base URLs normalized.
    Raises:
        ProfileError: missing or unreadable file, TOML syntax error (with line and column), unknown key (with
            a "did you mean"), wrong type, a channel or tool that does not exist, a base URL that cannot be a URL.
            A problem of one ``[tools.<name>]`` table only is kept in ``LoadedProfile.tool_problems`` instead.
    """
    p = paths.profile_path(path)
    return parse_profile(read_profile_text(p), p)


def read_profile_text(path: Path) -> str:
    """The text of the profile file ``path``, read with ``conduit.fileio.read_regular_file``: a regular file
    only (a FIFO or ``/dev/zero`` in its place is refused at once, never waited on or read without end), at
    most ``PROFILE_MAX_BYTES`` (1 MiB), UTF-8.

    Raises:
        ProfileError: missing (with "run `conduit init`"), not a regular file, over the cap, unreadable, or
            not UTF-8; the message names the file.
    """
    try:
        data = read_regular_file(path, max_bytes=PROFILE_MAX_BYTES, what="profile", error=ProfileError)
    except FileNotFoundError:
        raise ProfileError(
            f"{path}: no profile here", "run `conduit init` to write a starter profile, or pass --profile PATH"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: the profile is not UTF-8 text (byte {exc.start})",
                           "save it as UTF-8") from None


def _second_line(text: str, message: str) -> str:
    """``:N`` for the line that repeats the key tomlkit names in ``message`` (``Key "model" already exists.``,
    raised for a key repeated inside a table): the last line that assigns it; empty when fewer than two lines
    assign it (a dotted spelling)."""
    m = re.match(r'Key "([^"]+)" already exists', message)
    if not m:
        return ""
    pattern = re.compile(rf'^\s*(?:"{re.escape(m.group(1))}"|{re.escape(m.group(1))})\s*=')
    hits = [n for n, line in enumerate(text.splitlines(), 1) if pattern.match(line)]
    return f":{hits[-1]}" if len(hits) > 1 else ""


def parse_profile(text: str, path: Path) -> LoadedProfile:
    """Validate profile ``text`` read from ``path`` (see ``load_profile``). A byte order mark that an editor put
    in front (Windows Notepad's "UTF-8 with BOM") is dropped with a notice: TOML has none, and tomlkit read it as
    a key name."""
    bom = text.startswith("\ufeff")
    text = text.removeprefix("\ufeff")
    try:
        doc = tomlkit.parse(text)
        data = doc.unwrap()
    except tomlkit.exceptions.ParseError as exc:
        problem = toml_problem(exc, text)
        at = f"{problem.line}:{problem.column}" if problem.column else f"{problem.line}"
        raise ProfileError(
            f"{path}:{at}: not valid TOML ({problem.where()}): {problem.reason}",
            "fix that line and save again; the tools were left as they are",
        ) from None
    except tomlkit.exceptions.KeyAlreadyPresent as exc:
        raise ProfileError(f"{path}{_second_line(text, str(exc))}: not valid TOML: {exc}",
                           "remove one of the two lines; the tools were left as they are") from None
    except (tomlkit.exceptions.TOMLKitError, RecursionError) as exc:  # e.g. a table defined twice
        raise ProfileError(f"{path}: not valid TOML: {exc}",
                           "fix the file; the tools were left as they are") from None
    if isinstance(data.get("vllm"), Mapping) and "channels" not in data:
        data["channels"] = {}  # a profile for a local vLLM alone needs no [channels] (it has `local`)
    try:
        model = Profile.model_validate(data)
    except ValidationError as exc:
        raise _profile_error(exc, path, text, data) from None
    loaded = LoadedProfile(model=model, path=path, text=text)
    if bom:
        loaded.notices.append(f"{path} starts with a byte order mark (saved as \"UTF-8 with BOM\"): read without "
                              "it; save it as plain UTF-8 to silence this")
    _load_vllm(loaded)
    _check_references(loaded)
    _normalize_roots(loaded)
    return loaded


def _profile_error(exc: ValidationError, path: Path, text: str, data: dict[str, Any]) -> ProfileError:
    """Turn pydantic's first error into one sentence with file, line, key path, and a fix."""
    # An unknown key explains a "missing" one (a typo of it), so report unknown keys first.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    # pydantic inserts validator tags such as "function-after[...]" into locations; they are not keys.
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x))
    keypath = ".".join(str(x) for x in loc)
    where = where_in(path, text, loc)
    kind = err["type"]
    if len(loc) >= 3 and loc[0] == "channels" and loc[2] == "key":
        # key_source_from words every key-source mistake without ever quoting the value (it may be a key).
        value = data.get("channels", {}).get(loc[1], {}).get("key")
        key_source_from(value, where=f"{where_in(path, text, loc[:3])}: channels.{loc[1]}.key")
    if kind == "extra_forbidden":
        parent = loc[:-1]
        allowed = _allowed_keys(parent)
        return ProfileError(f"{where}: unknown key `{loc[-1]}`", did_you_mean(str(loc[-1]), allowed))
    if kind == "missing":
        return ProfileError(f"{where}: `{keypath}` is required", missing_hint(loc))
    if kind == "literal_error" and loc == ("version",):
        return ProfileError(
            f"{where}: unsupported profile version {data.get('version')!r}",
            "this conduit reads `version = 1`; upgrade conduit for newer profiles",
        )
    return ProfileError(f"{where}: `{keypath}`: {plain_message(err)}", type_hint(loc))


def _allowed_keys(parent: Sequence[Any]) -> list[str]:
    if not parent:
        return list(Profile.model_fields)
    if parent == ("fallback",):
        return list(FallbackSettings.model_fields)
    if parent[0] == "channels" and len(parent) == 2:
        return list(Channel.model_fields)
    if parent[0] == "channels" and len(parent) == 3 and parent[2] == "key":
        return list(KeySource.model_fields)
    if parent[0] == "channels" and len(parent) == 3 and parent[2] == "base_urls":
        return ["openai", "anthropic", "gemini"]
    return []


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint for an unknown name: ``did you mean `x`?`` for a close match (difflib, cutoff 0.6), else the
    valid names, else ``remove it``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    choices = sorted(choices)
    return f"valid keys here: {', '.join(choices)}" if choices else "remove it"


def channel_hint(name: str, channels: Iterable[str]) -> str:
    """A hint for an undefined channel: the close match, if any, and the channels defined."""
    close = difflib.get_close_matches(name, list(channels), n=1, cutoff=0.6)
    defined = ", ".join(channels) or "none"
    return (f"did you mean `{close[0]}`? " if close else "") + f"channels defined: {defined}"


def _load_vllm(loaded: LoadedProfile) -> None:
    """Validate ``[vllm]`` into ``loaded.vllm`` and add the implicit ``local`` channel (see the module doc).

    Raises:
        ProfileError: ``path:line: `vllm.<key>`: ...`` for the first bad key (unknown keys first, with a
            "did you mean"); a key written as itself is accepted only in ``api_key`` (vLLM needs it).
    """
    table = loaded.model.vllm
    if table is None:
        return
    from conduit.daemon.config.vllm import VllmSettings

    table = dict(table)
    api_key = table.get("api_key")
    if isinstance(api_key, Mapping):
        loaded.vllm_key = key_source_from(api_key, where=f"{loaded.where('vllm', 'api_key')}: vllm.api_key")
        del table["api_key"]
    try:
        loaded.vllm = VllmSettings.model_validate(table)
    except ValidationError as exc:
        raise _vllm_error(exc, loaded) from None
    REDACTOR.add(loaded.vllm.secrets())
    if LOCAL_CHANNEL not in loaded.model.channels:
        loaded.model.channels[LOCAL_CHANNEL] = Channel(
            base_url=loaded.vllm.base_url, protocols=["openai", "anthropic"], key=loaded.vllm_key,
            models=[loaded.vllm.name],
        )
        loaded.implicit_channels = (LOCAL_CHANNEL,)


def _vllm_error(exc: ValidationError, loaded: LoadedProfile) -> ProfileError:
    """pydantic's first error in ``[vllm]`` as one sentence with file, line, key path and a fix."""
    err = sorted(exc.errors(include_input=False), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x))
    keys = ("vllm", *loc)
    where = loaded.where(*keys)
    keypath = ".".join(str(k) for k in keys)
    from conduit.daemon.config.cluster import ClusterSettings
    from conduit.daemon.config.vllm import RestartPolicy, Speculative, VllmSettings

    if err["type"] == "extra_forbidden":
        nested: dict[str, type[BaseModel]] = {"restart": RestartPolicy, "speculative": Speculative,
                                              "cluster": ClusterSettings}
        model = nested.get(str(loc[0]) if len(loc) > 1 else "", VllmSettings)
        return ProfileError(f"{where}: unknown key `{keypath}`", did_you_mean(str(loc[-1]), model.model_fields))
    if loc and loc[0] == "cluster":  # [vllm.cluster]: the message names the fix; docs/deployment.md has the table
        what = " is required" if err["type"] == "missing" else ": " + str(err["msg"]).removeprefix("Value error, ")
        return ProfileError(f"{where}: `{keypath}`{what}", "see [vllm.cluster] in docs/deployment.md "
                            "(role, head_address, nodes)")
    if err["type"] == "missing":
        return ProfileError(f"{where}: `{keypath}` is required",
                            'a [vllm] table needs at least model = "/path/to/model" (or a hub name)')
    msg = str(err["msg"]).removeprefix("Value error, ")
    return ProfileError(f"{where}: `{keypath}`: {msg}", "see the [vllm] keys in docs/reference/vllm.md")


def _check_references(loaded: LoadedProfile) -> None:
    """Cross-key checks pydantic cannot express: names that must exist, protocols that must match."""
    prof = loaded.model
    if prof.channel not in prof.channels:
        hint = channel_hint(prof.channel, prof.channels)
        if prof.channel == LOCAL_CHANNEL:
            hint = "the `local` channel comes from a [vllm] table (or write [channels.local] yourself); " + hint
        raise ProfileError(f"{loaded.where('channel')}: channel `{prof.channel}` is not defined", hint)
    _check_fallback(loaded)
    check_mcp(prof.mcp, prof.tools, loaded.where)
    for name, tool in prof.tools.items():
        if name not in ADAPTERS:
            raise ProfileError(f"{loaded.where('tools', name)}: unknown tool `{name}`", did_you_mean(name, ADAPTERS))
        try:
            _check_tool(loaded, name, tool)
        except ProfileError as exc:  # this tool's problem: the other tools still sync
            loaded.tool_problems[name] = exc


def _check_fallback(loaded: LoadedProfile) -> None:
    """``[fallback].channel`` must be a defined channel other than the primary. Raises ProfileError."""
    prof = loaded.model
    if prof.fallback is None:
        return
    name = prof.fallback.channel
    if name not in prof.channels:
        raise ProfileError(f"{loaded.where('fallback', 'channel')}: fallback channel `{name}` is not defined",
                           channel_hint(name, prof.channels))
    if name == prof.channel:
        raise ProfileError(f"{loaded.where('fallback', 'channel')}: the fallback channel is the primary `{name}`",
                           "name another channel of the profile, or remove [fallback]")


def _check_tool(loaded: LoadedProfile, name: str, tool: ToolConfig) -> None:
    """One tool's table: its channel defined and speaking its protocol, its options. Raises ProfileError."""
    prof, adapter = loaded.model, ADAPTERS[name]
    channel = tool.channel or prof.channel
    if channel not in prof.channels:
        raise ProfileError(f"{loaded.where('tools', name, 'channel')}: {adapter.display_name}: channel `{channel}` "
                           "is not defined", channel_hint(channel, prof.channels))
    if adapter.protocol not in prof.channels[channel].protocols:
        raise ProfileError(
            f"{loaded.where('tools', name)}: {adapter.display_name} speaks the {adapter.protocol} protocol, "
            f"but channel `{channel}` lists only {', '.join(prof.channels[channel].protocols)}",
            f"add \"{adapter.protocol}\" to channels.{channel}.protocols if the gateway serves it, "
            f"or set tools.{name}.channel to a channel that does",
        )
    _check_options(loaded, name, tool)


def _check_options(loaded: LoadedProfile, name: str, tool: ToolConfig) -> None:
    adapter = ADAPTERS[name]
    try:
        adapter.Options.model_validate(tool.options())
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ("tools", name, *err["loc"])
        if err["type"] == "extra_forbidden":
            allowed = [*COMMON_TOOL_KEYS, *adapter.Options.model_fields]
            raise ProfileError(
                f"{loaded.where(*loc)}: unknown key `{err['loc'][-1]}` for {adapter.display_name}",
                did_you_mean(str(err["loc"][-1]), allowed),
            ) from None
        raise ProfileError(f"{loaded.where(*loc)}: `{'.'.join(map(str, loc))}`: {err['msg']}") from None


def _normalize_roots(loaded: LoadedProfile) -> None:
    for cname, ch in loaded.model.channels.items():
        roots: dict[str, Root] = {}
        for proto in ch.protocols:
            keys: tuple[str, ...]
            if proto in ch.base_urls:
                raw, keys = ch.base_urls[proto], ("channels", cname, "base_urls", proto)
            else:
                raw, keys = ch.base_url, ("channels", cname, "base_url")
            norm = normalize_base_url(raw, where=f"{loaded.where(*keys)}: {'.'.join(keys)}")
            roots[proto] = norm.root
            for notice in norm.notices:
                text = f"channels.{cname}: {notice}"
                if text not in loaded.notices:
                    loaded.notices.append(text)
        loaded.roots[cname] = roots
