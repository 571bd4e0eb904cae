#!/usr/bin/env bash
# GPU check of the CUDA rasterizer, prepared to run as-is on a machine with an NVIDIA GPU and driver but no
# Rust toolchain (the `device` tool's machine): the CUDA kernels against the CPU twin, then the
# training benchmark on fox at full resolution (1080×1920) on the GPU and on the CPU.
#
# On the build machine (needs NVRTC on LD_LIBRARY_PATH so the PTX is embedded in the binary;
# `.ci/run` installs it under ~/.cache/kiln-ci/cuda):
#   scripts/gpu-check.sh --prepare
# which builds the release binary, strips it into target/gpu-check/kiln (26 MB) and copies the fox
# capture (18 MB) to target/gpu-check/datasets. Then, on the GPU machine, from the repository
# root, with target/gpu-check carried over (44 MB):
#   scripts/gpu-check.sh [OUT_DIR]
# Writes OUT_DIR/selftest.json, bench-cuda.json, bench-cpu.json, nvidia-smi.txt and a summary;
# exits 1 if the selftest fails. Budget: about 5 minutes on an H100/H200.
set -euo pipefail
cd "$(dirname "$0")/.."
KILN="${KILN_BIN:-target/gpu-check/kiln}"
DATASETS="${KILN_DATASETS:-$PWD/target/gpu-check/datasets}"

case "${1:-}" in
  -h|--help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  -*)
    [ "$1" = "--prepare" ] || { echo "unknown option $1 (use --prepare, --help or an output folder)"; exit 2; } ;;
esac

if [ "${1:-}" = "--prepare" ]; then
  if [ -z "${LD_LIBRARY_PATH:-}" ] || ! ls ${LD_LIBRARY_PATH//:/ } 2>/dev/null | grep -q libnvrtc; then
    NVRTC_LIB="$(echo "${KILN_CI_CACHE:-$HOME/.cache/kiln-ci}"/cuda/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib)"
    [ -d "$NVRTC_LIB" ] || { echo "NVRTC not found: run .ci/run once (it installs nvidia-cuda-nvrtc-cu12) or set LD_LIBRARY_PATH"; exit 1; }
    export LD_LIBRARY_PATH="$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  cargo build --release --bin kiln
  mkdir -p target/gpu-check
  cp target/release/kiln target/gpu-check/kiln
  strip target/gpu-check/kiln
  mkdir -p "$DATASETS"
  src="${KILN_SOURCE_DATASETS:-../shared/datasets}/capture-fox-instantngp"
  [ -d "$src" ] || { echo "fox capture not found at $src; set KILN_SOURCE_DATASETS"; exit 1; }
  rm -rf "$DATASETS/capture-fox-instantngp"
  cp -r "$src" "$DATASETS/capture-fox-instantngp"
  echo "prepared: target/gpu-check ($(du -sh target/gpu-check | cut -f1)): carry target/gpu-check"
  exit 0
fi

[ -x "$KILN" ] || { echo "no kiln binary at $KILN: run scripts/gpu-check.sh --prepare on the build machine and carry target/gpu-check"; exit 2; }
OUT="${1:-${OUT:-out/gpu-check}}"
mkdir -p "$OUT"
export KILN_DATASETS="$DATASETS"
export RUST_LOG="${RUST_LOG:-warn}"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi unavailable" > "$OUT/nvidia-smi.txt"

status=0
echo "== selftest (CUDA vs CPU: images 1e-4 abs, gradients 1e-3 rel, 5 training steps)"
"$KILN" selftest --device cuda --large --steps 5 --out "$OUT/selftest.json" > /dev/null || status=1

echo "== bench train, fox 1080×1920, 100k splats, cuda"
"$KILN" bench train --device cuda --max-side 0 --splats 100000 --steps 20 --warmup 3 \
  --json > "$OUT/bench-cuda.json" || status=1
echo "== bench train, fox 1080×1920, 100k splats, cpu ($(nproc) cores)"
"$KILN" bench train --device cpu --max-side 0 --splats 100000 --steps 3 --warmup 1 \
  --json > "$OUT/bench-cpu.json" || status=1
echo "== --device cuda job run (fox, 300 steps at max side 540) and its ledger"
sed -e 's/^max_side = .*/max_side = 540/' -e 's/^steps = .*/steps = 300/' \
  -e "s#^output = .*#output = \"$OUT/fox\"#" datasets/jobs/fox.toml > "$OUT/fox-gpu.toml"
"$KILN" run "$OUT/fox-gpu.toml" --device cuda --db "$OUT/ledger.sqlite" > "$OUT/run.txt" 2>&1 || status=1
job="$(grep -o 'kiln report [^ ]*' "$OUT/run.txt" | head -1 | cut -d' ' -f3 || true)"
[ -n "$job" ] && "$KILN" report "$job" --db "$OUT/ledger.sqlite" > "$OUT/report.txt" 2>&1 || true

{
  # The report's overall verdict is its last "pass" key (each tensor has one too).
  echo "selftest pass: $(grep '"pass"' "$OUT/selftest.json" 2>/dev/null | tail -1)"
  for d in cuda cpu; do
    echo "bench $d: $(grep -E '"steps_per_s"|"device_name"|"total"|"peak_device_bytes"' "$OUT/bench-$d.json" 2>/dev/null | tr -s ' ' | tr '\n' ' ')"
  done
  tail -4 "$OUT/run.txt" 2>/dev/null
  cat "$OUT/report.txt" 2>/dev/null
} | tee "$OUT/summary.txt"
exit $status
