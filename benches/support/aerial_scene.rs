//! The seeded synthetic aerial scene shared by `benches/tile_splats.rs` and
//! `examples/tile_synthetic.rs`: `n` splats spread over a 200 m × 200 m rolling surface with 20 m
//! of relief, log-scales N(−3, 0.5) (≈ 5 cm splats), SH coefficients N(0, 0.3).

use kiln_formats::splats::GaussianSplats;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

/// A seeded `n`-splat aerial-like scene (see the module doc).
pub fn synthetic_scene(n: usize, sh_degree: u32) -> GaussianSplats {
    let mut rng = SmallRng::seed_from_u64(7);
    let log_scale = Normal::new(-3.0f32, 0.5).expect("valid normal");
    let sh = Normal::new(0.0f32, 0.3).expect("valid normal");
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let mut s = GaussianSplats {
        sh_degree,
        ..Default::default()
    };
    for _ in 0..n {
        let x: f32 = rng.random_range(-100.0..100.0);
        let z: f32 = rng.random_range(-100.0..100.0);
        let y = 10.0 * (x / 23.0).sin() * (z / 31.0).cos() + rng.random_range(-0.5..0.5);
        s.means.extend_from_slice(&[x, y, z]);
        for _ in 0..3 {
            s.log_scales.push(log_scale.sample(&mut rng));
        }
        let q: [f32; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
        s.rotations.extend(q.iter().map(|v| v / norm));
        s.logit_opacities.push(rng.random_range(-2.0..4.0));
        for _ in 0..k * 3 {
            s.sh_coeffs.push(sh.sample(&mut rng));
        }
    }
    s
}
