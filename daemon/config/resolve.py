"""From a validated profile to what each adapter receives: the channel's roots, its cleaned key, the model.

Key sources may run commands (``pass show ...``), so each channel's key is read once per ``Resolver``. Every key
read is registered with the process-wide ``conduit.daemon.config.redaction.REDACTOR`` (by ``read_key``; the
literal ``[vllm].api_key`` when the profile is loaded), which masks what the CLI prints.

The implicit ``local`` channel of a ``[vllm]`` table (``conduit.daemon.config.profile``) resolves like any other; when
``[vllm].api_key`` is written as the key itself (not a key source), that value is the channel's key.

Routing (docs/design.md "Routing"): while the agent's decision (``conduit.daemon.config.routing``, read once
per Resolver unless one is passed) says ``fallback`` for this profile, a tool whose channel is the primary, whose ``[tools.X] fallback`` is
not false and whose protocol the fallback channel speaks is resolved to the ``[fallback]`` channel, model and
small model (``Resolver.fallback_route``); every other tool is resolved as the profile says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import SecretStr

from conduit.adapters.base import AuthStyle, Root, ToolSettings
from conduit.adapters.keyref import RUNS_CONDUIT, delivery_options
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.mcpconfig import tool_servers
from conduit.daemon.config.profile import LoadedProfile, channel_hint
from conduit.daemon.config.routing import RoutingDecision, read_routing
from conduit.daemon.config.sources import read_key
from conduit.errors import BadArguments, KeyError_

if TYPE_CHECKING:  # vllm_settings() imports it: a profile without [vllm] never builds its models
    from conduit.daemon.config.vllm import VllmSettings


@dataclass(frozen=True)
class ResolvedChannel:
    """A channel ready to use.

    Attributes:
        name: the channel's name in the profile.
        roots: one normalized ``Root`` per protocol the channel speaks (keys ``openai``/``anthropic``).
        key: the cleaned API key, or None when the channel has no key source. Never printed: see fingerprint().
        auth: ``bearer`` or ``x-api-key``.
        timeout_s: request timeout in seconds, or None.
        notices: what key cleaning changed ("removed a trailing line break"), without the key.
    """

    name: str
    roots: dict[str, Root]
    key: str | None = field(repr=False)
    auth: AuthStyle
    timeout_s: float | None
    notices: tuple[str, ...] = ()


class Resolver:
    """Resolves channels and tool settings for one profile, reading each channel's key at most once.

    Args:
        profile: the loaded profile.
        environ: environment for ``env`` key sources (default: the process environment).
        routing: the routing decision to honour; ``"file"`` (default) reads the routing file once, when first
            needed; None: no decision (every tool on the primary).
    """

    def __init__(self, profile: LoadedProfile, environ: Mapping[str, str] | None = None,
                 routing: RoutingDecision | Literal["file"] | None = "file") -> None:
        self.profile = profile
        self.environ = environ
        self._channels: dict[str, ResolvedChannel | KeyError_] = {}
        self._routing = routing

    @property
    def routing(self) -> RoutingDecision | None:
        """The routing decision this Resolver honours (the file is read at the first use, then kept)."""
        if self._routing == "file":
            self._routing = read_routing()
        return self._routing if isinstance(self._routing, RoutingDecision) else None

    def fallback_route(self, tool: str) -> FallbackSettings | None:
        """The ``[fallback]`` table ``tool`` is routed to now, or None (it uses its own channel): the decision says
        fallback for this profile, the tool's channel is the primary, its ``fallback`` is not false, and the
        fallback channel speaks the tool's protocol."""
        d = self.routing
        route = d.route_for(self.profile) if d is not None else None
        cfg = self.profile.model.tools.get(tool)
        if route is None or cfg is None or not cfg.fallback or self._own_channel(tool) != self.profile.model.channel:
            return None
        adapter = ADAPTERS.get(tool)
        if adapter is None or adapter.protocol not in self.profile.roots.get(route.channel, {}):
            return None
        return route

    def channel(self, name: str) -> ResolvedChannel:
        """The resolved channel ``name``. Raises KeyError_ when its key source fails (cached per Resolver)."""
        if name not in self._channels:
            try:
                self._channels[name] = self._resolve(name)
            except KeyError_ as exc:
                self._channels[name] = exc
        got = self._channels[name]
        if isinstance(got, KeyError_):
            raise got
        return got

    def _resolve(self, name: str) -> ResolvedChannel:
        ch = self.profile.model.channels[name]
        key: str | None = None
        notices: tuple[str, ...] = ()
        if ch.key is not None:
            cleaned = read_key(ch.key, environ=self.environ)
            key, notices = cleaned.key, tuple(f"channels.{name}.key: {n}" for n in cleaned.notices)
        elif name in self.profile.implicit_channels and self.profile.vllm and self.profile.vllm.api_key:
            key = self.profile.vllm.api_key.get_secret_value()  # as vLLM was given it (VLLM_API_KEY)
        return ResolvedChannel(name=name, roots=self.profile.roots[name], key=key, auth=ch.auth,
                               timeout_s=ch.timeout, notices=notices)

    def _own_channel(self, tool: str) -> str:
        cfg = self.profile.model.tools.get(tool)
        return (cfg.channel if cfg and cfg.channel else None) or self.profile.model.channel

    def tool_channel_name(self, tool: str) -> str:
        """The channel a tool uses: the fallback channel while it is routed there (``fallback_route``), else its
        own ``channel`` override, else the profile's."""
        route = self.fallback_route(tool)
        return route.channel if route is not None else self._own_channel(tool)

    def _options(self, tool: str, channel: str) -> dict[str, object]:
        """The tool's own options, with the ``key_delivery`` of the channel it uses filled in where the table
        does not set the tool's own form of it (``conduit.adapters.keyref.delivery_options``). A channel whose key
        comes from an exported variable (``key = { env = ... }``) and sets no ``key_delivery`` gives a tool whose
        reference runs conduit (``RUNS_CONDUIT``: Claude Code) a copy: the reference would read the variable in
        the tool's environment (an editor, a desktop launcher), where it is often not set."""
        cfg, ch = self.profile.model.tools[tool], self.profile.model.channels.get(channel)
        delivery = ch.key_delivery if ch is not None else None
        if delivery is None and ch is not None and ch.key is not None and ch.key.env and tool in RUNS_CONDUIT:
            delivery = "copy"
        return delivery_options(tool, delivery, cfg.options())

    def tool_settings(self, tool: str) -> ToolSettings:
        """The ``ToolSettings`` for ``tool``.

        Raises:
            ProfileError: the tool's table has a problem of its own (``LoadedProfile.tool_problems``: its
                channel is not defined or does not speak the tool's protocol, an option is invalid).
            KeyError_: the channel's key cannot be read.
        """
        problem = self.profile.tool_problems.get(tool)
        if problem is not None:
            raise problem
        prof = self.profile.model
        cfg = prof.tools[tool]
        adapter = ADAPTERS[tool]
        route = self.fallback_route(tool)
        ch = self.channel(route.channel if route is not None else self._own_channel(tool))
        return ToolSettings(
            tool=tool,
            channel=ch.name,
            root=ch.roots[adapter.protocol],
            key=ch.key,
            auth=ch.auth if adapter.protocol == "anthropic" else "bearer",
            model=route.model if route is not None else cfg.model or prof.model,
            small_model=route.small_model if route is not None else cfg.small_model or prof.small_model,
            timeout_s=ch.timeout_s,
            options=adapter.Options.model_validate(self._options(tool, ch.name)),  # checked at load: tool_problems
            mcp=tool_servers(prof.mcp, prof.tools, tool, self.environ),
        )


