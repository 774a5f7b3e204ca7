#!/bin/sh
# Builds {{name}}.wasm (or the file given as $1) from policy.js.
# Needs Node.js and npm; installs the pinned componentize-js into node_modules on first use.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/{{name}}.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
wit=${WARDGATE_WIT:-$here/wit}
cd "$here"
if ! cmp -s package-lock.json node_modules/.installed-lock.json 2>/dev/null; then
    # The first build writes package-lock.json: commit it, and later builds install exactly
    # those versions. (`npm install`, not `npm ci`: npm 11's `ci` rejects lock files that
    # leave out optional packages for other platforms.)
    npm install --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.installed-lock.json
fi
# The world imports nothing, so the HTTP and fetch-event features (which would make the
# component import wasi:http) are left out.
npx --no-install componentize-js policy.js --wit "$wit" --world-name recovery-policy \
    --out "$out" --disable http fetch-event
