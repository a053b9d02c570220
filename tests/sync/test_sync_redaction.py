"""`conduit sync --dry-run` diffs pass through the one redaction: every key the profile resolves is masked, the
keys of channels the synced tools do not use included (a tool's file may hold one in a line the diff shows)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.isolation import env_for_subprocess
from helpers.toolfiles import write_profile

OWN = "sk-canary-own-0123456789abcdef"
OTHER = "sk-canary-other-9876543210fedcba"


@pytest.mark.parametrize("as_json", [False, True])
def test_dry_run_diff_masks_every_key_the_profile_resolves(temp_home: Path, as_json: bool) -> None:
    extra = ('channel = "other"\n\n[channels.other]\nbase_url = "https://other.example.com/v1"\n'
             'protocols = ["openai"]\nkey = { file = "~/.config/conduit/keys/other" }\n')
    write_profile(temp_home, tools=("claude_code", "cline"), key_text=OWN + "\n", extra=extra, key_delivery="copy")
    keyfile = temp_home / ".config" / "conduit" / "keys" / "other"
    keyfile.write_text(OTHER + "\n")
    keyfile.chmod(0o600)
    settings = temp_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    # The other channel's key sits next to an owned key, in a line the diff shows as context.
    settings.write_text(json.dumps({"env": {"ANTHROPIC_MODEL": "old", "MY_OTHER_TOKEN_COPY": OTHER,
                                            "ANTHROPIC_AUTH_TOKEN": "sk-old-0123456789abcd"}}, indent=2) + "\n")
    args = [sys.executable, "-m", "conduit.daemon.cli", "sync", "--dry-run", "--tool", "claude_code"]
    run = subprocess.run(args + (["--json"] if as_json else []), capture_output=True, text=True, timeout=60,
                         env=dict(env_for_subprocess(temp_home), COLUMNS="200"), cwd=temp_home)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "ANTHROPIC_MODEL" in out and "MY_OTHER_TOKEN_COPY" in out  # the diff is there, context included
    assert OWN not in out and OTHER not in out
    assert "sk-...cdef" in out or as_json  # the own key by its fingerprint
    assert "sk-...dcba" in out
    assert OTHER in settings.read_text()  # a dry run wrote nothing
