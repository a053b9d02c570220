"""Kilo CLI: a conduit provider in Kilo's global ``kilo.jsonc`` / ``kilo.json`` (the OpenCode format).

Kilo CLI is built from OpenCode, and its config has OpenCode's shape, so the provider edits, the key reference,
the limits and the client view are ``conduit.adapters.opencode``'s own functions. Facts, read in the
``@kilocode/cli`` 7.7.7 package (npm; its ``bin`` names ``kilo`` and ``kilocode``, both the compiled binary of
``@kilocode/cli-linux-x64``, whose bundled JS holds the code quoted here) and in Kilo-Org/kilocode
``packages/opencode/src/global/index.ts`` and ``src/config/config.ts``:
- Global directory: ``Global.Path.config`` = ``$XDG_CONFIG_HOME/kilo`` (default ``~/.config/kilo``;
  ``global/index.ts``: ``app = "kilo"`` and the ``xdg-basedir`` roots). Files there, merged in this order,
  later wins: ``config.json``, ``kilo.json``, ``kilo.jsonc``, ``opencode.json``, ``opencode.jsonc`` (the
  global loader in the 7.7.7 bundle). JSON with comments and trailing commas (``jsonc-parser``).
- The file Kilo itself writes global settings to (and creates with ``$schema`` at first start when none exists
  and no ``KILO_CONFIG*`` is set): the first existing of ``kilo.jsonc``, ``kilo.json``, ``opencode.jsonc``,
  ``opencode.json``, ``config.json``, else ``kilo.jsonc``; conduit writes the same file (``FILE_NAMES``).
  At start-up Kilo edits that file itself (adds ``$schema`` and a ``permission.bash`` migration); conduit keeps
  those keys.
- Provider shape as OpenCode's: ``provider.<id> = {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL",
  "apiKey"}, "models": {"<id>": {"limit": {"context", "output"}}}}``, ``model = "<provider>/<model>"``; the AI
  SDK requests ``baseURL + "/chat/completions"``. ``max_tokens = min(limit.output, 32000) || 32000``
  (``OUTPUT_TOKEN_MAX`` in the bundle).
- Substitution: ``{env:VAR}`` and ``{file:PATH}`` (``~/`` or absolute; the text, trimmed) in the global file
  (a trusted source); project files may not use ``{env:...}``. conduit writes ``{file:<conduit
  config>/tool-keys/<channel>.key}`` (0600), or ``{env:CONDUIT_API_KEY}`` with ``key_source = "env"``.
- Layers above the global files, later wins: ``$KILO_CONFIG`` (a file), the project's ``kilo.jsonc``,
  ``kilo.json``, ``opencode.jsonc``, ``opencode.json`` (from the working directory up to the worktree; off with
  ``KILO_DISABLE_PROJECT_CONFIG``), the ``.kilocode/`` and ``.kilo/`` directories of the project, of HOME
  (``~/.kilocode``, ``~/.kilo``) and ``$KILO_CONFIG_DIR``, each with ``kilo.jsonc``, ``kilo.json``,
  ``opencode.jsonc``, ``opencode.json``; then ``$KILO_CONFIG_CONTENT`` (inline JSON); then ``/etc/kilo``
  (managed). Kilo reads its config at start-up.
- Opt-outs: ``KILO_DISABLE_AUTOUPDATE``, ``KILO_TELEMETRY_LEVEL`` (anything but ``all`` turns its telemetry off)
  and ``KILO_DISABLE_MODELS_FETCH`` (no models.dev download), all read in the 7.7.7 bundle's flag table.
Proven with the 7.7.7 binary (docs/formats/kilo.md).
- MCP servers: OpenCode's ``mcp`` object in the same file (docs/formats/kilo.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel

from conduit.adapters.base import (
    AdapterDefaults,
    ClientView,
    CreateOptions,
    Effective,
    Env,
    Protocol_,
    Target,
    ToolFacts,
    ToolSettings,
)
from conduit.adapters.declarations import OPENAI_FORMS, OPENAI_ROUTES, Blocker, Competing, OneShot, Package
from conduit.adapters.formats.textformats import tool_version
from conduit.adapters.mcp import McpSupport
from conduit.adapters.opencode import (
    KEY_VAR,
    OPENCODE_MCP,
    key_file,
    model_overrides,
    owned_values,
    provider_targets,
    provider_view,
    read_config,
    unexported_key,
)
from conduit.adapters.opencode_precedence import KILO_RULES, project_blockers, project_files
from conduit.adapters.precedence import Rule

FILE_NAMES = ("kilo.jsonc", "kilo.json", "opencode.jsonc", "opencode.json", "config.json")
"""The global files in the order Kilo picks the one it writes (the first that exists; ``kilo.jsonc`` when none)."""
MERGE_ORDER = ("config.json", "kilo.json", "kilo.jsonc", "opencode.json", "opencode.jsonc")
"""The global files in the order Kilo merges them (later wins)."""
DIR_FILES = ("kilo.jsonc", "kilo.json", "opencode.jsonc", "opencode.json")
"""The files Kilo reads in the project and in each ``.kilocode``/``.kilo`` directory, in its order (later wins)."""
PROJECT_FILES = DIR_FILES + tuple(f"{d}/{n}" for d in (".kilocode", ".kilo") for n in DIR_FILES)
"""The project files (relative to the working directory) that rank above the global file."""


class KiloOptions(CreateOptions):
    """``[tools.kilo]`` options.

    Attributes:
        key_source: ``file`` (conduit writes a 0600 key file and references it) or ``env``
            (``{env:CONDUIT_API_KEY}``: ``conduit run kilo`` sets it, or export it yourself).
    """

    key_source: Literal["file", "env"] = "file"


def config_dir(env: Env) -> Path:
    """``$XDG_CONFIG_HOME/kilo`` or ``~/.config/kilo``."""
    return env.config_home() / "kilo"


def config_file(env: Env) -> Path:
    """The global file Kilo writes: the first existing of ``FILE_NAMES``, else ``kilo.jsonc``."""
    d = config_dir(env)
    return next((d / n for n in FILE_NAMES if (d / n).exists()), d / FILE_NAMES[0])


def layers_above(path: Path, env: Env) -> list[tuple[str, Path]]:
    """The files that rank above ``path`` (the global file conduit writes), lowest first: the global files Kilo
    merges after it, ``$KILO_CONFIG``, the project's files (working directory only), ``~/.kilocode``, ``~/.kilo``
    and ``$KILO_CONFIG_DIR``."""
    names = MERGE_ORDER[MERGE_ORDER.index(path.name) + 1:] if path.name in MERGE_ORDER else ()
    out = [(f"global {n}", path.parent / n) for n in names]
    if env.get("KILO_CONFIG"):
        out.append(("KILO_CONFIG", Path(env.get("KILO_CONFIG") or "").expanduser()))
    out += [(f"project {p}", p) for p in project_files(env, path, KILO_RULES)]  # from the worktree down to the working folder
    dirs = [env.home / ".kilocode", env.home / ".kilo"]
    if env.get("KILO_CONFIG_DIR"):
        dirs.append(Path(env.get("KILO_CONFIG_DIR") or "").expanduser())
    out += [(str(d / n), d / n) for d in dirs for n in DIR_FILES]
    return out


class Kilo(AdapterDefaults):
    """Adapter for Kilo CLI's global config (a conduit provider plus ``model``/``small_model``)."""

    name: ClassVar[str] = "kilo"
    writes_context: ClassVar[bool] = True  # limit.context / limit.output of conduit's model entry
    display_name: ClassVar[str] = "Kilo CLI"
    protocol: ClassVar[Protocol_] = "openai"
    owned_keys: ClassVar[tuple[str, ...]] = (
        "kilo.jsonc (or the global file Kilo writes): provider.conduit (npm, name, options.baseURL, "
        "options.apiKey, models), model, small_model (when the profile sets one; conduit's value goes when it sets "
        "none), provider.conduit.models.<model>.limit (removed when unknown)",
        "<conduit config>/tool-keys/<channel>.key (key_source = file)",
    )
    restart_hint: ClassVar[str | None] = "restart Kilo: it reads its config at start-up"
    Options: ClassVar[type[BaseModel]] = KiloOptions
    env_vars: ClassVar[tuple[str, ...]] = ("XDG_CONFIG_HOME", "KILO_CONFIG", "KILO_CONFIG_CONTENT", "KILO_CONFIG_DIR",
                                           "KILO_DISABLE_PROJECT_CONFIG", KEY_VAR)

    # A run took 23-29 s on 2 busy cores (start-up, then one streamed answer): twice the default bound.
    one_shot: ClassVar[OneShot | None] = OneShot(("kilo",), ("run",), opt_outs={
        "KILO_DISABLE_AUTOUPDATE": "1", "KILO_TELEMETRY_LEVEL": "off", "KILO_DISABLE_MODELS_FETCH": "1"},
        timeout_s=120.0)
    package: ClassVar[Package | None] = Package("npm", "@kilocode/cli", "7.7.7", ("kilo",))
    # The inline config; $KILO_CONFIG and $KILO_CONFIG_DIR are files, read by ``outranks`` (``layers_above``).
    competing: ClassVar[Competing] = Competing(("KILO_CONFIG_CONTENT",), (), ("KILO_CONFIG_CONTENT",), PROJECT_FILES)
    tool_dirs: ClassVar[Mapping[str, str]] = {}
    base_forms: ClassVar[tuple[str, ...]] = OPENAI_FORMS
    model_routes: ClassVar[tuple[str, ...]] = OPENAI_ROUTES
    fresh_options: ClassVar[Mapping[str, object]] = {"create": True}
    precedence: ClassVar[tuple[Rule, ...]] = KILO_RULES  # conduit.adapters.opencode_precedence
    mcp: ClassVar[McpSupport | None] = dataclasses.replace(
        OPENCODE_MCP, file="~/.config/kilo/kilo.jsonc", list_argv=("kilo", "mcp", "list"),
        project_files=("kilo.json", "kilo.jsonc", ".kilo/kilo.json", ".kilo/kilo.jsonc", "opencode.json",
                       "opencode.jsonc"),
        source="Kilo-Org/kilocode packages/opencode/src/config/config.ts (the OpenCode `mcp` schema); "
               "the 7.7.7 binary's schema",
        proven="`kilo mcp list` 7.7.7 (real-tool tier)")

    def mcp_path(self, env: Env) -> Path | None:
        """The global file conduit writes (``config_file``): its ``mcp`` object."""
        return config_file(env)

    def verify_files(self, env: Env) -> list[Path]:
        """``config_dir`` (copied whole) and Kilo's credentials ``~/.local/share/kilo/auth.json``."""
        return [config_dir(env), env.home / ".local/share/kilo/auth.json"]

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the key file (for ``file``) and the provider edits in the global file."""
        opts = settings.options_as(KiloOptions)
        path = config_file(env)
        self.require_dir(path.parent, opts.create)
        return provider_targets(settings, path, env, opts.key_source)

    def run_env(self, settings: ToolSettings, env: Env) -> dict[str, str | None]:
        """``{CONDUIT_API_KEY: key}`` for ``key_source = "env"`` (what ``{env:CONDUIT_API_KEY}`` reads: ``conduit run
        kilo`` and ``conduit env kilo`` give it to the session); ``{}`` otherwise (files only)."""
        if settings.options_as(KiloOptions).key_source == "env":
            return {KEY_VAR: settings.key_or_placeholder}
        return {}

    def inspect(self, env: Env) -> ToolFacts:
        """Facts for doctor: the file, the conduit provider, and the layers that set another ``model``."""
        path = config_file(env)
        doc, error = read_config(path)
        effective = model_overrides(doc, path, layers_above(path, env)) | unexported_key(doc, env)
        if env.get("KILO_CONFIG_CONTENT"):
            effective["KILO_CONFIG_CONTENT"] = Effective("(set)", "shell environment", True,
                                                         "inline config ranks above every file")
        return ToolFacts.of_file(path, error, owned_values(doc), tool_version("kilo"), effective)

    def client_view(self, env: Env) -> ClientView | None:
        """What Kilo sends for its ``model``: conduit's provider's ``baseURL`` and resolved ``apiKey``."""
        return provider_view(read_config(config_file(env))[0], env)

    def outranks(self, settings: ToolSettings, env: Env) -> list[Blocker]:
        """An exported ``KILO_CONFIG_CONTENT``, a gateway value another project file Kilo applies sets
        (``conduit.adapters.opencode_precedence.KILO_RULES``: from the worktree down to the working folder), and a
        file above the one conduit writes (another global file, ``$KILO_CONFIG``, ``~/.kilo``, ``~/.kilocode``,
        ``$KILO_CONFIG_DIR``) that sets another ``model``."""
        out = dataclasses.replace(self.competing, files=()).blockers(env.environ, env.cwd)
        path = config_file(env)
        doc, _ = read_config(path)
        opts = settings.options_as(KiloOptions)
        wanted = {"model": f"conduit/{settings.model}", "provider.conduit.options.baseURL": settings.root.openai_base(),
                  "provider.conduit.options.apiKey": f"{{file:{key_file(settings.channel, env)}}}"
                  if opts.key_source == "file" else "{env:CONDUIT_API_KEY}"}
        out += project_blockers(env, path, wanted, "conduit", project_files(env, path, KILO_RULES))
        seen = {b.source for b in out}
        for label, layer in layers_above(path, env):
            if str(layer) in seen or label.startswith("project ") or not layer.is_file():
                continue
            other, error = read_config(layer)
            if error is None and "model" in other and other["model"] != f"conduit/{settings.model}":
                out.append(Blocker("overridden", str(layer), f"it sets model = {other['model']!r}, which ranks "
                                   f"above {path.name}", f"remove \"model\" from {layer}"))
        return out


__all__ = ["Kilo", "KiloOptions", "config_dir", "config_file", "layers_above"]
