"""OpenCode's project files as data (``conduit.adapters.precedence``) and doctor's reading of them: which
``opencode.json[c]`` files OpenCode merges over the global one from the working folder, and which of them sets a
value that replaces conduit's (``model``, ``small_model``, ``provider.conduit.options.baseURL`` / ``apiKey``).

A project file only outranks conduit where it sets one of those values: one that sets other keys (a theme, MCP
servers) is merged over the global file without touching the gateway, and doctor says nothing of it. Checked with
the 1.18 binary by tests/realtools/test_realtools_precedence.py; facts in docs/formats/opencode.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.declarations import Blocker
from conduit.adapters.formats.masking import shown
from conduit.adapters.formats.textformats import parse_jsonc, read_parsed
from conduit.adapters.precedence import Cite, ProjectScope

CITE = Cite("sst/opencode", "packages/opencode/src/config/config.ts",
            "Config state: global, $OPENCODE_CONFIG, then ConfigPaths.files(\"opencode\", directory, worktree) "
            "unless OPENCODE_DISABLE_PROJECT_CONFIG, then the .opencode/ directories", "1.18.33")
PROJECT_SCOPE = ProjectScope(("opencode.json", "opencode.jsonc"), "root_to_cwd", CITE,
                             outside_git="filesystem_root", disabled_by=("OPENCODE_DISABLE_PROJECT_CONFIG",))
"""``opencode.json[c]`` in every folder from the worktree (the git root; outside git, ``/``) down to the working
folder, merged over the global file, the nearer winning; none when ``OPENCODE_DISABLE_PROJECT_CONFIG`` is set."""
DOT_SCOPE = ProjectScope((".opencode/opencode.json", ".opencode/opencode.jsonc"), "root_to_cwd", CITE,
                         outside_git="filesystem_root")
"""The ``.opencode/`` directories found the same way, merged after the project files."""
RULES = (PROJECT_SCOPE, DOT_SCOPE)
"""OpenCode's precedence rules (``OpenCode.precedence``)."""

KILO_CITE = Cite("Kilo-Org/kilocode", "packages/opencode/src/config/config.ts",
                 "the OpenCode loader renamed: project kilo.json[c] / opencode.json[c] from the working folder up "
                 "to the worktree unless KILO_DISABLE_PROJECT_CONFIG, then .kilocode/ and .kilo/", "7.7.7")
KILO_FILES = ("kilo.jsonc", "kilo.json", "opencode.jsonc", "opencode.json")
KILO_PROJECT_SCOPE = ProjectScope(KILO_FILES, "root_to_cwd", KILO_CITE, outside_git="filesystem_root",
                                  disabled_by=("KILO_DISABLE_PROJECT_CONFIG",))
"""Kilo CLI's project files: OpenCode's rule with Kilo's names and switch."""
KILO_DOT_SCOPE = ProjectScope(tuple(f"{d}/{n}" for d in (".kilocode", ".kilo") for n in KILO_FILES), "root_to_cwd",
                              KILO_CITE, outside_git="filesystem_root", disabled_by=("KILO_DISABLE_PROJECT_CONFIG",))
"""Kilo CLI's project ``.kilocode/`` and ``.kilo/`` directories."""
KILO_RULES = (KILO_PROJECT_SCOPE, KILO_DOT_SCOPE)
"""Kilo CLI's precedence rules (``Kilo.precedence``)."""

__all__ = ["DOT_SCOPE", "KILO_DOT_SCOPE", "KILO_PROJECT_SCOPE", "KILO_RULES", "PROJECT_SCOPE", "RULES",
           "project_blockers", "project_files"]


def project_files(env: Env, user: Path | None = None, rules: tuple[ProjectScope, ...] = RULES) -> list[Path]:
    """The project files OpenCode (or Kilo CLI: ``rules`` = ``KILO_RULES``) merges over the global one from
    ``env.cwd``, lowest precedence first; ``user`` (the global file, when the working folder holds it) is left
    out."""
    return [p for scope in rules for p in scope.applied(env.cwd, env.environ, skip=user)]


def _values(doc: Mapping[str, Any], provider_id: str) -> dict[str, Any]:
    """The gateway values a config sets: ``model``, ``small_model``, the provider's ``baseURL`` and ``apiKey``."""
    out = {k: doc[k] for k in ("model", "small_model") if k in doc}
    provider = doc.get("provider", {}).get(provider_id) if isinstance(doc.get("provider"), dict) else None
    options = provider.get("options") if isinstance(provider, dict) else None
    if isinstance(options, dict):
        out.update({f"provider.{provider_id}.options.{k}": options[k] for k in ("baseURL", "apiKey") if k in options})
    return out


def project_blockers(env: Env, global_file: Path, wanted: Mapping[str, Any],
                     provider_id: str = "conduit", files: list[Path] | None = None) -> list[Blocker]:
    """An ``overridden`` blocker for each gateway value (``wanted``: ``model``, ``small_model``,
    ``provider.<id>.options.baseURL``/``apiKey`` -> conduit's value) whose nearest project file setting it holds
    another value; the key's value is never shown. ``files``: the project files (default ``project_files``)."""
    found = files if files is not None else project_files(env, global_file)
    layers = [(p, _values(read_parsed(p, parse_jsonc)[0], provider_id)) for p in found]
    out = []
    for key, value in wanted.items():
        hit = next(((p, vals[key]) for p, vals in reversed(layers) if key in vals), None)
        if hit is not None and hit[1] != value:
            shown_value = shown(hit[1], secret=key.endswith("apiKey"))
            out.append(Blocker("overridden", str(hit[0]), f"{key} = {shown_value} in the project file {hit[0]} is "
                               f"merged over {global_file} (conduit's), so it wins here",
                               f"remove {key} from {hit[0]}"))
    return out
