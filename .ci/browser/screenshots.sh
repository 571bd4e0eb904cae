#!/usr/bin/env bash
# Screenshots of a `kiln regress` run, saved beside its reports (scenes/<scene>/): the job report
# page (static HTML, Chromium --screenshot → report.png) and the viewer page served by `kiln serve`
# (CesiumJS; check_viewer.mjs requires loaded tiles, no console errors and a non-empty canvas →
# viewer.png + viewer.json). Exits 1 when any viewer check fails.
#
# Usage: screenshots.sh KILN_BINARY REGRESS_DIR
# Needs: /usr/bin/chromium, KILN_CESIUM_DIR and KILN_BROWSER_NODE_PATH (see install.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kiln="${1:?usage: screenshots.sh KILN_BINARY REGRESS_DIR}"
dir="$(cd "${2:?usage: screenshots.sh KILN_BINARY REGRESS_DIR}" && pwd)"
: "${KILN_CESIUM_DIR:?set KILN_CESIUM_DIR (see .ci/browser/install.sh)}"
: "${KILN_BROWSER_NODE_PATH:?set KILN_BROWSER_NODE_PATH (see .ci/browser/install.sh)}"
chromium="${KILN_CHROMIUM:-/usr/bin/chromium}"

"$kiln" serve --db "$dir/ledger.sqlite" --addr 127.0.0.1:0 --cesium "$KILN_CESIUM_DIR" \
  >"$dir/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true' EXIT
base=""
for _ in $(seq 1 100); do
  base="$(sed -n 's|^serving \(http://[^/ ]*\)/.*|\1|p' "$dir/serve.log" | head -n 1)"
  [ -n "$base" ] && break
  sleep 0.2
done
[ -n "$base" ] || { echo "kiln serve did not start:"; cat "$dir/serve.log"; exit 1; }

failed=0
# One "scene job_id" line per scene that produced a job (results.json is written by kiln regress).
while read -r scene job_id; do
  out="$dir/scenes/$scene"
  if [ -f "$out/output/report/index.html" ]; then
    "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
      --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
      --user-data-dir="$(mktemp -d)" --window-size=1280,3000 \
      --screenshot="$out/report.png" "file://$out/output/report/index.html" >/dev/null 2>&1 \
      || echo "report screenshot of $scene failed"
  fi
  if NODE_PATH="$KILN_BROWSER_NODE_PATH" node "$here/check_viewer.mjs" \
      "$base/jobs/$job_id" "$out/viewer.png" 150 >"$out/viewer.json"; then
    echo "viewer $scene: ok ($out/viewer.png)"
  else
    echo "viewer $scene: FAILED ($out/viewer.json)"
    failed=1
  fi
done < <(python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["scenes"]:
    if s.get("job_id") and s.get("error") is None:
        print(s["name"], s["job_id"])
' "$dir/results.json")
exit "$failed"
