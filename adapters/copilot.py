"""GitHub Copilot CLI: configured by environment only (its "bring your own key" provider variables).

Facts (docs/formats/copilot.md), from npm ``@github/copilot@1.0.102``: its platform package
``@github/copilot-linux-x64`` unpacks the program into ``~/.cache/copilot/pkg/linux-x64/1.0.102`` at first run;
the help topics ``copilot help providers`` and ``copilot help environment`` are in that folder's ``cli-main.js``;
the request code is in its native ``prebuilds/linux-x64/runtime.node``. What the binary sent was recorded against
the loopback gateway (tests/realtools/test_realtools_run.py):

- ``COPILOT_PROVIDER_BASE_URL`` switches the CLI to a custom provider (no GitHub sign-in needed). There is no file
  for it: ``~/.copilot/settings.json``'s ``model`` does not outrank ``COPILOT_MODEL`` (recorded), so conduit
  writes no file; ``conduit run copilot`` and ``conduit env copilot`` give a session these variables.
- ``COPILOT_PROVIDER_TYPE``: ``openai`` (default), ``azure`` or ``anthropic``. ``openai``: the CLI requests
  ``BASE_URL + "/chat/completions"`` and adds no ``/v1`` (so conduit gives ``root.openai_base()``), key as
  ``Authorization: Bearer``; ``anthropic``: ``BASE_URL + "/v1/messages"``, key as ``x-api-key``.
- ``COPILOT_PROVIDER_API_KEY`` is the key; ``COPILOT_PROVIDER_BEARER_TOKEN`` and
  ``COPILOT_PROVIDER_API_KEY_COMMAND`` take precedence over it (help text), so a session started by conduit
  unsets both.
- ``COPILOT_MODEL`` sets both the model id and the wire model; ``COPILOT_PROVIDER_MODEL_ID`` and
  ``COPILOT_PROVIDER_WIRE_MODEL`` default to it (unset for conduit's session); only the wire model changes the
  model sent (recorded: ``conduit.adapters.env_precedence``); ``--model`` outranks it too. A model is required
  with a custom provider.
- ``COPILOT_PROVIDER_MAX_PROMPT_TOKENS`` / ``COPILOT_PROVIDER_MAX_OUTPUT_TOKENS`` override the CLI's catalog; the
  output limit is sent as ``max_tokens`` (both protocols, recorded).
- ``COPILOT_HOME`` moves ``~/.copilot`` (its state: sessions, logs, ``config.json``; no gateway setting).
- ``COPILOT_OFFLINE=true`` skips GitHub sign-in, telemetry, web tools and auto-update; ``COPILOT_AUTO_UPDATE=false``
  stops update downloads (help text). ``copilot -p PROMPT --allow-all-tools`` runs one prompt non-interactively
  (``--allow-all-tools`` is "required for non-interactive mode", ``copilot --help``).
- MCP servers are the one file conduit writes: ``mcp-config.json`` (``copilot_entry``; docs/formats/copilot.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from conduit.adapters.base import AdapterDefaults, Effective, Env, Protocol_, Target, ToolFacts, ToolSettings
from conduit.adapters.declarations import (
    OPENAI_FORMS,
    OPENAI_ROUTES,
    Blocker,
    Competing,
    ConfiguredBy,
    OneShot,
    Package,
)
from conduit.adapters.env_precedence import COPILOT_MODEL_ORDER, COPILOT_RULES
from conduit.adapters.formats.mcpmap import mcp_json_targets
from conduit.adapters.formats.versions import installed_version
from conduit.adapters.mcp import McpServer, McpSupport, standard_entry
from conduit.adapters.precedence import Rule
from conduit.redact import fingerprint

BINARIES = ("copilot",)
BASE_VAR = "COPILOT_PROVIDER_BASE_URL"
TYPE_VAR = "COPILOT_PROVIDER_TYPE"
KEY_VAR = "COPILOT_PROVIDER_API_KEY"
MODEL_VAR = "COPILOT_MODEL"
PROMPT_TOKENS_VAR = "COPILOT_PROVIDER_MAX_PROMPT_TOKENS"
OUTPUT_TOKENS_VAR = "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS"
KEY_WINNERS = ("COPILOT_PROVIDER_BEARER_TOKEN", "COPILOT_PROVIDER_API_KEY_COMMAND")
"""Variables that take precedence over ``COPILOT_PROVIDER_API_KEY`` (unset in conduit's session)."""
MODEL_WINNERS = ("COPILOT_PROVIDER_MODEL_ID", "COPILOT_PROVIDER_WIRE_MODEL")
"""Variables that default to ``COPILOT_MODEL`` and override it (unset in conduit's session)."""
SECRET_VARS = frozenset({KEY_VAR, *KEY_WINNERS})


class Copilot(AdapterDefaults):
    """Adapter for GitHub Copilot CLI: no file; the provider variables of one session (``run_env``)."""

    name: ClassVar[str] = "copilot"
    display_name: ClassVar[str] = "GitHub Copilot CLI"
    protocol: ClassVar[Protocol_] = "openai"
    configured_by: ClassVar[ConfiguredBy] = "environment"
    owned_keys: ClassVar[tuple[str, ...]] = tuple(
        f"env {v}" for v in (BASE_VAR, TYPE_VAR, KEY_VAR, MODEL_VAR, PROMPT_TOKENS_VAR, OUTPUT_TOKENS_VAR))
    restart_hint: ClassVar[str | None] = ("start Copilot with `conduit run copilot` (or after `eval \"$(conduit env "
                                          "copilot --show-key)\"`): it reads these variables only at start-up")
    env_vars: ClassVar[tuple[str, ...]] = (BASE_VAR, TYPE_VAR, KEY_VAR, *KEY_WINNERS, MODEL_VAR, *MODEL_WINNERS,
                                           PROMPT_TOKENS_VAR, OUTPUT_TOKENS_VAR, "COPILOT_HOME", "COPILOT_OFFLINE")
    # COPILOT_OFFLINE / COPILOT_AUTO_UPDATE: `copilot help environment` (no GitHub sign-in, telemetry or update).
    one_shot: ClassVar[OneShot | None] = OneShot(
        BINARIES, before=("-p",), after=("--allow-all-tools",),
        opt_outs={"COPILOT_OFFLINE": "true", "COPILOT_AUTO_UPDATE": "false"}, timeout_s=90.0)
    package: ClassVar[Package | None] = Package("npm", "@github/copilot", "1.0.102", BINARIES)
    competing: ClassVar[Competing] = Competing((MODEL_VAR, *MODEL_WINNERS), (KEY_VAR, *KEY_WINNERS),
                                               (BASE_VAR, TYPE_VAR))
    tool_dirs: ClassVar[Mapping[str, str]] = {"COPILOT_HOME": ".copilot"}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {}
    precedence: ClassVar[tuple[Rule, ...]] = COPILOT_RULES  # conduit.adapters.env_precedence
    mcp: ClassVar[McpSupport | None] = McpSupport(
        file="~/.copilot/mcp-config.json", key=("mcpServers",), format="json",
        transports=frozenset({"stdio", "http", "sse"}), list_argv=("copilot", "mcp", "list"),
        project_files=(".mcp.json", ".github/mcp.json"),
        source="`copilot mcp --help` and `copilot mcp add` of @github/copilot 1.0.102",
        proven="`copilot mcp list` 1.0.102 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """``mcp-config.json`` in ``$COPILOT_HOME`` (default ``~/.copilot``)."""
        return env.path_from("COPILOT_HOME", env.home / ".copilot") / "mcp-config.json"

    def verify_files(self, env: Env) -> list[Path]:
        """None: no file of Copilot's decides what it sends."""
        return []

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Only the MCP servers (``mcp-config.json``, when the profile has ``[mcp]``): Copilot takes its provider
        from the environment alone (``run_env``)."""
        return [*mcp_json_targets(self.mcp_path(env), self.mcp, settings.mcp, settings.mcp_ledger, entry=copilot_entry)]

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """The provider variables of one session: base URL (``root.openai_base()``: the CLI appends
        ``/chat/completions``), ``openai`` type, key, model, token limits when known; the variables that would
        outrank them unset (``None``)."""
        out: dict[str, str | None] = {BASE_VAR: settings.root.openai_base(), TYPE_VAR: "openai",
                                      KEY_VAR: settings.key_or_placeholder, MODEL_VAR: settings.model}
        out.update(dict.fromkeys((*KEY_WINNERS, *MODEL_WINNERS)))
        out[PROMPT_TOKENS_VAR] = str(settings.context_window) if settings.context_window is not None else None
        out[OUTPUT_TOKENS_VAR] = (str(settings.max_output_tokens) if settings.max_output_tokens is not None
                                  else None)
        return out

    def inspect(self, env: Env) -> ToolFacts:
        """How Copilot is configured (environment only), its version, and the provider variables exported in
        this shell (keys as fingerprints)."""
        exported = {v: _shown(v, env.get(v)) for v in self.env_vars if env.get(v)}
        effective = {v: Effective(value, "shell environment", False, "a `copilot` started from this shell uses it")
                     for v, value in exported.items()}
        details = {"configured_by": "environment", "file": None, "exported": exported,
                   "version": installed_version(BINARIES)}
        summary = "environment only: `conduit run copilot` or `eval \"$(conduit env copilot --show-key)\"`"
        return ToolFacts(summary=summary, details=details, effective=effective)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """Each provider variable exported in the shell with another value than the profile's session (a
        ``copilot`` started from this shell uses it); none after ``eval "$(conduit env copilot --show-key)"``. Of
        the model variables only those of ``COPILOT_MODEL_ORDER`` count: ``COPILOT_PROVIDER_MODEL_ID`` does not
        change the model sent."""
        wanted = self.run_env(settings, env)
        out: list[Blocker] = []
        model_vars = [v for v in COPILOT_MODEL_ORDER.sources if v.startswith("COPILOT_")]
        for var in dict.fromkeys((*self.competing.base, *self.competing.key, *model_vars,
                                  PROMPT_TOKENS_VAR, OUTPUT_TOKENS_VAR)):
            have = env.get(var)
            if have is None or have == wanted.get(var):
                continue
            out.append(Blocker("overridden", "shell environment",
                               f"{var} is exported with another value than the profile's: `copilot` started from "
                               "this shell uses it", f"unset {var}, or start Copilot with `conduit run copilot` "
                               "(or after `eval \"$(conduit env copilot --show-key)\"`)"))
        return out


def copilot_entry(server: McpServer) -> dict[str, Any]:
    """Copilot CLI's ``mcpServers.NAME``, as ``copilot mcp add`` 1.0.102 writes it: ``{"tools": ["*"], "type":
    "local", "command", "args", "env", "cwd"}``, or ``{"tools": ["*"], "type": "http"|"sse", "url", "headers"}``
    (values written as they are: the CLI keeps a ``${VAR}`` header as text, expanding none documented)."""
    return {"tools": ["*"], **standard_entry(server, http_type="http", stdio_type="local")}


def _shown(var: str, value: str | None) -> str | None:
    """``value`` as doctor shows it: a fingerprint for a key variable."""
    return fingerprint(value) if var in SECRET_VARS and value else value


__all__ = ["Copilot"]
