"""Claude Code's order of model and key sources, as data (``conduit.adapters.precedence``), and doctor's reading
of it: when the top-level ``"model"`` setting (``sonnet``, ``opusplan``, a full id) decides the model, and when
it is shadowed by the ``ANTHROPIC_MODEL`` conduit writes.

Read in the ``@anthropic-ai/claude-code`` 2.1.197 bundle (``bin/claude.exe``, plain JavaScript text in it) and
checked with that binary by tests/realtools/test_realtools_precedence.py; facts in docs/formats/claude-code.md
("Who wins: model and key").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.declarations import Blocker
from conduit.adapters.precedence import Cite, Order, ProjectScope

BUNDLE = "npm @anthropic-ai/claude-code"
"""Claude Code's source is not published: its rules are cited from the package's bundle ``bin/claude.exe``."""

PROJECT_SCOPE = ProjectScope(
    (".claude/settings.json", ".claude/settings.local.json"), "cwd",
    Cite(BUNDLE, "bin/claude.exe", "projectSettings / localSettings: <cwd>/.claude/settings*.json; the git root "
         "is not searched from a subfolder", "2.1.197"))
"""The project settings files Claude Code reads: in the working folder only (a file at the repository root is not
read from a subfolder: checked with 2.1.197); ``settings.local.json`` above ``settings.json``."""

MODEL_SETTING = '"model" setting'
MODEL_ORDER = Order(
    "model", ("--model", "ANTHROPIC_MODEL", MODEL_SETTING),
    Cite(BUNDLE, "bin/claude.exe", "model resolution at start-up: cli model, else env.ANTHROPIC_MODEL || "
         "settings.model", "2.1.197"),
    note="ANTHROPIC_MODEL is the highest settings file's env value (managed, project local, project, user), else "
         "the shell's; an empty value does not count. An alias resolves through ANTHROPIC_DEFAULT_<ALIAS>_MODEL.")
"""Which model Claude Code asks for: ``--model``, else ``ANTHROPIC_MODEL``, else the merged settings' top-level
``model``. conduit writes ``env.ANTHROPIC_MODEL`` in the user file, so a top-level ``model`` decides only where no
settings file nor the shell sets ``ANTHROPIC_MODEL``."""

KEY_ORDER = Order(
    "key", ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "apiKeyHelper"),
    Cite(BUNDLE, "bin/claude.exe", "auth token source (ANTHROPIC_AUTH_TOKEN first) and API key source "
         "(ANTHROPIC_API_KEY, else apiKeyHelper)", "2.1.197"),
    note="two headers: ANTHROPIC_AUTH_TOKEN fills Authorization: Bearer; ANTHROPIC_API_KEY, else apiKeyHelper, "
         "fills x-api-key. A helper or an API key beside conduit's token is sent too (a second credential).")
"""Claude Code's credentials: the Bearer token and the x-api-key are separate, so ``apiKeyHelper`` or an exported
``ANTHROPIC_API_KEY`` beside conduit's ``ANTHROPIC_AUTH_TOKEN`` adds a second key to every request (2.1.197)."""

ALIAS_SLOTS = {"sonnet": "ANTHROPIC_DEFAULT_SONNET_MODEL", "opus": "ANTHROPIC_DEFAULT_OPUS_MODEL",
               "haiku": "ANTHROPIC_DEFAULT_HAIKU_MODEL", "opusplan": "ANTHROPIC_DEFAULT_SONNET_MODEL",
               "default": "ANTHROPIC_DEFAULT_SONNET_MODEL"}
"""The variable each model alias resolves through (``opusplan``: the sonnet slot outside plan mode, the opus one
in it; conduit points both at the profile's model)."""

RULES = (PROJECT_SCOPE, MODEL_ORDER, KEY_ORDER)
"""Claude Code's precedence rules (``ClaudeCode.precedence``)."""

Layers = Sequence[tuple[Path, dict[str, Any], bool]]
"""Settings files highest first as ``(path, document, ranks_above_user)`` (``claude_code._layers``)."""

__all__ = ["ALIAS_SLOTS", "KEY_ORDER", "MODEL_ORDER", "MODEL_SETTING", "PROJECT_SCOPE", "RULES",
           "model_setting_blockers", "model_setting_note", "setting_env"]


def setting_env(docs: Layers, env: Env, var: str) -> tuple[str, str] | None:
    """``(source, value)`` of ``var`` as Claude Code sees it: the highest settings file whose ``env`` sets it to a
    non-empty string, else the shell; None when neither does."""
    for path, doc, _ in docs:
        value = doc.get("env", {}).get(var) if isinstance(doc.get("env"), dict) else None
        if isinstance(value, str) and value:
            return str(path), value
    shell = env.environ.get(var)
    return ("shell environment", shell) if shell else None


def _top_model(docs: Layers) -> tuple[Path, str] | None:
    return next(((p, d["model"]) for p, d, _ in docs if isinstance(d.get("model"), str) and d["model"].strip()),
                None)


def resolved(model: str, docs: Layers, env: Env) -> str:
    """The model id a ``model`` setting asks for: an alias (``sonnet``, ``opusplan``; a ``[1m]`` suffix ignored)
    through its ``ALIAS_SLOTS`` variable when that is set, else the value itself."""
    slot = ALIAS_SLOTS.get(model.split("[")[0].strip().lower())
    hit = setting_env(docs, env, slot) if slot else None
    return hit[1] if hit else model


def model_setting_blockers(docs: Layers, env: Env, wanted: str) -> list[Blocker]:
    """An ``overridden`` blocker when the top-level ``model`` decides (``MODEL_ORDER``: no ``ANTHROPIC_MODEL``
    anywhere) and resolves to another model than ``wanted``; ``[]`` otherwise (no such setting, shadowed, or an
    alias whose slot holds ``wanted``)."""
    top = _top_model(docs)
    if top is None:
        return []
    values = {"ANTHROPIC_MODEL": setting_env(docs, env, "ANTHROPIC_MODEL"), MODEL_SETTING: top[1]}
    if MODEL_ORDER.winner(values) != MODEL_SETTING or resolved(top[1], docs, env) == wanted:
        return []
    path, value = top
    return [Blocker("overridden", str(path), f"\"model\": \"{value}\" in {path} decides the model Claude Code asks "
                    f"for (\"{resolved(value, docs, env)}\"): no settings file nor the shell sets ANTHROPIC_MODEL, "
                    "which would outrank it", f"run `conduit sync` (it writes env.ANTHROPIC_MODEL, which outranks "
                    f"\"model\") or remove \"model\" from {path}; pick models with `conduit use <model>`")]


def model_setting_note(docs: Layers, env: Env) -> str | None:
    """A line for doctor when a top-level ``model`` is there but shadowed by ``ANTHROPIC_MODEL`` (so conduit's
    model is sent and the setting does nothing), else None."""
    top = _top_model(docs)
    hit = setting_env(docs, env, "ANTHROPIC_MODEL")
    if top is None or hit is None:
        return None
    return (f"\"model\": \"{top[1]}\" in {top[0]} is ignored: ANTHROPIC_MODEL from {hit[0]} outranks it, so the "
            "profile's model is sent; change models with `conduit use <model>` (and remove \"model\" to avoid "
            "confusion)")
