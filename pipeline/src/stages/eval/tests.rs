//! End-to-end checks of `evaluate` on a small tiled scene: the full-detail cut matches the full
//! splats, coarser cuts render fewer splats and fetch fewer bytes, and the report files exist.

use super::*;
use crate::stages::tile::splat::{SplatTileParams, tile_splats};
use kiln_formats::splats::GaussianSplats;

/// A 2 m wide slab of N opaque-ish splats in the x–y plane at z = 0, coloured by position.
fn slab(n_side: usize) -> GaussianSplats {
    let mut s = GaussianSplats {
        sh_degree: 0,
        ..Default::default()
    };
    let step = 2.0 / n_side as f32;
    for i in 0..n_side {
        for j in 0..n_side {
            let (x, y) = (
                -1.0 + (i as f32 + 0.5) * step,
                -1.0 + (j as f32 + 0.5) * step,
            );
            s.means.extend([x, y, 0.0]);
            s.log_scales
                .extend([(step * 0.6).ln(), (step * 0.6).ln(), (step * 0.05).ln()]);
            s.rotations.extend([1.0, 0.0, 0.0, 0.0]);
            s.logit_opacities.push(2.0);
            s.sh_coeffs.extend([x, y, 0.3 * (x * 7.0).sin()]);
        }
    }
    s
}

#[test]
fn full_detail_cut_matches_the_full_splats_and_coarser_cuts_cost_less() {
    let s = slab(64);
    let dir = tempfile::tempdir().unwrap();
    let params = SplatTileParams {
        max_splats_per_tile: 512,
        ..Default::default()
    };
    tile_splats(&s, &params, dir.path()).unwrap();
    let ts = LoadedTileset::open(&dir.path().join("tileset.json")).unwrap();
    assert!(ts.tiles.len() > 4);
    let sphere = scene_sphere(&s);
    let views = orbit_views(&sphere, [0.0, 0.0, 1.0], &[2.0], 4, 96);
    let out = dir.path().join("eval");
    let report = evaluate(
        &Renderer::Cpu,
        &Delivered::Tileset(ts),
        Some(&s),
        &views,
        &EvalParams {
            taus_px: vec![0.0, 16.0, 1e4],
            budgets: vec![1000],
            ..EvalParams::default()
        },
        &RenderOptions::default(),
        &out,
    )
    .unwrap();
    let full = report.tau(0.0).unwrap();
    assert_eq!(full.mean.splats as usize, s.len());
    assert!(full.mean.psnr_vs_full_db.unwrap() > 40.0, "{full:?}");
    let coarse = report.tau(1e4).unwrap();
    assert!(coarse.mean.splats < full.mean.splats);
    assert!(coarse.mean.bytes < full.mean.bytes);
    assert!(coarse.mean.psnr_vs_full_db.unwrap() < full.mean.psnr_vs_full_db.unwrap());
    let budget = report
        .cuts
        .iter()
        .find(|c| c.budget_splats == Some(1000))
        .unwrap();
    assert!(budget.mean.splats <= 1000.0, "{budget:?}");
    assert!(out.join(FIDELITY_JSON).is_file());
    assert!(out.join("psnr_bytes.svg").is_file());
    assert!(out.join("strips/orbit-2x-00.png").is_file());
    assert_eq!(
        report.strip_columns,
        ["full splats", "τ=0", "τ=16", "τ=10000"]
    );
    assert_eq!(EvalReport::read(&out.join(FIDELITY_JSON)).unwrap(), report);
}

#[test]
fn every_numeric_field_has_a_bound() {
    let p = EvalParams::default();
    p.validate().unwrap();
    assert_eq!(crate::bounds::unbounded_and_stale(&p), (vec![], vec![]));
    // The job-file limit's 16 and the stage's 4096 (the stricter of each).
    for size in [8, 8192] {
        let e = EvalParams {
            orbit_size_px: size,
            ..p.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("`orbit_size_px`: expected 16 ..= 4096"), "{e}");
    }
    let e = EvalParams {
        orbit_radii: vec![1.0, 0.0],
        ..p
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("`orbit_radii[1]`: expected 0.01 ..= 100"), "{e}");
}
