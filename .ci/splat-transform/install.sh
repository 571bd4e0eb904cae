#!/usr/bin/env bash
# Installs @playcanvas/splat-transform (the interop check of Kiln's PLY and SPZ output) with the
# Node 22 it needs, idempotently, from this folder's package-lock.json into the cache folder $1
# (e.g. ~/.cache/kiln-ci/splat-transform), never into the repository. splat-transform 3.x declares
# node >= 22 and the system Node is 20, so Node 22 comes from the npm `node` package (it ships the
# binary) and the runner script below uses that binary, not the one on PATH.
# Afterwards:  KILN_SPLAT_TRANSFORM=$1/splat-transform   (a runner: `splat-transform ARGS…`)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:?usage: install.sh CACHE_DIR   (e.g. ~/.cache/kiln-ci/splat-transform)}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"

# Reinstall only when the lock file changed (or the install is incomplete).
if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" \
   || [ ! -x "$cache/node_modules/node/bin/node" ] \
   || [ ! -f "$cache/node_modules/@playcanvas/splat-transform/bin/cli.mjs" ]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  # The engine check would reject splat-transform under the installing (system) Node 20.
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false)
fi

runner="$cache/splat-transform"
cat >"$runner" <<RUNNER
#!/usr/bin/env bash
# splat-transform under the Node 22 installed beside it (written by .ci/splat-transform/install.sh).
export PATH="$cache/node_modules/.bin:\$PATH"
exec "$cache/node_modules/node/bin/node" "$cache/node_modules/@playcanvas/splat-transform/bin/cli.mjs" "\$@"
RUNNER
chmod +x "$runner"
"$runner" --version >/dev/null 2>&1
