"""``conduit use``'s check of the background model (``small_model``: Claude Code's haiku slot, OpenCode's
``small_model``, Aider's weak model) against the model being switched to.

A switch of ``model`` to another vendor's model left ``small_model`` on the old vendor's (``claude-3-5-haiku``
behind ``deepseek-chat``), which the new gateway may not serve: every background request of the tool then
fails. ``small_model_advice`` says so, and offers the small models of the new model's vendor that the channel's
cached model list (``conduit.daemon.catalog.models.read_cache``: read only, never a request) or the profile's
``channels.<name>.models`` knows, or says to set one with ``--small-model``.
"""

from __future__ import annotations

import re

from conduit.daemon.catalog.models import models_base, read_cache
from conduit.daemon.config.profile import LoadedProfile

VENDORS = (
    ("anthropic", r"claude|haiku|sonnet|opus"), ("openai", r"gpt|^o[134]\b|^o[134]-|chatgpt|codex"),
    ("google", r"gemini|gemma"), ("deepseek", r"deepseek"), ("qwen", r"qwen|qwq"), ("zhipu", r"glm|zhipu"),
    ("moonshot", r"kimi|moonshot"), ("mistral", r"mistral|codestral|devstral|magistral|ministral"),
    ("meta", r"llama"), ("xai", r"grok"), ("minimax", r"minimax|abab"),
)
"""(vendor, pattern on the model id's last path part, lower-cased), first match wins."""
SMALL = re.compile(r"haiku|mini|flash|nano|lite|small|air|turbo|fast|tiny|\b[1-9]b\b|-[1-9]b")
"""Words of a small (cheap, quick) model's id."""


def vendor_of(model: str) -> str | None:
    """The vendor a model id belongs to (``anthropic/claude-3.5-haiku`` and ``claude-3-5-haiku`` -> ``anthropic``),
    or None when the id says nothing known."""
    name = model.lower().rsplit("/", 1)[-1]
    for vendor, pattern in VENDORS:
        if re.search(pattern, name):
            return vendor
    return None


def small_candidates(ids: list[str], vendor: str) -> list[str]:
    """The ids of ``vendor``'s small models among ``ids``, in list order, each once."""
    return list(dict.fromkeys(i for i in ids if vendor_of(i) == vendor and SMALL.search(i.lower())))


def known_ids(profile: LoadedProfile, channel: str) -> tuple[list[str], str]:
    """The model ids ``channel`` is known to serve, and where they come from: the cached list when there is one,
    else the profile's ``channels.<channel>.models``; ``([], "")`` when neither knows any. No request is made."""
    roots = profile.roots.get(channel)
    base = models_base(roots) if roots else None
    cached = read_cache(channel, base) if base else None
    if cached is not None and cached.models:
        return [m.id for m in cached.models], f"the cached model list of `{channel}`"
    ch = profile.model.channels.get(channel)
    if ch is not None and ch.models:
        return list(ch.models), f"channels.{channel}.models"
    return [], ""


def small_model_advice(profile: LoadedProfile, model: str, channel: str | None, small: str | None) -> list[str]:
    """Warnings for switching to ``model`` (on ``channel``, None: the profile's) with background model ``small``
    (None: none set, the tools use ``model``). Empty when ``small`` fits: same vendor, or vendor unknown, and
    served by the channel as far as its known list says.

    Returns:
        lines for a person: what does not fit and the choices (``--small-model ID``), never a silent mismatch.
    """
    if not small:
        return []
    name = channel or profile.model.channel
    ids, source = known_ids(profile, name)
    want, have = vendor_of(model), vendor_of(small)
    problems = []
    if want and have and want != have:
        problems.append(f"small_model `{small}` ({have}) stays behind the new model `{model}` ({want}): the tools' "
                        f"background requests would still ask for `{small}`, which `{name}` may not serve")
    elif ids and small not in ids:
        problems.append(f"small_model `{small}` is not in {source}: the tools' background requests may fail")
    if not problems:
        return []
    choices = small_candidates(ids, want) if want else []
    if choices:
        shown = ", ".join(choices[:5]) + (f" and {len(choices) - 5} more" if len(choices) > 5 else "")
        problems.append(f"small models of {want} in {source}: {shown}; choose one with "
                        f"`conduit use {model} --small-model {choices[0]}`")
    else:
        where = source or f"`{name}`'s model list (none cached: `conduit models {name}` fetches it)"
        problems.append(f"no small model of {want or 'the same vendor'} is known from {where}: set one with "
                        f"`--small-model ID`, or `--small-model \"\"` to use `{model}` for background requests too")
    return problems


__all__ = ["SMALL", "VENDORS", "known_ids", "small_candidates", "small_model_advice", "vendor_of"]
