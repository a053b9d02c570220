"""The tool-call parser per model family, the `[vllm]` keys for the two tool-call flags, and the fix sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conduit.daemon.agent.toolcall import family_of
from conduit.daemon.config.vllm import load
from conduit.daemon.vllm.settings import to_argv
from conduit.daemon.vllm.toolparser import (
    AUTO_TOOL_MESSAGE,
    flags_set,
    guess_parser,
    is_auto_tool_refusal,
    tool_call_fix,
)
from conduit.errors import ProfileError


@pytest.mark.parametrize(("names", "parser"), [
    (["Qwen/Qwen2.5-7B-Instruct"], "hermes"),
    (["/models/x", "qwen3", "Qwen3ForCausalLM"], "hermes"),
    (["Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_moe"], "qwen3_xml"),
    (["NousResearch/Hermes-3-Llama-3.1-8B", "llama"], "hermes"),
    (["meta-llama/Llama-3.1-8B-Instruct", "llama"], "llama3_json"),
    (["meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4"], "llama4_pythonic"),
    (["Salesforce/Llama-xLAM-2-8B-fc-r", "llama"], "xlam"),
    (["mistralai/Mistral-7B-Instruct-v0.3"], "mistral"),
    (["ibm-granite/granite-4.0-h-small", "granitemoehybrid"], "granite4"),
    (["ibm-granite/granite-3.1-8b-instruct", "granite"], "granite"),
    (["ibm-granite/granite-20b-functioncalling"], "granite-20b-fc"),
    (["deepseek-ai/DeepSeek-V3.1", "deepseek_v3"], "deepseek_v31"),
    (["openai/gpt-oss-20b", "gpt_oss"], "openai"),
    (["internlm/internlm2_5-7b-chat", "internlm2"], "internlm"),
    (["ai21labs/AI21-Jamba-1.5-Mini", "jamba"], "jamba"),
])
def test_family_parsers_from_vllm_docs(names: list[str], parser: str) -> None:
    got = guess_parser(names)
    assert got is not None and got.parser == parser, got


def test_unknown_family_gives_none_and_the_fix_says_where_to_look() -> None:
    assert guess_parser(["/models/mystery", "gpt2", "GPT2LMHeadModel", None]) is None
    fix = tool_call_fix(load({"model": "/models/mystery"}), None)
    assert "--enable-auto-tool-choice --tool-call-parser NAME" in fix and "tool_calling.md" in fix


def test_family_read_from_config_json(tmp_path: Path) -> None:
    d = tmp_path / "anything"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "mistral", "architectures": ["MistralForCausalLM"]}))
    got = family_of(load({"model": str(d)}))
    assert got is not None and got.parser == "mistral"
    assert family_of(load({"model": str(tmp_path / "absent")})) is None  # no directory, no cached model: unknown


def test_the_two_keys_become_the_two_flags() -> None:
    argv, warnings = to_argv(load({"model": "/m", "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}),
                             (0, 32, 0))
    assert argv[argv.index("--enable-auto-tool-choice") + 1] == "--tool-call-parser"
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and warnings == []
    argv, _ = to_argv(load({"model": "/m", "tool_call_parser": "hermes"}), (0, 32, 0))
    assert "--enable-auto-tool-choice" not in argv and "--tool-call-parser" in argv
    argv, _ = to_argv(load({"model": "/m"}), (0, 32, 0))
    assert not any("tool" in a for a in argv)


def test_auto_tool_choice_without_a_parser_is_refused_at_load() -> None:
    with pytest.raises(ProfileError) as exc:
        load({"model": "/m", "enable_auto_tool_choice": True})
    assert "tool_call_parser" in str(exc.value)


def test_flags_written_in_extra_args_count_as_set() -> None:
    s = load({"model": "/m", "extra_args": ["--enable-auto-tool-choice", "--tool-call-parser=llama3_json"]})
    assert flags_set(s) == (True, "llama3_json")
    assert flags_set(load({"model": "/m"})) == (False, None)


def test_vllm_refusal_recognised() -> None:
    assert is_auto_tool_refusal(f"HTTP 400: {AUTO_TOOL_MESSAGE}")
    assert not is_auto_tool_refusal("HTTP 400: The model `x` does not exist.")
