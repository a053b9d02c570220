"""Inside the verify sandbox's private mount namespace: lay each temporary-HOME file over the user's file it copies,
then exec the tool: ``python -m conduit.daemon.verify.shadow PAIRS.json -- ARGV...``.

Why: a tool may reach the user's own files by another road than ``$HOME``. Gemini CLI looks for ``.gemini/.env``
in every folder from the working directory up, so in a project under the user's HOME it finds the user's
``~/.gemini/.env`` (pointing at the real gateway) before the copy in the temporary HOME; Claude Code run from
HOME reads ``~/.claude/settings.json`` as project settings. With each copied file bind-mounted over its
original (``mount --bind T/x ~/x``, in the sandbox's mount namespace only: the user's files and every other
process see nothing), every road leads to conduit's canary config, and a tool's write lands in the copy.

PAIRS.json: ``[[temp_path, user_path], ...]``, regular files. A pair that cannot be mounted is reported on stderr
(``conduit verify: not shadowed: ...``) and skipped; the run goes on (its network is cut either way).
Exit status: the tool's (``exec``), or 127 when it cannot be started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def shadow(pairs: list[list[str]]) -> list[str]:
    """Bind-mount each ``temp`` over ``user`` (both regular files); one message per pair that failed."""
    failed = []
    for temp, user in pairs:
        if not (os.path.isfile(temp) and os.path.isfile(user)):
            continue
        done = subprocess.run(["mount", "--bind", temp, user], capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            failed.append(f"{user}: {done.stderr.strip() or done.returncode}")
    return failed


def main(argv: list[str]) -> int:
    """``PAIRS.json -- ARGV...``: shadow, then exec ARGV (see the module docstring)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m conduit.daemon.verify.shadow PAIRS.json -- ARGV...", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        pairs = json.load(f)
    for message in shadow(pairs):
        print(f"conduit verify: not shadowed: {message}", file=sys.stderr)
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"conduit verify: cannot start {argv[2]}: {exc.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":  # pragma: no cover - run as a module inside the sandbox
    sys.exit(main(sys.argv[1:]))
