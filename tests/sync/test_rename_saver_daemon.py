"""A rename-style saver (temp file + rename, 10 saves a second for 60 s) against a real `conduit daemon` with
``on_drift = "reapply"`` and a profile saved every half second: the saver loses no key, ever.

This is the one long test of the default run (about 65 s); it runs there on purpose, since the race it guards
against (a save landing between conduit's last re-read and its rename) shows only over time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from helpers.daemonproc import Daemon, set_model, wait_for
from helpers.isolation import env_for_subprocess
from helpers.toolfiles import claude_settings, write_profile

SAVER = textwrap.dedent(
    """
    import json, os, sys, time
    path, progress, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    keys, i, end = {}, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        i += 1
        keys[f"saver_{i}"] = i                          # a new key each save, and all the earlier ones
        try:
            with open(path) as fh:                      # read-modify-write, as a tool saving its settings does
                doc = json.load(fh)
        except (OSError, ValueError):
            doc = {}
        doc["saver"] = dict(keys)
        tmp = path + ".saver-tmp"
        with open(tmp, "w") as fh:
            fh.write(json.dumps(doc, indent=2) + "\\n")
        os.replace(tmp, path)
        with open(progress + ".tmp", "w") as fh:        # then tell the test what it wrote
            fh.write(str(i))
        os.replace(progress + ".tmp", progress)
        time.sleep(0.1)
    print(i, flush=True)
    """
)


def _saver_keys(path: Path) -> set[str]:
    return set(json.loads(path.read_text()).get("saver", {}))


def test_rename_saver_loses_no_key_against_a_reapplying_daemon(temp_home: Path, tmp_path: Path) -> None:
    claude_settings(temp_home)
    profile = write_profile(temp_home, tools=("claude_code",), key_text="sk-test-saver-0123456789\n")
    profile.write_text(profile.read_text().replace('model = "', 'on_drift = "reapply"\nmodel = "', 1))
    settings = temp_home / ".claude" / "settings.json"
    progress = tmp_path / "progress"
    daemon = Daemon(temp_home, tmp_path).start()
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(settings), str(progress), "60"],
                             stdout=subprocess.PIPE, text=True, env=env_for_subprocess(temp_home))
    missing: list[str] = []
    stop = threading.Event()

    def profile_saves() -> None:  # conduit writes the file twice a second on its own account too
        n = 0
        while not stop.wait(0.5):
            n += 1
            set_model(profile, f"model-{n}", "atomic")

    editor = threading.Thread(target=profile_saves, daemon=True)
    editor.start()
    samples = 0
    try:
        while saver.poll() is None:
            try:
                done = int(progress.read_text())  # first what the saver has finished, then the file
            except (OSError, ValueError):
                continue
            have = _saver_keys(settings)
            missing += [f"sample {samples}: saver_{k}" for k in range(1, done + 1) if f"saver_{k}" not in have]
            samples += 1
            time.sleep(0.03)
        last = int(saver.communicate(timeout=30)[0])
    finally:
        stop.set()
        editor.join(5)
        if saver.poll() is None:
            saver.kill()
            saver.wait(10)
        wait_for(lambda: "sync claude_code" in daemon.log(), what="the daemon synced")
        rc = daemon.stop()
    assert last >= 100 and samples >= 100
    assert missing == [], missing[:10]
    assert _saver_keys(settings) == {f"saver_{k}" for k in range(1, last + 1)}
    assert rc == 0, daemon.log()[-3000:]
