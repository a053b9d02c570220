"""The orders of GitHub Copilot CLI, Kimi CLI and Hermes Agent as data (``conduit.adapters.precedence``): three
tools without project files, where only exported variables compete with what conduit writes or starts them with.

Each ``Order`` was read in the tool's installed package and checked with its binary by
tests/realtools/test_realtools_precedence_more.py (facts in docs/formats/copilot.md, kimi.md, hermes.md). What the
binaries corrected: ``COPILOT_PROVIDER_MODEL_ID`` does not change the model Copilot sends (only
``COPILOT_PROVIDER_WIRE_MODEL`` and ``COPILOT_MODEL`` do), so doctor no longer calls it overriding.
"""

from __future__ import annotations

from collections.abc import Mapping

from conduit.adapters.declarations import Blocker
from conduit.adapters.precedence import Cite, Order

COPILOT_CITE = "npm @github/copilot"
COPILOT_MODEL_ORDER = Order(
    "model", ("COPILOT_PROVIDER_WIRE_MODEL", "COPILOT_MODEL", "\"model\" in settings.json"),
    Cite(COPILOT_CITE, "cli-main.js (`copilot help environment`, `copilot help config`)",
         "COPILOT_PROVIDER_WIRE_MODEL: the model sent, defaults to COPILOT_MODEL", "1.0.102"),
    note="COPILOT_PROVIDER_MODEL_ID only names the catalog entry (agent configuration, token limits): the binary "
         "still sent COPILOT_MODEL's model; \"model\" in ~/.copilot/settings.json or the repository's "
         ".github/copilot/settings.json ranks below COPILOT_MODEL (recorded)")
"""Which model Copilot CLI sends to a custom provider, highest first."""
COPILOT_KEY_ORDER = Order(
    "key", ("COPILOT_PROVIDER_BEARER_TOKEN", "COPILOT_PROVIDER_API_KEY_COMMAND", "COPILOT_PROVIDER_API_KEY"),
    Cite(COPILOT_CITE, "cli-main.js (`copilot help environment`)", "both \"take precedence over "
         "COPILOT_PROVIDER_API_KEY\"", "1.0.102"),
    note="the bearer token's win is recorded; the order between the first two is not checked")
"""Copilot CLI's key sources, highest first."""
COPILOT_RULES = (COPILOT_MODEL_ORDER, COPILOT_KEY_ORDER)
"""Copilot CLI's precedence rules (``Copilot.precedence``)."""

KIMI_CITE = Cite("MoonshotAI/kimi-cli", "src/kimi_cli/llm.py", "augment_provider_with_env_vars: for openai_legacy "
                 "and openai_responses providers", "1.51.0")
KIMI_KEY_ORDER = Order("key", ("OPENAI_API_KEY", "providers.<name>.api_key"), KIMI_CITE,
                       note="KIMI_API_KEY, KIMI_BASE_URL and KIMI_MODEL_NAME act on type = \"kimi\" providers only; "
                            "Kimi reads no .env file")
"""Kimi CLI's key for conduit's ``openai_legacy`` provider, highest first."""
KIMI_BASE_ORDER = Order("base_url", ("OPENAI_BASE_URL", "providers.<name>.base_url"), KIMI_CITE)
"""Kimi CLI's base URL for conduit's provider, highest first."""
KIMI_RULES = (KIMI_KEY_ORDER, KIMI_BASE_ORDER)
"""Kimi CLI's precedence rules (``Kimi.precedence``)."""

HERMES_REPO = "NousResearch/hermes-agent"
HERMES_MODEL_ORDER = Order(
    "model", ("--model", "HERMES_INFERENCE_MODEL", "model.default"),
    Cite(HERMES_REPO, "hermes_cli/oneshot.py", "run_oneshot: effective_model = model or HERMES_INFERENCE_MODEL or "
         "model.default", "0.19.0"))
"""The model of a ``hermes -z`` run, highest first."""
HERMES_PROVIDER_ORDER = Order(
    "provider", ("--provider", "model.provider", "HERMES_INFERENCE_PROVIDER"),
    Cite(HERMES_REPO, "hermes_cli/oneshot.py", "run_oneshot: cfg_provider or HERMES_INFERENCE_PROVIDER", "0.19.0"),
    note="conduit writes model.provider, so HERMES_INFERENCE_PROVIDER never decides")
"""The provider of a ``hermes -z`` run, highest first."""
HERMES_KEY_ORDER = Order(
    "key", ("$HERMES_HOME/.env", "exported key_env variable", "providers.<name>.api_key"),
    Cite(HERMES_REPO, "hermes_cli/env_loader.py", "load_hermes_dotenv: the user .env with override=True; the "
         "project .env is the install folder's, never the working folder's", "0.19.0"))
"""The key of conduit's named provider, highest first: the ``.env`` conduit writes beats an exported one."""
HERMES_RULES = (HERMES_MODEL_ORDER, HERMES_PROVIDER_ORDER, HERMES_KEY_ORDER)
"""Hermes Agent's precedence rules (``Hermes.precedence``)."""

__all__ = ["COPILOT_KEY_ORDER", "COPILOT_MODEL_ORDER", "COPILOT_RULES", "HERMES_KEY_ORDER", "HERMES_MODEL_ORDER",
           "HERMES_PROVIDER_ORDER", "HERMES_RULES", "KIMI_BASE_ORDER", "KIMI_KEY_ORDER", "KIMI_RULES",
           "exported_over"]


def exported_over(order: Order, environ: Mapping[str, str], below: str, value: str, *,
                  secret: bool = False) -> Blocker | None:
    """An ``overridden`` blocker when a variable of ``order`` ranked above the source ``below`` (conduit's) is
    exported with another value than ``value``; None otherwise. The variable is named, its value never shown when
    ``secret``.

    Raises:
        ValueError: ``below`` is not one of ``order.sources``."""
    above = order.sources[:order.sources.index(below)]
    hit = Order(order.what, above, order.cite).winner({n: (environ.get(n) or "").strip() for n in above})
    if hit is None or environ[hit].strip() == value:
        return None
    shown = "" if secret else f" (\"{environ[hit].strip()}\")"
    return Blocker("overridden", "shell environment", f"{hit} is exported{shown} and ranks above {below} for the "
                   f"{order.what}", f"unset {hit}")
