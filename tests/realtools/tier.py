"""The real-tool tier's tables, built from the adapters' declarations (``conduit.adapters.registry.ADAPTERS``).

- ``cases()``: the parametrization of ``test_realtools.py``: one case per base URL form (``base_forms``) of every
  tool with a command line (``one_shot``); a tool lacking a declaration the tier needs gets one case that fails
  when it runs, naming what is missing (collection never fails).
- ``options_toml(tool)``: the ``[tools.<name>]`` lines for a fresh HOME (``fresh_options``).
- ``routes(tool, model)``: the model route(s) a request must hit (``model_routes``, ``{model}`` filled in).
- ``package_lines()``: the pinned packages (``package``), one line each, in the order ``ensure_tools.sh`` hashes
  them; ``python tests/realtools/tier.py packages`` prints them for that script.

Run as a script it needs conduit importable (the repository's virtual environment).
"""

from __future__ import annotations

import json
import sys

from conduit.adapters.declarations import Package
from conduit.adapters.registry import ADAPTERS, missing_declarations

NEEDS = ("one_shot", "package", "base_forms", "model_routes", "fresh_options")
"""The declarations the tier reads."""
MISSING = "missing:"
"""How a case's form starts when the tool lacks declarations: ``missing:one_shot,package``."""
CACHE_ORDER = ("claude_code", "codex", "gemini", "opencode", "continue", "cline", "aider")
"""The order the pins had when the tools' cache was first named (its directory is a hash of the pinned list in
order): these tools come first, in this order, then every other in registry order. Only the cache's name depends
on it; a tool missing here is installed all the same."""


def missing_for_tier(tool: str) -> list[str]:
    """The declarations of ``NEEDS`` that ``tool``'s adapter lacks (``[]`` when none)."""
    return [n for n in missing_declarations(ADAPTERS[tool]) if n in NEEDS]


def check_declared(tool: str, form: str) -> None:
    """Fail the case (``pytest.fail``) when its form says ``tool`` lacks declarations, naming them; skip it
    (``pytest.skip``) for a tool with a one-shot command but ``package = None`` (documented format only: a
    binary no registry here installs, such as Goose's, which ``conduit verify`` still runs where installed)."""
    import pytest

    if form.startswith(MISSING):
        pytest.fail(f"{tool}: its adapter lacks the declaration(s) {form[len(MISSING):]}: declare them on "
                    f"{type(ADAPTERS[tool]).__name__} (conduit.adapters.declarations)")
    if ADAPTERS[tool].package is None:
        pytest.skip(f"{tool}: no package the tier can install (package = None): documented format only")


def cases() -> list[tuple[str, str, bool]]:
    """``(tool, base URL form, dirty key)`` per case, in registry order: each of a tool's ``base_forms`` (the
    first with the dirty key file); ``(tool, "missing:<names>", False)`` for a tool lacking declarations; nothing
    for a tool declaring ``one_shot = None`` (CC Switch)."""
    out: list[tuple[str, str, bool]] = []
    for tool, adapter in ADAPTERS.items():
        missing = missing_for_tier(tool)
        if missing:
            out.append((tool, MISSING + ",".join(missing), False))
        elif adapter.one_shot is not None:
            out += [(tool, form, i == 0) for i, form in enumerate(adapter.base_forms)]
    return out


def case_id(tool: str, form: str, dirty: bool) -> str:
    """``codex-api_v1-dirtykey``, ``throwaway-missing``."""
    if form.startswith(MISSING):
        return f"{tool}-missing"
    return f"{tool}-{form.strip('/').replace('/', '_')}{'-dirtykey' if dirty else ''}"


def options_toml(tool: str) -> str:
    """``tool``'s ``fresh_options`` as TOML lines (``create = true\\n``), ``""`` for none."""
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in ADAPTERS[tool].fresh_options.items())


def routes(tool: str, model: str) -> tuple[str, ...]:
    """``tool``'s ``model_routes`` with ``{model}`` replaced by ``model``."""
    return tuple(r.replace("{model}", model) for r in ADAPTERS[tool].model_routes)


def packages() -> list[tuple[str, Package]]:
    """``(tool, package)`` for every tool declaring one: npm packages first, then PyPI ones, each in
    ``CACHE_ORDER`` then registry order. A tool lacking the declaration is left out (its cases fail)."""
    found = [(t, a.package) for t, a in ADAPTERS.items()
             if "package" not in missing_declarations(a) and a.package is not None]
    rank = {t: i for i, t in enumerate(CACHE_ORDER)}
    found.sort(key=lambda tp: (tp[1].registry != "npm", rank.get(tp[0], len(rank))))  # stable: registry order
    return found


def package_lines() -> list[str]:
    """``<registry>[:<recipe>] <tool> <pin> <command>...`` per package (``npm codex @openai/codex@0.171.0
    codex``; ``npm:node24 openclaw openclaw@2026.9.6 openclaw`` for one installed by ``recipe_node24``)."""
    return [" ".join((p.registry + (f":{p.recipe}" if p.recipe else ""), t, p.pin, *p.commands))
            for t, p in packages()]


if __name__ == "__main__":
    if sys.argv[1:] != ["packages"]:
        sys.exit("usage: tier.py packages")
    print("\n".join(package_lines()))
