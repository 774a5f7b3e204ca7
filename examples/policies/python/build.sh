#!/bin/sh
# Builds breaker.wasm (or the file given as $1) from app.py.
# Needs Python 3 and a package index; installs componentize-py into .venv on first use.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/breaker.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
wit=${WARDGATE_WIT:-$here/../../../wit}
if ! cmp -s "$here/requirements.txt" "$here/.venv/requirements.txt" 2>/dev/null; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$here/.venv/requirements.txt"
fi
cd "$here"
.venv/bin/componentize-py --wit-path "$wit" --world recovery-policy componentize app --output "$out"
