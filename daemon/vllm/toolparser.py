"""Which ``--tool-call-parser`` a model family needs, and the fix a vLLM without tool calling is given.

Coding tools send ``tools`` with ``tool_choice: "auto"``; vLLM answers that with HTTP 400 ``"auto" tool choice
requires --enable-auto-tool-choice and --tool-call-parser to be set`` unless it was started with both flags
(vLLM 0.32 ``vllm/renderers/online_renderer.py``; older releases said the same from
``entrypoints/openai/serving_chat.py``). The parser depends on the model family: the table below is vLLM's
``docs/features/tool_calling.md`` ("Flags: --tool-call-parser NAME" per family), every name checked against
the parser registry of vLLM 0.32 (``vllm/tool_parsers/__init__.py``).

A family is told from what is known about the model without loading it: the ``[vllm].model`` name or path,
and ``config.json``'s ``_name_or_path``, ``model_type`` and ``architectures``. Rules are tried in order, the
more specific first (``Hermes-3-Llama-3.1`` is a Hermes model, ``Qwen3-Coder`` is not plain Qwen).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from conduit.daemon.config.vllm import VllmSettings

#: vLLM's answer to ``tool_choice: "auto"`` without the two flags (matched case-insensitively, in part).
AUTO_TOOL_MESSAGE = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
AUTO_TOOL_MARKERS = ("--enable-auto-tool-choice", "--tool-call-parser")

#: (needles, parser, family): a needle found in any lower-cased name, model_type or architecture picks the rule.
RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("hermes",), "hermes", "Nous Hermes"),
    (("xlam",), "xlam", "xLAM"),
    (("toolace",), "pythonic", "ToolACE"),
    (("qwen3-coder", "qwen3_coder"), "qwen3_xml", "Qwen3-Coder"),
    (("qwen", "qwq"), "hermes", "Qwen2.5 / Qwen3 / QwQ"),
    (("llama-4", "llama4"), "llama4_pythonic", "Llama 4"),
    (("llama",), "llama3_json", "Llama 3.1 / 3.2"),
    (("mistral", "mixtral", "ministral", "devstral", "codestral"), "mistral", "Mistral"),
    (("granite-20b-functioncalling",), "granite-20b-fc", "Granite 20B function calling"),
    (("granite-4", "granitemoehybrid"), "granite4", "Granite 4"),
    (("granite",), "granite", "Granite 3"),
    (("internlm",), "internlm", "InternLM 2.5"),
    (("jamba",), "jamba", "Jamba 1.5"),
    (("deepseek-v3.1", "deepseek-v3_1"), "deepseek_v31", "DeepSeek-V3.1"),
    (("deepseek-v3", "deepseek_v3", "deepseek-r1"), "deepseek_v3", "DeepSeek-V3 / R1"),
    (("gpt-oss", "gpt_oss", "gptoss"), "openai", "gpt-oss"),
    (("kimi-k2", "kimi_k2"), "kimi_k2", "Kimi-K2"),
    (("hunyuan",), "hunyuan_a13b", "Hunyuan-A13B"),
    (("glm-4.7", "glm47"), "glm47", "GLM-4.7"),
    (("glm-4.5", "glm-4.6", "glm4_moe"), "glm45", "GLM-4.5 / 4.6"),
    (("functiongemma",), "functiongemma", "FunctionGemma"),
    (("olmo-3", "olmo3"), "olmo3", "Olmo 3"),
    (("longcat",), "longcat", "LongCat-Flash"),
)


@dataclass(frozen=True)
class ParserGuess:
    """The parser for a model family: ``parser`` is the ``--tool-call-parser`` value, ``family`` its name."""

    parser: str
    family: str


def guess_parser(names: Iterable[str | None]) -> ParserGuess | None:
    """The first rule of ``RULES`` whose needle occurs in one of ``names`` (model name or path, config.json
    ``_name_or_path``, ``model_type``, each ``architectures`` entry); None when no rule fits."""
    hay = [n.lower() for n in names if n]
    for needles, parser, family in RULES:
        if any(needle in h for needle in needles for h in hay):
            return ParserGuess(parser, family)
    return None


def is_auto_tool_refusal(message: str) -> bool:
    """Whether a 400's message is vLLM's "auto tool choice requires ..." refusal (any release's wording)."""
    low = message.lower()
    return "tool choice" in low and any(m in low for m in AUTO_TOOL_MARKERS)


def flags_set(settings: VllmSettings) -> tuple[bool, str | None]:
    """``(auto tool choice on, parser)`` as the launch will pass them: the ``[vllm]`` keys, or the same flags
    written in ``extra_args`` (``--tool-call-parser NAME`` or ``--tool-call-parser=NAME``)."""
    args = settings.extra_args
    auto = bool(settings.enable_auto_tool_choice) or "--enable-auto-tool-choice" in args
    parser = settings.tool_call_parser
    for i, word in enumerate(args):
        if word == "--tool-call-parser" and i + 1 < len(args):
            parser = args[i + 1]
        elif word.startswith("--tool-call-parser="):
            parser = word.partition("=")[2]
    return auto, parser


def tool_call_fix(settings: VllmSettings, guess: ParserGuess | None) -> str:
    """One sentence naming the vLLM flags and the ``[vllm]`` keys that turn tool calling on.

    ``guess`` is the family's parser (``guess_parser``), or None when it cannot be told: the sentence then says
    where to look the name up.
    """
    auto, parser = flags_set(settings)
    name = guess.parser if guess else "NAME"
    which = (f"`{guess.parser}` is the parser for {guess.family} models" if guess else
             "NAME is the parser for the model's family (vLLM docs: features/tool_calling.md)")
    if auto and parser:
        if guess and guess.parser != parser:
            return (f"vLLM runs with --tool-call-parser {parser}, but {which}: set [vllm] tool_call_parser = "
                    f"\"{guess.parser}\" and restart vLLM")
        return (f"vLLM runs with --enable-auto-tool-choice --tool-call-parser {parser}; the model answered without "
                "a tool call: check that the parser fits the model and that its chat template renders tools")
    return (f"start vLLM with --enable-auto-tool-choice --tool-call-parser {name}: set [vllm] "
            f"enable_auto_tool_choice = true and tool_call_parser = \"{name}\" in the profile ({which}), "
            "then restart vLLM (`conduit vllm restart`, or the agent restarts it on the profile change)")