def require_channel(profile: LoadedProfile, name: str) -> None:
    """Refuse a channel named on the command line (``--channel``, ``conduit key rotate NAME``) that the profile
    does not define.

    Raises:
        BadArguments: exit code 3 in every command, with the close match and the channels defined.
    """
    if name not in profile.model.channels:
        raise BadArguments(f"channel `{name}` is not defined in {profile.path}",
                           channel_hint(name, profile.model.channels))


def resolve_channel(profile: LoadedProfile, name: str, *, environ: Mapping[str, str] | None = None) -> ResolvedChannel:
    """Resolve one channel (convenience for the agent's prober and ``conduit bench``). Raises KeyError_."""
    return Resolver(profile, environ).channel(name)


def vllm_settings(profile: LoadedProfile, *, environ: Mapping[str, str] | None = None) -> VllmSettings | None:
    """The profile's ``[vllm]`` settings ready to launch with: ``api_key`` read from its key source when
    ``[vllm].api_key`` is one (``{ secret = "vllm" }``). None when the profile has no ``[vllm]`` table.

    Raises:
        KeyError_: the key source cannot be read (names the source, never the key).
    """
    settings = profile.vllm
    if settings is None or profile.vllm_key is None:
        return settings
    cleaned = read_key(profile.vllm_key, environ=environ)
    return settings.model_copy(update={"api_key": SecretStr(cleaned.key)})
