//! Splat tiling throughput (issue 5: ≥ 750k splats/s on 2 cores for a 1M-splat input; gotiler's
//! published rate is ≈ 740k splats/s, shared/research/tiles-formats.md).
//!
//! Input: a seeded synthetic scene of 1,000,000 splats spread over a 200 m × 200 m rolling
//! surface with 20 m of relief (the shape of an aerial capture), SH degree 3, log-scales
//! N(−3, 0.5) (≈ 5 cm splats). One iteration = the whole `tile_splats` call (no refinement: a
//! splats job's path): the k-d tree, parents merged by similarity level by level, SPZ v3 + gzip
//! (levels 1, 2 and 6) encoding of every tile and the atomic writes of the GLBs and `tileset.json`
//! into a temporary directory. Throughput is reported in splats/s.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_pipeline::stages::tile::splat::{SplatTileParams, tile_splats};

use kiln_pipeline::synth::aerial_splats as synthetic_scene;

fn bench_tile_splats(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let splats = synthetic_scene(N, 3);
    let mut group = c.benchmark_group("tile_splats");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N as u64));
    // Level 1 (zlib-rs quick mode), the default 2, and zlib's default 6 (smallest, slowest).
    for gzip_level in [1u8, 2, 6] {
        let params = SplatTileParams {
            gzip_level,
            ..Default::default()
        };
        group.bench_function(format!("1M_sh3_64k_per_tile_gzip{gzip_level}"), |b| {
            b.iter(|| {
                let dir = tempfile::tempdir().expect("temp dir");
                let report = tile_splats(black_box(&splats), &params, dir.path()).expect("tiling");
                black_box(report.tiles)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_tile_splats);
criterion_main!(benches);
