#!/usr/bin/env python3
"""Side-by-side: `kiln convert in.ply out.ply` against numpy doing the same PLY copy (issue 21).

Generates a seeded N-splat SH-3 INRIA 3DGS PLY (62 little-endian float properties per splat,
248 MB at N = 1,000,000) in a scratch folder, then alternates RUNS runs of

  (a) numpy: parse the header, `np.fromfile` the body on a structured dtype of the header's
      properties, write header + `ndarray.tofile` to a new file and fsync it (kiln writes
      atomically: temporary file, fsync, rename; the fsync is what makes the two comparable);
  (b) `kiln convert in.ply out.ply` as a subprocess (its wall time includes process start-up,
      a few ms; numpy's is timed inside one Python process, after `import numpy`),

and prints the median seconds of each, MB/s of the file, and the ratio kiln / numpy (target:
≤ 1.2). The page cache is warm for both after the first runs, so this compares parsing,
copying and writing, plus whatever the disk takes for the fsync.

Usage:  python3 benches/ply_numpy_compare.py [--kiln target/debug/kiln] [--n 1000000]
            [--runs 5] [--dir /tmp/ply_numpy_compare] [--keep]
Needs numpy (a venv: `python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy`).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

# INRIA layout (formats/src/splats/ply.rs, `inria_property_names`): SH degree 3.
NAMES = (
    ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    + [f"f_rest_{i}" for i in range(45)]
    + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
)


def header_for(n):
    lines = ["ply", "format binary_little_endian 1.0", f"element vertex {n}"]
    lines += [f"property float {name}" for name in NAMES]
    lines.append("end_header")
    return ("\n".join(lines) + "\n").encode()


def generate(path, n, seed=7):
    """A seeded aerial-like scene: positions in a 200 m square, log-scales N(-3, 0.5), unit
    quaternions, opacity logits in [-4, 4], SH N(0, 0.3); normals 0."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, len(NAMES)), dtype="<f4")
    rows[:, 0] = rng.uniform(-100, 100, n)
    rows[:, 2] = rng.uniform(-100, 100, n)
    rows[:, 1] = 10 * np.sin(rows[:, 0] / 23) * np.cos(rows[:, 2] / 31)
    rows[:, 6:54] = rng.normal(0, 0.3, (n, 48))
    rows[:, 54] = rng.uniform(-4, 4, n)
    rows[:, 55:58] = rng.normal(-3, 0.5, (n, 3))
    q = rng.uniform(-1, 1, (n, 4))
    rows[:, 58:62] = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-6)
    with open(path, "wb") as f:
        f.write(header_for(n))
        rows.tofile(f)


def read_header(path):
    """(header bytes, vertex count, structured dtype) of an all-float binary LE PLY."""
    with open(path, "rb") as f:
        head = f.read(64 * 1024)
    end = head.index(b"end_header\n") + len(b"end_header\n")
    n, fields = None, []
    for line in head[:end].decode().splitlines():
        words = line.split()
        if words[:2] == ["element", "vertex"]:
            n = int(words[2])
        elif words[:1] == ["property"]:
            assert words[1] == "float", line
            fields.append((words[2], "<f4"))
    return head[:end], n, np.dtype(fields)


def numpy_copy(src, dst):
    header, n, dtype = read_header(src)
    body = np.fromfile(src, dtype=dtype, count=n, offset=len(header))
    with open(dst, "wb") as f:
        f.write(header)
        body.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    return body.shape[0]


def kiln_copy(kiln, src, dst):
    subprocess.run([kiln, "convert", src, dst], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="target/debug/kiln")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/ply_numpy_compare")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()
    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"{args.kiln}: no kiln binary; build it (cargo build -p kiln) or pass --kiln")
    os.makedirs(args.dir, exist_ok=True)
    src = os.path.join(args.dir, "in.ply")
    generate(src, args.n)
    size = os.path.getsize(src)
    print(f"input: {src}, {args.n} splats SH 3, {size} bytes")

    times = {"numpy": [], "kiln": []}
    for run in range(args.runs):
        for name in ("numpy", "kiln"):
            dst = os.path.join(args.dir, f"out-{name}.ply")
            t = time.perf_counter()
            if name == "numpy":
                numpy_copy(src, dst)
            else:
                kiln_copy(args.kiln, src, dst)
            times[name].append(time.perf_counter() - t)
            os.remove(dst)
        print(f"run {run + 1}: numpy {times['numpy'][-1]:.3f} s, kiln {times['kiln'][-1]:.3f} s")

    med = {k: statistics.median(v) for k, v in times.items()}
    for k in ("numpy", "kiln"):
        print(f"{k:>5}: median {med[k]:.3f} s ({size / med[k] / 1e6:.0f} MB/s read + write)")
    print(f"ratio kiln / numpy: {med['kiln'] / med['numpy']:.2f} (target <= 1.2)")
    if not args.keep:
        shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
