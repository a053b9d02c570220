"""What every adapter shares: the resolved settings it receives, URL rendering, and the file targets it returns.

An adapter knows nothing about profiles. The daemon resolves a profile into one ``ToolSettings`` per tool
(protocol roots already normalized, key already cleaned) and calls ``adapter.plan(settings, env)``, which
returns *targets*: for each file, a pure function from the file's current content to its new content.
One shared writer (``conduit.adapters.writer.apply``) reads, renders, diffs (secrets masked), backs up and
replaces atomically. Adapters render and never touch the disk themselves, except to *read* for detection.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from conduit.adapters.declarations import Blocker, Competing, ConfiguredBy, OneShot, Package
from conduit.adapters.facts import ClientView, Effective, Proposal, Protocol_, ToolFacts
from conduit.adapters.limits import LimitLedger
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.precedence import Rule

__all__ = [
    "NO_KEY", "Adapter", "AdapterDefaults", "AuthStyle", "Blocker", "ClientView", "CreateOptions", "Effective", "Env",
    "NoOptions", "FROM_CONDUIT", "NotFound", "Proposal", "Protocol_", "Root", "SqliteTarget", "TakeCurrent", "Target", "TextTarget", "ToolFacts",
    "ToolSettings", "Unsupported",
]

# Written in place of a key for a channel that needs none (a local vLLM without --api-key): the tools'
# SDKs refuse an empty key, and such a server accepts any.
NO_KEY = "no-key-needed"
AuthStyle = Literal["bearer", "x-api-key"]

TakeCurrent = bool | tuple[str, ...]
"""Whether an adapter that ``keeps_user_choice`` (CC Switch) takes the tool's own selection back: True when
conduit should (the profile's choice changed since the last sync, or ``--force``); ``(FROM_CONDUIT, channel,
...)`` when only the fallback routing moved the tool, so the selection moves only when it is conduit's row of one
of those channels (the profile's, the route's before and after); False otherwise."""

FROM_CONDUIT = "conduit"
"""First item of a ``TakeCurrent`` tuple ``(FROM_CONDUIT, channel, ...)``: the fallback routing alone moved the
tool, so "current" may move only from the rows of those channels (conduit's rows of this route)."""

OptionsT = TypeVar("OptionsT", bound=BaseModel)


class NoOptions(BaseModel):
    """Options model for a tool with no options of its own."""

    model_config = ConfigDict(extra="forbid")


class CreateOptions(BaseModel):
    """Options of a tool whose only option is ``create`` (a tool with more options subclasses it).

    Attributes:
        create: write the tool's files even when the tool is not found (its directory does not exist yet).
    """

    model_config = ConfigDict(extra="forbid")
    create: bool = False


@dataclass(frozen=True)
class Root:
    """A gateway root for one wire protocol, as normalized from what the person typed.

    Attributes:
        url: scheme + lower-cased host + path prefix; no trailing slash, query, fragment, pasted endpoint
            or version segment. Example: ``https://taotoken.net/api``.
        version: the API version segment the gateway uses (``v1`` unless the person's URL said ``v3``, ``v4``,
            ``v1beta``...). Rendered only for clients that do not add it themselves.
    """

    url: str
    version: str = "v1"

    def anthropic_base(self) -> str:
        """Base URL for Anthropic-SDK clients (Claude Code, CC Switch claude rows): the root, no version.

        Source: the Anthropic SDKs request ``base_url + "/v1/messages"`` (docs/formats/claude-code.md).
        """
        return self.url

    def openai_base(self) -> str:
        """Base URL for OpenAI-SDK clients (Cline, Codex, ...): root + ``/<version>``.

        Source: the OpenAI SDKs request ``base_url + "/chat/completions"`` and never add ``/v1``
        (docs/formats/cline.md).
        """
        return f"{self.url}/{self.version}"


@dataclass(frozen=True)
class ToolSettings:
    """Everything one adapter needs, already resolved from the profile.

    Attributes:
        tool: the registry name of the tool (``claude_code``...).
        channel: the channel's name in the profile (used for stable ids such as ``conduit-<channel>``).
        root: the gateway root for the protocol this tool speaks.
        key: the cleaned API key, or None when the channel needs none (a local vLLM without ``--api-key``).
        auth: how the key is sent: ``bearer`` (``Authorization: Bearer``) or ``x-api-key``.
        model: the main model id as the gateway names it.
        small_model: background/small model (Claude Code's haiku slot), or None.
        timeout_s: request timeout in seconds, or None for the tool's default.
        options: the tool's own ``[tools.<name>]`` options, an instance of the adapter's ``Options`` model
            (``NoOptions`` when none were given); an adapter reads them with ``options_as``.
        take_current: for an adapter that ``keeps_user_choice``, whether to take the tool's own selection back
            (``TakeCurrent``; the sync engine sets it, default True).
        context_window: the model's context window in tokens (the profile's ``context_window``, else what the
            channel's ``GET /v1/models`` reports), or None when unknown: an adapter writes it where the tool has
            such a setting and writes nothing when None.
        max_output_tokens: the model's output limit in tokens, or None when unknown (same rules).
        limits: what conduit wrote last into each limit key of this tool (``conduit.adapters.limits``): a
            render removes or replaces only values still its own. None (an adapter called directly): a fresh,
            empty ledger, so no value found in a file is taken for conduit's.
        mcp: the MCP servers this tool gets (``conduit.adapters.mcp``), already filtered for it; None when the
            profile has no ``[mcp]`` table (the tool's MCP entries are then left alone).
        mcp_ledger: what conduit wrote last into each MCP server map of this tool (``McpLedger``); None (an
            adapter called directly): a fresh, empty ledger.
    """

    tool: str
    channel: str
    root: Root
    key: str | None = field(repr=False)
    auth: AuthStyle = "bearer"
    model: str = ""
    small_model: str | None = None
    timeout_s: float | None = None
    options: BaseModel = field(default_factory=NoOptions)
    take_current: TakeCurrent = True
    context_window: int | None = None
    max_output_tokens: int | None = None
    limits: LimitLedger | None = field(default=None, compare=False, repr=False)
    mcp: tuple[McpServer, ...] | None = None
    mcp_ledger: McpLedger | None = field(default=None, compare=False, repr=False)

    @property
    def key_or_placeholder(self) -> str:
        """The key to write into a tool: the key, or ``NO_KEY`` for a channel that needs none (the tools'
        SDKs refuse an empty key)."""
        return self.key if self.key is not None else NO_KEY

    def options_as(self, model: type[OptionsT]) -> OptionsT:
        """The tool's options as the adapter's own ``Options`` model: the instance the resolver validated, or
        ``model``'s defaults when the settings carry none (``NoOptions``: an adapter called directly).

        Raises:
            TypeError: the settings carry another tool's options.
        """
        if isinstance(self.options, model):
            return self.options
        if type(self.options) is NoOptions:
            return model()
        raise TypeError(f"{self.tool}: options are {type(self.options).__name__}, not {model.__name__}")


class Env:
    """The environment adapters locate files in: HOME, environment variables and the working directory.

    Tests and the demo point ``home`` at a temporary directory; everything is found as the tools find it.
    """

    def __init__(self, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.cwd = cwd or Path.cwd()

    @property
    def home(self) -> Path:
        """The user's home directory (``$HOME``)."""
        return Path(self.environ.get("HOME") or os.path.expanduser("~"))

    def config_home(self) -> Path:
        """``$XDG_CONFIG_HOME``, else ``~/.config`` (where conduit's own config lives on Linux)."""
        return self.path_from("XDG_CONFIG_HOME", self.home / ".config")

    def path_from(self, name: str, default: Path) -> Path:
        """The path (a tool's directory or file) variable ``name`` points at, ``~`` expanded; else ``default``."""
        value = self.get(name)
        return Path(value).expanduser() if value else default

    def get(self, name: str) -> str | None:
        """An environment variable, stripped; None when unset or blank."""
        value = self.environ.get(name)
        return value.strip() if value and value.strip() else None


class NotFound(Exception):
    """Raised by ``Adapter.plan`` when the tool is not installed or its store is missing.

    The message says what was looked for and where; the sync engine reports it and moves on.
    """


class Unsupported(Exception):
    """Raised by ``Adapter.plan`` for a tool version conduit cannot write (e.g. Cline generation A)."""


@dataclass
class TextTarget:
    """One text file an adapter wants changed.

    Attributes:
        path: the file as the tool finds it (may be a symlink; the writer writes through it).
        render: current text (None when the file is missing) -> new text. Raises ``ToolFileError`` when the
            current text cannot be parsed; the writer then leaves the file alone.
        mask: text -> the same text with secrets replaced by fingerprints, for diffs and logs.
        mode: the file mode to create with; an existing mode is kept unless looser than this
            (``0o600`` for files holding keys).
        create: whether to create the file (and its directory) when missing.
        label: a short name for reports (``settings.json``).
        notices: what the sync result should tell a person about this file (a setting the installed version
            refuses was not written...); the writer adds them to the file's ``WriteResult.notices``.
        merge: ``render`` merges into the current content (the default). The writer then never renders from a
            file that is blank or does not parse while another program may be saving it (it re-reads, then
            skips the file). False for a render that ignores the current content (a restore).
    """

    path: Path
    render: Callable[[str | None], str]
    mask: Callable[[str], str] = lambda text: text
    mode: int = 0o600
    create: bool = True
    label: str = ""
    merge: bool = True
    notices: tuple[str, ...] = ()


@dataclass
class SqliteTarget:
    """Rows an adapter wants changed in another program's SQLite database.

    The writer opens the existing database (never creates it), sets a busy timeout, takes a backup, and
    calls ``apply`` inside one ``BEGIN IMMEDIATE`` transaction, retrying on "database is locked".

    Attributes:
        path: the database file.
        apply: (connection, dry_run) -> list of human-readable change lines with secrets already masked;
            an empty list means nothing changed (the writer then rolls back and takes no backup).
        label: a short name for reports.
        mode: the loosest mode the database (and its ``-journal``/``-wal``/``-shm`` files) may keep, e.g.
            ``0o600`` when it holds a key; looser ones are tightened, with a notice. None: modes are left as is.
    """

    path: Path
    apply: Callable[[sqlite3.Connection, bool], list[str]]
    label: str = ""
    mode: int | None = None


Target = TextTarget | SqliteTarget



class Adapter(Protocol):
    """What every tool module provides (see ``conduit.adapters.registry``); checked by mypy on the registry.

    Everything outside the adapter (the registry's names, ``conduit init``'s discovery, doctor's details, the
    variables the tests clear, the shared OpenAI field cases) comes from these declarations.

    Attributes:
        name: registry key, also the ``[tools.<name>]`` table name in the profile.
        display_name: the tool's name for people.
        protocol: the wire protocol its client speaks.
        owned_keys: the keys this adapter owns, for docs and doctor (e.g. ``env.ANTHROPIC_BASE_URL``).
        restart_hint: what a person must do for the tool to see a change, or None when it hot-reloads.
        Options: pydantic model of the tool-specific options accepted in ``[tools.<name>]``.
        env_vars: every environment variable the adapter reads, to find the tool's files or because it
            outranks them (``CODEX_HOME``, ``AIDER_MODEL``...); the test suite clears each of them.
        discover_rank: order of ``conduit init``'s proposals (lower first); the first tool found gives the
            proposed profile its main channel and model.
        writes_context: the adapter writes ``context_window``/``max_output_tokens`` into the tool's files, so the
            channel's model list is kept fresh for it (default False).
        keeps_user_choice: the tool's own window can choose the provider; the sync engine tells the adapter
            when to take that choice back (``ToolSettings.take_current``; default False).

    Required, no default (``registry.missing_declarations`` names any an adapter lacks; the types are in
    ``conduit.adapters.declarations``):
        one_shot: how to run the tool once (``OneShot``), or None for a tool without a command line.
        package: the pinned package that installs it (``Package``), or None.
        competing: its sources that may outrank conduit's file (``Competing``).
        verify_files(env): the tool's other files that decide what it sends (credentials, trust lists, files the
            adapter only reads), which ``conduit verify`` copies into its temporary HOME with ``plan``'s targets.
        tool_dirs: each variable that moves the tool's directory -> where it points inside verify's temporary
            HOME, relative (``{"CODEX_HOME": ".codex"}``; ``"."`` is the temporary HOME itself); ``{}`` for none.
        base_forms: base URL paths the real-tool tier tries (``OPENAI_FORMS``...), ``()`` without a one-shot.
        model_routes: the route(s) a model request must hit under the normalized root ``/api`` (``{model}``
            stands for the profile's model), ``()`` without a one-shot.
        fresh_options: ``[tools.<name>]`` options that let the adapter write into a fresh HOME (``{"create":
            True}``; Cline ``{"generation": "C"}``), used by ``conduit verify`` and the real-tool tier.
    Optional: verify_env: variables ``conduit verify`` sets for the run, each to a path relative to its
        temporary HOME (Aider's history files); default ``{}``.
    Optional: configured_by: ``files`` (default: ``conduit sync`` writes the tool's files) or ``environment``
        (the tool reads its gateway, key and model only from variables: ``plan`` returns ``[]`` and ``run_env``
        says everything; GitHub Copilot CLI).
    Optional: run_env: the method ``run_env(settings, env)``: the variables one session of the tool is started
        with by ``conduit run`` and printed by ``conduit env`` (``{VAR: value}``; ``None`` means "unset for the
        session"); default ``{}`` (configured by its files).
    Optional: precedence: the tool's own rules for which of its sources wins (``conduit.adapters.precedence``:
        which folders it searches for project files and what gates them, the order of its key and model sources),
        each citing where the tool implements it; ``outranks`` evaluates them; ``()`` (the default) when the tool
        has no competing source beside its user file.
    Optional: mcp: where the tool keeps MCP servers (``conduit.adapters.mcp.McpSupport``), or None (the default)
        for a tool without MCP support; with it, ``mcp_path(env)`` gives the user file and ``plan`` merges
        ``settings.mcp`` into it (``conduit.adapters.formats.mcpmap``).
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    protocol: ClassVar[Protocol_]
    owned_keys: ClassVar[tuple[str, ...]]
    restart_hint: ClassVar[str | None]
    Options: ClassVar[type[BaseModel]]
    env_vars: ClassVar[tuple[str, ...]]
    discover_rank: ClassVar[int]
    writes_context: ClassVar[bool]
    keeps_user_choice: ClassVar[bool]
    one_shot: ClassVar[OneShot | None]
    package: ClassVar[Package | None]
    competing: ClassVar[Competing]
    tool_dirs: ClassVar[Mapping[str, str]]
    verify_env: ClassVar[Mapping[str, str]]
    base_forms: ClassVar[tuple[str, ...]]
    model_routes: ClassVar[tuple[str, ...]]
    fresh_options: ClassVar[Mapping[str, object]]
    configured_by: ClassVar[ConfiguredBy]
    precedence: ClassVar[tuple[Rule, ...]]
    mcp: ClassVar[McpSupport | None]

    def mcp_path(self, env: Env) -> Path | None:
        """The user file holding the tool's MCP servers, or None without MCP support. Pure; never raises."""
        ...

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """The environment of one session with ``settings``: ``{VAR: value}``, ``None`` = unset it; ``{}`` for a
        tool configured only by its files. Pure (reads nothing); never raises."""
        ...

    def key_reference(self, env: Env) -> str | None:
        """Read-only, for where the key rests (doctor, status): the name of the reference the tool's files hold
        instead of a key when that reference runs conduit (Claude Code's ``apiKeyHelper``), else None. Never
        raises."""
        ...

    def verify_files(self, env: Env) -> list[Path]:
        """Paths (files, or directories copied whole) of the tool's files ``conduit verify`` copies besides
        ``plan``'s targets. Read-only; never raises."""
        ...

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Return the targets to write. Raises ``NotFound`` or ``Unsupported``."""
        ...

    def inspect(self, env: Env) -> ToolFacts:
        """Read-only facts for ``conduit doctor``: files found, version/generation, current owned values
        (keys masked), higher-precedence overrides. Never raises for a missing tool."""
        ...

    def discover(self, env: Env) -> Proposal | None:
        """Read-only: the gateway the tool is configured for today, for ``conduit init``; None when none (or
        when the adapter proposes nothing). Never raises."""
        ...

    def client_view(self, env: Env) -> ClientView | None:
        """Read-only: what an OpenAI-protocol client will send, from the tool's files; None when the files do
        not configure one (or for another protocol). Never raises for missing files."""
        ...

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Read-only, for ``conduit doctor``: every source that will stop the tool from using ``settings`` even
        when its files match (see ``conduit.adapters.declarations``); ``[]`` when none. Never raises."""
        ...


class AdapterDefaults:
    """Shared defaults an adapter class points at, so each shows only how its tool differs: no options, no variables, no hot reload
    hint, nothing to discover, no client view. Each adapter overrides only how its tool differs."""

    name: ClassVar[str]
    display_name: ClassVar[str]
    restart_hint: ClassVar[str | None] = None
    Options: ClassVar[type[BaseModel]] = NoOptions
    env_vars: ClassVar[tuple[str, ...]] = ()
    discover_rank: ClassVar[int] = 100
    writes_context: ClassVar[bool] = False
    keeps_user_choice: ClassVar[bool] = False
    verify_env: ClassVar[Mapping[str, str]] = {}
    configured_by: ClassVar[ConfiguredBy] = "files"
    precedence: ClassVar[tuple[Rule, ...]] = ()
    mcp: ClassVar[McpSupport | None] = None

    def mcp_path(self, env: Env) -> Path | None:
        """The user file holding the tool's MCP servers (``mcp``), or None for a tool without MCP support."""
        return None

    def require_dir(self, d: Path, create: bool, install: str | None = None, missing: str | None = None) -> None:
        """For ``plan``: raise ``NotFound`` when the tool's directory ``d`` does not exist and its ``create`` option
        is off. The message names what is ``missing`` and what to ``install`` (default: the tool, both)."""
        if not d.is_dir() and not create:
            what = missing or self.display_name
            raise NotFound(f"{what} not found: no {d}; install {install or what}, or set [tools.{self.name}] "
                           "create = true")

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """No variables: the tool is configured by its files."""
        return {}

    def key_reference(self, env: Env) -> str | None:
        """No reference that runs conduit."""
        return None

    def discover(self, env: Env) -> Proposal | None:
        """Nothing to propose."""
        return None

    def client_view(self, env: Env) -> ClientView | None:
        """No OpenAI client view."""
        return None

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Nothing known to outrank the tool's files."""
        return []
