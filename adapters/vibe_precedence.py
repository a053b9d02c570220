"""Mistral Vibe's sources as data (``conduit.adapters.precedence``) and doctor's reading of them: the project
``.vibe/config.toml`` (the nearest one from the working folder up, applied only when its folder is trusted), the
``VIBE_*`` variables above every file, and the order of the key's sources.

Read in the installed ``mistral-vibe`` 3.0.3 (``vibe/core/config/layers/project.py``,
``vibe/core/trusted_folders.py``, ``vibe/core/config/layers/environment.py``) and checked with that binary by
tests/realtools/test_realtools_precedence_more.py: a project file in an untrusted folder is ignored (the binary
warns "is not trusted; project configuration (.vibe/) will be ignored"), one at a trusted repository root applies
from a subfolder. Facts in docs/formats/vibe.md.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.declarations import Blocker
from conduit.adapters.precedence import Cite, Order, ProjectScope

REPO = "mistralai/mistral-vibe"
CHECKED = "3.0.3"
ENTRY = "conduit"
PROJECT_SCOPE = ProjectScope(
    (".vibe/config.toml",), "cwd_up",
    Cite(REPO, "vibe/core/config/layers/project.py", "_discover_config_file (the working folder up to VIBE_HOME's "
         "parent) and ProjectConfigLayer._check_trust (trusted_folders_manager.is_trusted of the file's folder)",
         CHECKED), trusted=True, trust_at="file")
"""The project file: the nearest ``.vibe/config.toml`` from the working folder up to (not into) the folder holding
``$VIBE_HOME`` (home); applied over the user file only when its folder is trusted."""
MODEL_ORDER = Order(
    "model", ("VIBE_ACTIVE_MODEL", "project .vibe/config.toml active_model", "user config.toml active_model"),
    Cite(REPO, "vibe/core/config/default_orchestrator.py", "layers: defaults < catalog < user < trusted project < "
         "VIBE_* environment < session < admin", CHECKED),
    note="VIBE_MODELS / VIBE_PROVIDERS replace the model and provider lists the same way; active_model is an alias")
"""Where Vibe takes its model from, highest first."""
KEY_ORDER = Order(
    "key", ("exported api_key_env_var", "$VIBE_HOME/.env", "system keyring"),
    Cite(REPO, "vibe/core/config/vibe_schema.py", "load_dotenv_values fills only unset variables; "
         "vibe/utils/api_keys.py reads the keyring last", CHECKED))
"""Where Vibe takes the provider's key from, highest first."""
RULES = (PROJECT_SCOPE, MODEL_ORDER, KEY_ORDER)
"""Mistral Vibe's precedence rules (``Vibe.precedence``)."""

__all__ = ["KEY_ORDER", "MODEL_ORDER", "PROJECT_SCOPE", "RULES", "folder_trusted", "project_blockers"]


def folder_trusted(folder: Path, vibe_home: Path) -> bool:
    """Whether Vibe trusts ``folder``: the closest of it and its parents listed in ``trusted_folders.toml``
    (``trusted`` / ``untrusted``, absolute resolved paths) decides; none listed means untrusted (a ``-p`` run has
    no ``--trust``). Never raises.

    Source: mistralai/mistral-vibe ``vibe/core/trusted_folders.py`` (``TrustedFoldersManager._closest_decision``)."""
    try:
        data = tomllib.loads((vibe_home / "trusted_folders.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    trusted, untrusted = (set(map(str, data.get(k) or [])) for k in ("trusted", "untrusted"))
    for current in (folder.resolve(), *folder.resolve().parents):
        if str(current) in trusted:
            return True
        if str(current) in untrusted:
            return False
    return False


def _sets_gateway(doc: dict[str, Any]) -> list[str]:
    """What a project file sets over conduit's values: another ``active_model``, or a provider named / model
    aliased ``conduit`` (tables merged by name over conduit's)."""
    out = [f"active_model = \"{doc['active_model']}\""] if doc.get("active_model") not in (None, ENTRY) else []
    for array, key in (("providers", "name"), ("models", "alias")):
        items = doc.get(array)
        if isinstance(items, list) and any(isinstance(t, dict) and t.get(key) == ENTRY for t in items):
            out.append(f"[[{array}]] {key} = \"{ENTRY}\"")
    return out


def project_blockers(env: Env, vibe_home: Path) -> list[Blocker]:
    """An ``overridden`` blocker for the project ``.vibe/config.toml`` Vibe applies from ``env.cwd``
    (``PROJECT_SCOPE``: nearest, trusted) when it sets a gateway value (``_sets_gateway``); ``[]`` for one in an
    untrusted folder or one that sets other keys."""
    files = PROJECT_SCOPE.applied(env.cwd, env.environ, lambda f: folder_trusted(f, vibe_home),
                                  skip=vibe_home / "config.toml", home=vibe_home.parent)
    out = []
    for path in files:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        found = _sets_gateway(doc)
        if found:
            out.append(Blocker("overridden", str(path), f"{', '.join(found)} in the trusted project file {path} "
                               f"ranks above {vibe_home / 'config.toml'} (conduit's)",
                               f"remove {', '.join(found)} from {path}"))
    return out
