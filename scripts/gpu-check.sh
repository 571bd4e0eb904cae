#!/usr/bin/env bash
# GPU check of the CUDA rasterizer, prepared to run as-is on a machine with an NVIDIA GPU and driver but no
# Rust toolchain (the `device` tool's machine): the CUDA kernels against the CPU twin (images, gradients,
# fused loss, fused Adam, the device-resident training state), then the training benchmark on fox at full
# resolution (1080×1920) on the GPU and on the CPU, then a short `--device cuda` job and its ledger.
#
# On the build machine (needs NVRTC on LD_LIBRARY_PATH so the PTX is embedded in the binary;
# `.ci/run` installs it under ~/.cache/kiln-ci/cuda; switching LD_LIBRARY_PATH rebuilds kiln-kernels):
#   scripts/gpu-check.sh --prepare
# builds the release binary from the working tree, strips it into target/gpu-check/kiln (about 27 MB),
# checks that the PTX is embedded, records the commit in target/gpu-check/BUILD_INFO and copies the fox
# capture (18 MB) to target/gpu-check/datasets. Then, on the GPU machine, from the repository root,
# with target/gpu-check carried over (about 45 MB):
#   scripts/gpu-check.sh [OUT_DIR]      (default $OUT, else out/gpu-check; relative to the caller)
# Writes OUT_DIR/summary.txt, selftest.json, bench-cuda.json, bench-cuda-1m.json, bench-cpu.json, a
# .err file per step, kernel-times.txt (when ncu is installed), nvidia-smi.txt, BUILD_INFO,
# fox-gpu.toml, run.txt, report.txt, ledger.sqlite and fox/ (the job's output), and OUT_DIR.tgz
# beside it (all of it but the .ply files). Exits 1 if any step fails. Budget: about 3 minutes on
# an H200 (2026-12-04: 98 s for the steps of the first version).
set -euo pipefail
usage_end=19
die() { echo "$1" >&2; exit "${2:-1}"; }

case "${1:-}" in
  -h|--help)
    sed -n "2,${usage_end}p" "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  --prepare) [ $# -eq 1 ] || die "--prepare takes no other argument" 2 ;;
  -*) die "unknown option $1 (use --prepare, --help or an output folder)" 2 ;;
  *) [ $# -le 1 ] || die "one output folder at most (got: $*)" 2 ;;
esac
# The output folder is relative to where the script was called from.
if [ "${1:-}" != "--prepare" ]; then
  OUT="$(realpath -m "${1:-${OUT:-out/gpu-check}}")"
fi
cd "$(dirname "$0")/.."
KILN="${KILN_BIN:-target/gpu-check/kiln}"
PREPARED_DATASETS="$PWD/target/gpu-check/datasets"

if [ "${1:-}" = "--prepare" ]; then
  if ! ls ${LD_LIBRARY_PATH//:/ } 2>/dev/null | grep -q libnvrtc; then
    NVRTC_LIB="$(echo "${KILN_CI_CACHE:-$HOME/.cache/kiln-ci}"/cuda/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib)"
    [ -d "$NVRTC_LIB" ] || die "NVRTC not found: run .ci/run once (it installs nvidia-cuda-nvrtc-cu12) or put libnvrtc on LD_LIBRARY_PATH"
    export LD_LIBRARY_PATH="$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  cargo build --release --bin kiln
  mkdir -p target/gpu-check
  cp target/release/kiln target/gpu-check/kiln
  strip target/gpu-check/kiln
  # build.rs leaves the PTX empty when NVRTC fails; the GPU machine has no NVRTC to fall back on.
  grep -q kiln_adam_step target/gpu-check/kiln \
    || die "the binary has no embedded PTX (NVRTC did not run at build time): check LD_LIBRARY_PATH"
  { echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"; echo "built $(date -u +%FT%TZ)";
    echo "uncommitted changes:"; git status --short 2>/dev/null || true; } > target/gpu-check/BUILD_INFO
  src="$(realpath -m "${KILN_SOURCE_DATASETS:-../shared/datasets}/capture-fox-instantngp")"
  [ -d "$src" ] || die "fox capture not found at $src; set KILN_SOURCE_DATASETS to the shared datasets folder"
  [ "$src" != "$PREPARED_DATASETS/capture-fox-instantngp" ] || die "source and destination are the same folder: $src"
  mkdir -p "$PREPARED_DATASETS"
  rm -rf "$PREPARED_DATASETS/capture-fox-instantngp"
  cp -r "$src" "$PREPARED_DATASETS/capture-fox-instantngp"
  echo "prepared: target/gpu-check ($(du -sh target/gpu-check | cut -f1)): carry target/gpu-check"
  exit 0
fi

[ -x "$KILN" ] || die "no kiln binary at $KILN: run scripts/gpu-check.sh --prepare on the build machine and carry target/gpu-check" 2
mkdir -p "$OUT"
export KILN_DATASETS="${KILN_DATASETS:-$PREPARED_DATASETS}"
export RUST_LOG="${RUST_LOG:-warn}"
# A fresh work root and ledger: a cached train stage from an earlier run would skip the GPU.
export KILN_HOME="$(mktemp -d)"
cp target/gpu-check/BUILD_INFO "$OUT/" 2>/dev/null || true
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi unavailable" > "$OUT/nvidia-smi.txt"

step() { # step NAME CMD...: stdout to OUT/NAME, stderr to OUT/NAME.err; prints ok or FAILED
  local name="$1"; shift
  if "$@" > "$OUT/$name" 2> "$OUT/${name%.*}.err"; then echo "ok"; else echo "FAILED (see ${name%.*}.err)"; fi
}
echo "== selftest (CUDA vs CPU: images 1e-4 abs but rare α-cutoff flips, gradients 1e-3 rel, loss, Adam, 5 training steps)"
r_self=$(step selftest.out "$KILN" selftest --device cuda --large --steps 5 --out "$OUT/selftest.json")
echo "$r_self"
echo "== bench train, fox 1080×1920, 100k splats, cuda"
r_cuda=$(step bench-cuda.json "$KILN" bench train --device cuda --max-side 0 --splats 100000 --steps 20 --warmup 3 --json)
echo "$r_cuda"
echo "== bench train, fox 1080×1920, 1M splats, cuda"
r_cuda1m=$(step bench-cuda-1m.json "$KILN" bench train --device cuda --max-side 0 --splats 1000000 --steps 20 --warmup 3 --json)
echo "$r_cuda1m"
# Per-kernel GPU times of one 1M-splat training step (Nsight Compute reads the hardware timers; it
# ran on the lent H200 machines' Firecracker runtime, not on gVisor). Optional: skipped without ncu.
NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)"
if [ -n "$NCU" ]; then
  echo "== kernel times, one step at 1M splats (ncu)"
  if timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum -k regex:kiln_ -c 60 \
      "$KILN" bench train --device cuda --max-side 0 --splats 1000000 --steps 1 --warmup 0 --json \
      > "$OUT/ncu.txt" 2> "$OUT/ncu.err"; then
    # Sum each kernel's launches in microseconds (ncu prints ns, us or ms per launch).
    awk '/^ +kiln_/ {k=$1} /gpu__time_duration.sum/ && k {v=$NF; gsub(",","",v); u=$(NF-1);
         if (u=="ns"||u=="nsecond") v/=1000; if (u=="ms"||u=="msecond") v*=1000; t[k]+=v; n[k]++; k=""}
         END {for (k in t) printf "%-28s %4d launches %10.1f us\n", k, n[k], t[k]}' "$OUT/ncu.txt" \
      | sort -k4 -rn > "$OUT/kernel-times.txt"
    cat "$OUT/kernel-times.txt"
  else
    echo "ncu failed (see ncu.err); skipped"
  fi
