"""The profile: the minimal contract (docs/design.md "The minimal profile"), starter profiles, and errors that
name file, line, key and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomlkit

from conduit.daemon.config.edit import use_model
from conduit.daemon.config.lines import find_line
from conduit.daemon.config.profile import load_profile, parse_profile
from conduit.daemon.sync.init import TEMPLATES, starter_text
from conduit.errors import BadArguments, ProfileError

MINIMAL = '''version = 1
channel = "taotoken"                        # the channel every tool uses
model = "claude-sonnet-4-20250514"          # the model every tool uses
small_model = "claude-3-5-haiku-20241022"   # optional: background model (Claude Code's haiku slot)

[channels.taotoken]
base_url = "https://taotoken.net/api"       # the gateway root as its docs give it; /v1 is added per tool
protocols = ["openai", "anthropic"]         # wire APIs the gateway speaks
key = { file = "~/.config/conduit/keys/taotoken" }   # or { env = "VAR" }, { command = "pass show x" }, { secret = "taotoken" }

[tools.claude_code]                         # a [tools.<name>] table turns a tool on
[tools.cline]
[tools.cc_switch]
'''


def test_minimal_profile_of_design_is_accepted(tmp_path: Path) -> None:
    p = parse_profile(MINIMAL, tmp_path / "profile.toml")
    assert p.model.channel == "taotoken" and set(p.model.tools) == {"claude_code", "cline", "cc_switch"}
    assert p.roots["taotoken"]["openai"].openai_base() == "https://taotoken.net/api/v1"
    assert p.roots["taotoken"]["anthropic"].anthropic_base() == "https://taotoken.net/api"
    assert p.model.channels["taotoken"].key is not None


@pytest.mark.parametrize("template", TEMPLATES)
def test_starter_profiles_are_valid(template: str, tmp_path: Path) -> None:
    parse_profile(starter_text(template), tmp_path / "p.toml")


def err(text: str, tmp_path: Path) -> str:
    with pytest.raises(ProfileError) as exc:
        parse_profile(text, tmp_path / "profile.toml")
    return str(exc.value)


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace('channel = "taotoken"', 'channel = "taotoken'), tmp_path)
    assert "profile.toml:2:" in msg and "not valid TOML" in msg


def test_unknown_key_did_you_mean_with_line(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace("base_url =", "bse_url ="), tmp_path)
    assert "profile.toml:7" in msg and "unknown key `bse_url`" in msg and "did you mean `base_url`" in msg


def test_unknown_top_level_and_tool(tmp_path: Path) -> None:
    assert "did you mean `small_model`" in err(MINIMAL.replace("small_model =", "smal_model ="), tmp_path)
    msg = err(MINIMAL.replace("[tools.cline]", "[tools.clin]"), tmp_path)
    assert "unknown tool `clin`" in msg and "did you mean `cline`" in msg and "profile.toml:12" in msg


def test_unknown_tool_option(tmp_path: Path) -> None:
    # A problem of one tool's table stops that tool only: kept for it, not raised for the profile.
    loaded = parse_profile(MINIMAL.replace("[tools.cline]", '[tools.cline]\ngeneraton = "C"'), tmp_path / "p.toml")
    assert list(loaded.tool_problems) == ["cline"]
    msg = str(loaded.tool_problems["cline"])
    assert "unknown key `generaton` for Cline" in msg and "did you mean `generation`" in msg


def test_key_written_literally_is_refused_without_echo(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace('key = { file = "~/.config/conduit/keys/taotoken" }', 'key = "sk-live-secret-123456"'),
              tmp_path)
    assert "channels.taotoken.key" in msg and "sk-live-secret" not in msg and "file" in msg


def test_key_source_needs_exactly_one(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace('{ file = "~/.config/conduit/keys/taotoken" }', '{ file = "a", env = "B" }'), tmp_path)
    assert "exactly one" in msg and "channels.taotoken.key" in msg


def test_missing_channel_and_protocol_mismatch(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace('channel = "taotoken"', 'channel = "taotokn"'), tmp_path)
    assert "channel `taotokn` is not defined" in msg and "did you mean `taotoken`" in msg
    loaded = parse_profile(MINIMAL.replace('protocols = ["openai", "anthropic"]', 'protocols = ["openai"]'),
                           tmp_path / "p.toml")
    assert "claude_code" in loaded.tool_problems and "cline" not in loaded.tool_problems
    msg = str(loaded.tool_problems["claude_code"])
    assert "Claude Code speaks the anthropic protocol" in msg and 'add "anthropic" to channels.taotoken' in msg


def test_bad_base_url_names_key(tmp_path: Path) -> None:
    msg = err(MINIMAL.replace('"https://taotoken.net/api"', '"taotoken.net/api"'), tmp_path)
    assert "channels.taotoken.base_url" in msg and "profile.toml:7" in msg


def test_model_ids_are_checked(tmp_path: Path) -> None:
    assert "cannot be empty" in err(MINIMAL.replace('model = "claude-sonnet-4-20250514"', 'model = ""'), tmp_path)
    msg = err(MINIMAL.replace('model = "claude-sonnet-4-20250514"', 'model = "claude\u200bsonnet"'), tmp_path)
    assert "U+200B" in msg and "profile.toml:3" in msg
    p = parse_profile(MINIMAL.replace('model = "claude-sonnet-4-20250514"', 'model = " spaced "'), tmp_path / "p.toml")
    assert p.model.model == "spaced"


def test_unsupported_version(tmp_path: Path) -> None:
    assert "unsupported profile version 2" in err(MINIMAL.replace("version = 1", "version = 2"), tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="conduit init"):
        load_profile(tmp_path / "nope.toml")


def test_use_keeps_comments_and_layout(temp_home: Path) -> None:
    path = temp_home / ".config" / "conduit" / "profile.toml"
    path.parent.mkdir(parents=True)
    path.write_text(MINIMAL)
    loaded, _ = use_model(path, "deepseek-chat")
    text = path.read_text()
    assert text == MINIMAL.replace('model = "claude-sonnet-4-20250514"  ', 'model = "deepseek-chat"  ')
    assert loaded.model.model == "deepseek-chat"
    with pytest.raises(BadArguments, match="not defined"):
        use_model(path, "x", channel="nope")
    for bad in ("", "  ", "gpt\u200b4o", "gpt 4o"):
        with pytest.raises(BadArguments, match="model"):
            use_model(path, bad)
    assert path.read_text() == text


def test_find_line_dotted_and_inline() -> None:
    text = 'a = 1\n[channels.x]\nbase_url = "u"\nkey = { file = "f" }\n[tools."cline"]\n'
    assert find_line(text, ["channels", "x", "base_url"]) == 3
    assert find_line(text, ["channels", "x", "key", "file"]) == 4
    assert find_line(text, ["tools", "cline"]) == 5
    assert find_line(text, ["nothing"]) is None
    assert tomlkit.parse(text)  # the sample is valid TOML
