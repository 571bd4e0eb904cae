#!/usr/bin/env bash
# Installs what the viewer browser check needs, idempotently:
#   - Debian's Chromium at /usr/bin/chromium (apt-get; sudo only when not root);
#   - the pinned npm packages (cesium, puppeteer-core) from this folder's package-lock.json into
#     the cache folder $1 (e.g. ~/.cache/kiln-ci/browser), never into the repository.
# Afterwards:  KILN_CESIUM_DIR=$1/node_modules/cesium/Build/Cesium
#              KILN_BROWSER_NODE_PATH=$1/node_modules
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:?usage: install.sh CACHE_DIR   (e.g. ~/.cache/kiln-ci/browser)}"

if [ ! -x /usr/bin/chromium ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium
fi

mkdir -p "$cache"
# Reinstall only when the lock file changed (or the install is incomplete).
if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" \
   || [ ! -f "$cache/node_modules/cesium/Build/Cesium/Cesium.js" ] \
   || [ ! -f "$cache/node_modules/puppeteer-core/package.json" ]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  # cesium 1.145 declares node >=22 but only its prebuilt Build/ folder is used here (works on 20).
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false)
fi