fi
echo "== bench train, fox 1080×1920, 100k splats, cpu ($(nproc) cores)"
r_cpu=$(step bench-cpu.json "$KILN" bench train --device cpu --max-side 0 --splats 100000 --steps 3 --warmup 1 --json)
echo "$r_cpu"
echo "== --device cuda job run (fox, 300 steps at max side 540) and its ledger"
sed -e 's/^max_side = .*/max_side = 540/' -e 's/^steps = .*/steps = 300/' datasets/jobs/fox.toml > "$OUT/fox-gpu.toml"
r_run=$(step run.txt "$KILN" run "$OUT/fox-gpu.toml" --device cuda --output "$OUT/fox" --db "$OUT/ledger.sqlite")
echo "$r_run"
job="$(grep -o 'kiln report [^ ]*' "$OUT/run.txt" "$OUT/run.err" 2>/dev/null | head -1 | awk '{print $3}' || true)"
if [ -n "$job" ]; then "$KILN" report "$job" --db "$OUT/ledger.sqlite" > "$OUT/report.txt" 2>&1 || true; fi

{
  echo "build: $(head -1 "$OUT/BUILD_INFO" 2>/dev/null || echo unknown)"
  # The report's overall verdict is its last "pass" key (each tensor has one too).
  echo "selftest: $r_self $(grep '"pass"' "$OUT/selftest.json" 2>/dev/null | tail -1 || true)"
  echo "bench cuda: $r_cuda $(grep -E '"steps_per_s"|"device_name"|"total"|"peak_device_bytes"' "$OUT/bench-cuda.json" 2>/dev/null | tr -s ' ' | tr '\n' ' ' || true)"
  echo "bench cuda 1M: $r_cuda1m $(grep -E '"steps_per_s"|"sort"|"total"|"peak_device_bytes"' "$OUT/bench-cuda-1m.json" 2>/dev/null | tr -s ' ' | tr '\n' ' ' || true)"
  echo "bench cpu: $r_cpu $(grep -E '"steps_per_s"|"device_name"|"total"' "$OUT/bench-cpu.json" 2>/dev/null | tr -s ' ' | tr '\n' ' ' || true)"
  echo "job --device cuda: $r_run"
  tail -4 "$OUT/run.txt" 2>/dev/null || true
  tail -3 "$OUT/run.err" 2>/dev/null || true
  cat "$OUT/report.txt" 2>/dev/null || true
} | tee "$OUT/summary.txt"
# One archive of everything but the trained splats, for transports that bring back few files.
tar czf "$OUT.tgz" --exclude='*.ply' -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null || true
case "$r_self $r_cuda $r_cuda1m $r_cpu $r_run" in *FAILED*) exit 1 ;; esac
