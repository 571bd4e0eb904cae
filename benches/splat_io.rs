//! Splat PLY I/O throughput (issue 21: read and write at disk speed, ≥ 2 GB/s on this machine).
//!
//! Input: the seeded synthetic aerial scene of `tile_splats` (1,000,000 splats, SH degree 3):
//! an INRIA 3DGS PLY of 62 float properties per splat, 248 MB. `write` is
//! `ply::write` into a temporary directory (atomic: temporary file, fsync, rename), with
//! the previous iteration's output deleted before the timer starts: replacing a 248 MB file
//! makes the filesystem free its blocks (with `discard` on the development VM, ~0.1 s), which
//! is not the writer's work. `read` is `ply::read` of that file (page cache warm after the
//! first iteration, so this measures Kiln's parsing and copying, not the disk), including
//! dropping the splats it returns. Throughput is reported in bytes/s of the PLY file.
//!
//! `benches/ply_numpy_compare.py` runs `kiln convert` (read + write) beside numpy doing the
//! same copy.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kiln_formats::splats::ply;

fn bench_splat_io(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let splats = kiln_pipeline::synth::aerial_splats(N, 3);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("scene.ply");
    ply::write(&path, &splats).expect("write");
    let bytes = std::fs::metadata(&path).expect("size").len();
    let mut group = c.benchmark_group("splat_ply");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("write_1M_sh3", |b| {
        let out = dir.path().join("out.ply");
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&out);
            },
            |()| ply::write(black_box(&out), black_box(&splats)).expect("write"),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("read_1M_sh3", |b| {
        b.iter(|| black_box(ply::read(black_box(&path)).expect("read").splats.len()))
    });
    group.finish();
}

criterion_group!(benches, bench_splat_io);
criterion_main!(benches);
