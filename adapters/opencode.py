"""OpenCode: a conduit provider in the global ``opencode.json`` / ``opencode.jsonc``.

Facts (sst/opencode docs ``config``, ``providers`` ("Custom provider"), and ``packages/opencode/src/config``):
- Global config: ``$XDG_CONFIG_HOME/opencode/`` (default ``~/.config/opencode/``), file ``opencode.jsonc``,
  ``opencode.json`` or the older ``config.json``; JSON with comments and trailing commas. Comments survive
  conduit's edits (surgical JSONC edits, ``conduit.adapters.textformats``); a file that cannot be edited
  safely is refused with a message.
- A custom OpenAI-compatible provider: ``provider.<id> = {"npm": "@ai-sdk/openai-compatible", "name": ...,
  "options": {"baseURL": ..., "apiKey": ...}, "models": {"<model id>": {"name": ...}}}``; ``model`` /
  ``small_model`` are ``"<provider id>/<model id>"``. The AI SDK requests ``baseURL + "/chat/completions"``,
  so ``baseURL`` carries the version segment.
- Variable substitution: ``{env:VAR}`` and ``{file:PATH}`` (``~/`` or absolute path; the file's text, trimmed).
  conduit writes ``{file:<conduit config>/tool-keys/<channel>.key}`` and that key file (0600, conduit's own),
  so the literal key never appears in OpenCode's config; ``key_source = "env"`` writes ``{env:CONDUIT_API_KEY}``
  instead (export it yourself).
- Layers, later wins: remote ``.well-known/opencode`` < global < ``$OPENCODE_CONFIG`` < project
  ``opencode.json[c]`` < ``.opencode/`` < ``$OPENCODE_CONFIG_CONTENT``. OpenCode reads its config at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from conduit.adapters.base import Env, NotFound, Target, ToolSettings
from conduit.adapters.textformats import jsonc_target, parse_jsonc, plain_target, tool_version

PROVIDER_ID = "conduit"
KEY_VAR = "CONDUIT_API_KEY"
FILE_NAMES = ("opencode.jsonc", "opencode.json", "config.json")


class OpenCodeOptions(BaseModel):
    """``[tools.opencode]`` options.

    Attributes:
        key_source: ``file`` (conduit writes a 0600 key file and references it) or ``env``.
        create: write ``opencode.json`` even when OpenCode's config directory does not exist yet.
    """

    model_config = ConfigDict(extra="forbid")
    key_source: Literal["file", "env"] = "file"
    create: bool = False


def config_dir(env: Env) -> Path:
    """``$XDG_CONFIG_HOME/opencode`` or ``~/.config/opencode``."""
    return env.config_home() / "opencode"


def config_file(env: Env) -> Path:
    """The global config file OpenCode uses: the first existing of ``FILE_NAMES``, else ``opencode.json``."""
    d = config_dir(env)
    return next((d / n for n in FILE_NAMES if (d / n).exists()), d / "opencode.json")


def key_file(channel: str, env: Env) -> Path:
    """conduit's own key file for tools that reference a key by path:
    ``<conduit config>/tool-keys/<channel>.key`` (``$XDG_CONFIG_HOME/conduit``, as the daemon's paths)."""
    return env.config_home() / "conduit" / "tool-keys" / f"{channel}.key"


class OpenCode:
    """Adapter for OpenCode's global config (a conduit provider plus ``model``/``small_model``)."""

    name: ClassVar[str] = "opencode"
    display_name: ClassVar[str] = "OpenCode"
    protocol: ClassVar = "openai"
    owned_keys: ClassVar = (
        "opencode.json[c]: provider.conduit (npm, name, options.baseURL, options.apiKey, models), model, "
        "small_model (when the profile sets one)",
        "<conduit config>/tool-keys/<channel>.key (key_source = file)",
    )
    restart_hint: ClassVar = "restart OpenCode: it reads its config at start-up"
    Options: ClassVar[type[BaseModel]] = OpenCodeOptions

    def plan(self, settings: ToolSettings, env: Env) -> list[Target]:
        """Targets: the key file (for ``file``) and the provider edits in the config file."""
        opts = OpenCodeOptions.model_validate(dict(settings.options))
        path = config_file(env)
        if not path.parent.is_dir() and not opts.create:
            raise NotFound(f"OpenCode not found: no {path.parent}; install OpenCode, or set [tools.opencode] "
                           "create = true")
        key = settings.key_or_placeholder
        targets: list[Target] = []
        if opts.key_source == "file":
            kf = key_file(settings.channel, env)
            targets.append(plain_target(kf, key, label=f"tool-keys/{kf.name}"))
            api_key = f"{{file:{kf}}}"
        else:
            api_key = f"{{env:{KEY_VAR}}}"
        models = [settings.model] + ([settings.small_model] if settings.small_model
                                     and settings.small_model != settings.model else [])

        def edits(doc: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
            base = ("provider", PROVIDER_ID)
            current = (doc.get("provider") or {}).get(PROVIDER_ID) if isinstance(doc.get("provider"), dict) else None
            known = dict(current.get("models") or {}) if isinstance(current, dict) else {}
            out: list[tuple[tuple[str, ...], Any]] = [
                ((*base, "npm"), "@ai-sdk/openai-compatible"),
                ((*base, "name"), f"conduit ({settings.channel})"),
                ((*base, "options", "baseURL"), settings.root.openai_base()),
                ((*base, "options", "apiKey"), api_key),
            ]
            out += [((*base, "models", m), known.get(m) or {"name": m}) for m in models]
            out.append((("model",), f"{PROVIDER_ID}/{settings.model}"))
            if settings.small_model:
                out.append((("small_model",), f"{PROVIDER_ID}/{settings.small_model}"))
            return out

        targets.append(jsonc_target(path, edits, secret_keys=("apiKey",), label=path.name))
        return targets

    def inspect(self, env: Env) -> dict[str, Any]:
        """Facts for doctor: the file, the conduit provider, and the layers that override the global file."""
        path = config_file(env)
        try:
            doc, error = parse_jsonc(path.read_text(encoding="utf-8"), path=path), None
        except FileNotFoundError:
            doc, error = {}, None
        except Exception as exc:
            doc, error = {}, str(exc)
        provider = (doc.get("provider") or {}).get(PROVIDER_ID) or {}
        api_key = (provider.get("options") or {}).get("apiKey")
        effective: dict[str, Any] = {}
        layers = [("OPENCODE_CONFIG", Path(env.get("OPENCODE_CONFIG") or "")) if env.get("OPENCODE_CONFIG") else None]
        layers += [(f"project {p.name}", p) for p in (env.cwd / "opencode.json", env.cwd / "opencode.jsonc",
                                                      env.cwd / ".opencode" / "opencode.json",
                                                      env.cwd / ".opencode" / "opencode.jsonc")]
        for layer in layers:
            if layer is None or layer[1] == path or not layer[1].is_file():
                continue
            try:
                ldoc = parse_jsonc(layer[1].read_text(encoding="utf-8"), path=layer[1])
            except Exception:
                continue
            if "model" in ldoc:
                effective["model"] = {"value": ldoc["model"], "source": f"{layer[0]} ({layer[1]})",
                                      "overrides_conduit": ldoc["model"] != doc.get("model"),
                                      "why": "it ranks above the global config conduit writes"}
        if env.get("OPENCODE_CONFIG_CONTENT"):
            effective["OPENCODE_CONFIG_CONTENT"] = {"value": "(set)", "source": "shell environment",
                                                    "overrides_conduit": True,
                                                    "why": "inline config ranks above every file"}
        if isinstance(api_key, str) and api_key.startswith("{env:") and not env.get(api_key[5:-1]):
            effective[api_key[5:-1]] = {"value": None, "source": None, "overrides_conduit": False,
                                        "why": "the key is referenced from the environment but not exported"}
        return {"file": str(path), "exists": path.exists(), "parse_error": error,
                "owned": {"baseURL": (provider.get("options") or {}).get("baseURL"),
                          "apiKey": api_key if isinstance(api_key, str) and api_key.startswith("{") else
                          ("(literal key)" if api_key else None),
                          "model": doc.get("model"), "small_model": doc.get("small_model")},
                "version": tool_version("opencode"), "effective": effective}


__all__ = ["OpenCode", "OpenCodeOptions", "config_dir", "config_file", "key_file"]
