"""Aider's sources as data (``conduit.adapters.precedence``): the ``.env`` and ``.aider.conf.yml`` files it reads
(home, git root, working folder: never a folder in between) and its order of model sources, where a shortcut
switch such as ``AIDER_SONNET=true`` names a model only when nothing else sets one.

Read in the installed ``aider-chat`` 0.86.2 (``aider/main.py``, ``aider/deprecated.py``) and checked with that
binary by tests/realtools/test_realtools_precedence.py; facts in docs/formats/aider.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.declarations import Blocker
from conduit.adapters.precedence import Cite, Order, ProjectScope

DOTENV_SCOPE = ProjectScope(
    (".env",), "root_and_cwd",
    Cite("Aider-AI/aider", "aider/main.py", "load_dotenv_files / generate_search_path_list: ~/.env, the git root's, "
         "the working folder's, --env-file; load_dotenv(override=True)", "0.86.2"))
"""The project ``.env`` files (after ``~/.env``): the git root's, then the working folder's, each loaded over the
shell (``override=True``), so the working folder's line wins; a ``.env`` in a folder between them is not read."""
YAML_SCOPE = ProjectScope(
    (".aider.conf.yml",), "root_and_cwd",
    Cite("Aider-AI/aider", "aider/main.py", "main: default_config_files = cwd, git root, home (configargparse)",
         "0.86.2"))
"""The project ``.aider.conf.yml`` files beside ``~/.aider.conf.yml``."""
SHORTCUTS = ("AIDER_OPUS", "AIDER_SONNET", "AIDER_HAIKU", "AIDER_4", "AIDER_4O", "AIDER_MINI", "AIDER_4_TURBO",
             "AIDER_35TURBO", "AIDER_DEEPSEEK", "AIDER_O1_MINI", "AIDER_O1_PREVIEW")
"""The deprecated model shortcut switches (``--sonnet``...) as variables (``aider/deprecated.py``)."""
MODEL_ORDER = Order(
    "model", ("--model", "AIDER_MODEL", ".aider.conf.yml model", "shortcut switch"),
    Cite("Aider-AI/aider", "aider/deprecated.py", "handle_deprecated_model_args: `if not args.model: args.model = "
         "model_name`", "0.86.2"),
    note="AIDER_MODEL from the shell or any .env (a .env line beats the shell); the YAML of the working folder, "
         "then the git root's, then ~/.aider.conf.yml; a shortcut such as AIDER_SONNET=true only without a model")
"""Where Aider takes its model from, highest first."""
RULES = (DOTENV_SCOPE, YAML_SCOPE, MODEL_ORDER)
"""Aider's precedence rules (``Aider.precedence``)."""
TRUE = ("1", "true", "yes", "on")

__all__ = ["DOTENV_SCOPE", "MODEL_ORDER", "RULES", "SHORTCUTS", "YAML_SCOPE", "shortcut_blockers"]


def shortcut_blockers(dotenvs: Iterable[tuple[Path, Mapping[str, str]]], env: Env,
                      yamls: Iterable[tuple[Path, Mapping[str, Any]]], wanted: str) -> list[Blocker]:
    """An ``overridden`` blocker when a shortcut switch (``SHORTCUTS``, true in the shell or a ``.env`` of
    ``dotenvs``) names the model because no source above it in ``MODEL_ORDER`` sets one (``AIDER_MODEL`` nowhere,
    no ``model`` in ``yamls``: every YAML Aider reads, home included); ``[]`` when it is ignored. ``wanted`` is
    conduit's ``openai/<model>``."""
    dotenvs, yamls = list(dotenvs), list(yamls)
    merged = {**{k: v for k, v in env.environ.items() if k.startswith("AIDER_")},
              **{k: v for _, vals in dotenvs for k, v in vals.items()}}
    model = merged.get("AIDER_MODEL") or next((str(d["model"]) for _, d in yamls if d.get("model")), None)
    switch = next((s for s in SHORTCUTS if str(merged.get(s, "")).strip().lower() in TRUE), None)
    if switch is None or model is not None:
        return []
    where = next((str(p) for p, vals in reversed(dotenvs) if switch in vals), "shell environment")
    return [Blocker("overridden", where, f"{switch} is true and no model is set anywhere (no AIDER_MODEL, no model in "
                    f"any .aider.conf.yml), so Aider uses the switch's model instead of {wanted}",
                    "run `conduit sync` (it writes model in ~/.aider.conf.yml, which the switch never outranks) or "
                    f"remove {switch}")]
