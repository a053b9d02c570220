"""The profile's [vllm] table: validated at load time (file:line:key errors) and the implicit `local` channel it
defines (both protocols, its key, `conduit use --channel local`, sync pointing Claude Code and Cline at it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import claude_settings, cline_gen_b

from conduit.adapters.base import Env
from conduit.daemon.agent.prober import targets_for
from conduit.daemon.config.edit import use_model
from conduit.daemon.config.profile import load_profile, parse_profile
from conduit.daemon.config.resolve import Resolver, vllm_settings
from conduit.daemon.sync.engine import sync
from conduit.errors import KeyError_, ProfileError

KEY = "sk-local-0123456789abcdefghij"
CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]

HOSTED = """version = 1
channel = "gw"
model = "m"

[channels.gw]
base_url = "https://gw.example.com/api"
protocols = ["openai", "anthropic"]

[tools.claude_code]
[tools.cline]
"""


def prof(tmp_path: Path, text: str) -> Path:
    p = tmp_path / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_vllm_table_is_validated_and_exposed(tmp_path: Path) -> None:
    loaded = parse_profile(HOSTED + '\n[vllm]\nmodel = "/models/q"\nserved_model_name = "q"\nport = 8123\n'
                           "max_num_seqs = 4\n", tmp_path / "p.toml")
    assert loaded.vllm is not None and loaded.vllm.port == 8123 and loaded.vllm.max_num_seqs == 4
    assert loaded.model.vllm == {"model": "/models/q", "served_model_name": "q", "port": 8123, "max_num_seqs": 4}
    assert parse_profile(HOSTED, tmp_path / "p.toml").vllm is None


@pytest.mark.parametrize(("body", "line", "words"), [
    ('model = "m"\nmax_model_length = 5\n', 14, ["unknown key `vllm.max_model_length`", "did you mean `max_model_len`?"]),
    ('model = "m"\nport = 70000\n', 14, ["`vllm.port`", "less than or equal to 65535"]),
    ('port = 8000\n', 12, ["`vllm.model` is required", 'model = "'],),
    ('model = "m"\n[vllm.restart]\nmode = "always"\n', 15, ["`vllm.restart.mode`", "on-failure"]),
    ('model = "m"\n[vllm.restart]\nbackof_max_s = 3\n', 15, ["unknown key `vllm.restart.backof_max_s`",
                                                             "did you mean `backoff_max_s`?"]),
    ('model = "m"\npython = "/x"\ncommand = ["/y"]\n', 12, ["set either `python` or `command`"]),
    ('model = "m"\napi_key = { file = "" }\n', 14, ["vllm.api_key", "empty"]),
])
def test_bad_vllm_setting_names_file_line_and_key(tmp_path: Path, body: str, line: int, words: list[str]) -> None:
    path = tmp_path / "p.toml"
    with pytest.raises(ProfileError) as ei:
        parse_profile(HOSTED + "\n[vllm]\n" + body, path)
    text = str(ei.value)
    assert text.startswith(f"{path}:{line}: "), text
    for w in words:
        assert w in text, text


def test_literal_api_key_never_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as ei:
        parse_profile(HOSTED + f'\n[vllm]\nmodel = "m"\napi_key = "{KEY}"\nport = "x"\n', tmp_path / "p.toml")
    assert KEY not in str(ei.value) and "`vllm.port`" in str(ei.value)


def test_implicit_local_channel(tmp_path: Path) -> None:
    loaded = parse_profile(HOSTED + '\n[vllm]\nmodel = "/models/q"\nserved_model_name = "q"\nhost = "0.0.0.0"\n'
                           "port = 8123\n", tmp_path / "p.toml")
    assert loaded.implicit_channels == ("local",)
    ch = loaded.channels["local"]
    assert ch.protocols == ["openai", "anthropic"] and ch.key is None and ch.models == ["q"]
    assert loaded.roots["local"]["openai"].openai_base() == "http://127.0.0.1:8123/v1"
    assert loaded.roots["local"]["anthropic"].anthropic_base() == "http://127.0.0.1:8123"
    rc = Resolver(loaded).channel("local")
    assert rc.key is None and rc.auth == "bearer"
    targets, problems = targets_for(loaded)
    assert not problems
    assert {(t.channel, t.protocol) for t in targets} == {("gw", "openai"), ("gw", "anthropic"),
                                                           ("local", "openai"), ("local", "anthropic")}


def test_a_written_local_channel_wins(tmp_path: Path) -> None:
    text = HOSTED + ('\n[channels.local]\nbase_url = "http://10.0.0.5:9000"\nprotocols = ["openai"]\n'
                     '\n[vllm]\nmodel = "m"\nport = 8123\n')
    loaded = parse_profile(text, tmp_path / "p.toml")
    assert loaded.implicit_channels == ()
    assert loaded.channels["local"].protocols == ["openai"]
    assert loaded.roots["local"]["openai"].openai_base() == "http://10.0.0.5:9000/v1"


def test_vllm_alone_needs_no_channels_table(tmp_path: Path) -> None:
    loaded = parse_profile('version = 1\nchannel = "local"\nmodel = "q"\n\n[vllm]\nmodel = "/m"\n'
                           'served_model_name = "q"\n', tmp_path / "p.toml")
    assert list(loaded.channels) == ["local"]
    with pytest.raises(ProfileError) as ei:  # without [vllm], `local` is gone and the error says where it came from
        parse_profile('version = 1\nchannel = "local"\nmodel = "q"\n[channels.gw]\nbase_url = "https://x.io"\n',
                      tmp_path / "p.toml")
    assert "[vllm]" in (ei.value.hint or "")


def test_literal_api_key_is_the_local_channels_key(tmp_path: Path) -> None:
    loaded = parse_profile(HOSTED + f'\n[vllm]\nmodel = "m"\napi_key = "{KEY}"\n', tmp_path / "p.toml")
    assert Resolver(loaded).channel("local").key == KEY
    s = vllm_settings(loaded)
    assert s is not None and s.api_key is not None and s.api_key.get_secret_value() == KEY
    assert KEY not in repr(loaded.vllm) and KEY not in repr(Resolver(loaded).channel("local"))


def test_api_key_from_a_key_source(temp_home: Path) -> None:
    keyfile = temp_home / "vllm.key"
    keyfile.write_text(KEY + "\n")
    loaded = parse_profile(HOSTED + '\n[vllm]\nmodel = "m"\napi_key = { file = "~/vllm.key" }\n',
                           temp_home / "p.toml")
    assert loaded.vllm is not None and loaded.vllm.api_key is None and loaded.vllm_key is not None
    assert loaded.channels["local"].key == loaded.vllm_key
    assert Resolver(loaded).channel("local").key == KEY
    s = vllm_settings(loaded)
    assert s is not None and s.api_key is not None and s.api_key.get_secret_value() == KEY
    keyfile.unlink()
    with pytest.raises(KeyError_) as ei:
        vllm_settings(loaded)
    assert "vllm.key" in str(ei.value) and KEY not in str(ei.value)


def test_use_model_channel_local_and_sync_points_tools_at_vllm(temp_home: Path) -> None:
    path = prof(temp_home, HOSTED + '\n[vllm]\nmodel = "/models/q"\nserved_model_name = "q"\nport = 8123\n')
    claude_settings(temp_home)
    state, secrets = cline_gen_b(temp_home)
    env = dict(os.environ, HOME=str(temp_home))
    r = subprocess.run([*CONDUIT, "use", "q", "--channel", "local"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert 'channel = "local"' in path.read_text() and "[channels.local]" not in path.read_text()
    report = sync(load_profile(path), env=Env())
    assert report.ok, [(t.tool, t.message) for t in report.tools]
    cc_env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    assert cc_env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8123" and cc_env["ANTHROPIC_MODEL"] == "q"
    doc = json.loads(state.read_text())
    assert doc["openAiBaseUrl"] == "http://127.0.0.1:8123/v1" and doc["actModeOpenAiModelId"] == "q"


def test_use_model_warns_for_a_name_vllm_does_not_serve(temp_home: Path) -> None:
    path = prof(temp_home, HOSTED + '\n[vllm]\nmodel = "/models/q"\nserved_model_name = "q"\n')
    _, warnings = use_model(path, "other", channel="local")
    assert warnings and "channels.local.models" in warnings[0]
