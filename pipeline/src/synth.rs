//! Deterministic large inputs for scale measurements (issue 43 item 6): a photogrammetry-like
//! textured city mesh and an aerial splat scene, of any size, the same bytes for the same
//! arguments on every machine.
//!
//! - [`city_mesh`]: a height field over a city of 20 m blocks (buildings 3–40 m tall, 4 m
//!   streets at ground level) sampled every [`CITY_CELL_M`] metres, with ±[`CITY_NOISE_M`] of
//!   surface noise like a photogrammetry reconstruction's, and one 2048² JPEG orthophoto-like
//!   texture (block colours and noise) over the whole extent. Size grows with area at a fixed
//!   density, as a larger capture of a city does: the triangle count is 2·n², the extent
//!   n·[`CITY_CELL_M`] on each side.
//! - [`aerial_splats`]: `n` splats over a 200 m × 200 m rolling surface with 20 m of relief,
//!   log-scales N(−3, 0.5) (≈ 5 cm splats), SH coefficients N(0, 0.3) (the scene
//!   `benches/tile_splats.rs` has measured since issue 40).
//!
//! Randomness is a fixed seed ([`rand::rngs::SmallRng`]) or an integer hash of the grid
//! position, so neither depends on threads or on the order of generation.

use kiln_formats::mesh::{EmbeddedImage, Material, Mesh, Sampler, TextureRef};
use kiln_formats::splats::GaussianSplats;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

/// Grid spacing of [`city_mesh`], metres (a photogrammetry mesh of a city at ~25 cm detail).
pub const CITY_CELL_M: f64 = 0.25;
/// Amplitude of [`city_mesh`]'s surface noise, metres (uniform in ±this).
pub const CITY_NOISE_M: f64 = 0.05;
/// Side of [`city_mesh`]'s texture, pixels.
pub const CITY_TEXTURE_PX: u32 = 2048;
/// City block pitch (building + street), metres.
const BLOCK_M: f64 = 20.0;
/// Street width inside each block pitch, metres.
const STREET_M: f64 = 4.0;

/// A uniform value in [0, 1) from integer coordinates and a salt (SplitMix64 finaliser).
fn hash01(x: i64, y: i64, salt: u64) -> f64 {
    let mut h = (x as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (y as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ salt.wrapping_mul(0x1656_67B1_9E37_79F9);
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Ground height (metres) of the city at (x, z) metres, without noise: the block's building
/// height, or 0 in the streets.
fn city_height(x: f64, z: f64) -> f64 {
    let (bx, bz) = ((x / BLOCK_M).floor(), (z / BLOCK_M).floor());
    let (u, v) = (x - bx * BLOCK_M, z - bz * BLOCK_M);
    if u < STREET_M || v < STREET_M {
        return 0.0;
    }
    3.0 + 37.0 * hash01(bx as i64, bz as i64, 1).powi(2)
}

/// The grid side n for about `triangles` triangles (2·n² of them), at least 1.
#[must_use]
pub fn city_grid_side(triangles: usize) -> usize {
    ((triangles as f64 / 2.0).sqrt().round() as usize).max(1)
}

/// A photogrammetry-like textured city mesh of 2·n² triangles, n = [`city_grid_side`]
/// (`triangles`), Y up, metres, origin at the south-west corner; see the module docs.
///
/// Memory: 2·(n+1)² × 20 B of vertices (position, UV) + 2·n² × 12 B of indices + the
/// texture (≈ 1–2 MB of JPEG); about 64 B per triangle.
///
/// # Panics
/// When the JPEG encoder fails on the in-memory image (it does not for RGB8 input).
#[must_use]
pub fn city_mesh(triangles: usize) -> Mesh {
    let n = city_grid_side(triangles);
    let extent = n as f64 * CITY_CELL_M;
    let side = n + 1;
    let mut positions = Vec::with_capacity(side * side);
    let mut uvs = Vec::with_capacity(side * side);
    for j in 0..side {
        for i in 0..side {
            let (x, z) = (i as f64 * CITY_CELL_M, j as f64 * CITY_CELL_M);
            let noise = (2.0 * hash01(i as i64, j as i64, 2) - 1.0) * CITY_NOISE_M;
            let y = city_height(x, z) + noise;
            positions.push([x as f32, y as f32, z as f32]);
            uvs.push([(x / extent) as f32, (z / extent) as f32]);
        }
    }
    let mut indices = Vec::with_capacity(6 * n * n);
    for j in 0..n {
        for i in 0..n {
            let a = (j * side + i) as u32;
            let (b, c, d) = (a + 1, a + side as u32, a + side as u32 + 1);
            // Counter-clockwise seen from above (+Y): x east, z south.
            indices.extend_from_slice(&[a, c, b, b, c, d]);
        }
    }
    let triangle_count = indices.len() / 3;
    let material = Material {
        name: Some("orthophoto".into()),
        base_color_texture: Some(TextureRef {
            image: 0,
            sampler: Sampler::default(),
            tex_coord: 0,
            transform: None,
        }),
        metallic_factor: 0.0,
        ..Material::default()
    };
    Mesh {
        origin_m: [0.0; 3],
        positions,
        normals: None,
        uvs: Some(uvs),
        uvs1: None,
        colors: None,
        indices,
        triangle_materials: vec![0; triangle_count],
        materials: vec![material],
        images: vec![EmbeddedImage {
            mime: "image/jpeg".into(),
            bytes: city_texture(extent),
        }],
    }
}

/// The city's orthophoto-like texture over `extent` metres: grey streets, one colour per
/// block roof, pixel noise; a [`CITY_TEXTURE_PX`]² JPEG at quality 90.
fn city_texture(extent: f64) -> Vec<u8> {
    let px = CITY_TEXTURE_PX;
    let image = image::RgbImage::from_fn(px, px, |u, v| {
        let x = (f64::from(u) + 0.5) / f64::from(px) * extent;
        let z = (f64::from(v) + 0.5) / f64::from(px) * extent;
        let grain = 24.0 * (hash01(i64::from(u), i64::from(v), 3) - 0.5);
        let base = if city_height(x, z) == 0.0 {
            [96.0, 96.0, 100.0]
        } else {
            let (bx, bz) = ((x / BLOCK_M).floor() as i64, (z / BLOCK_M).floor() as i64);
            [4, 5, 6].map(|salt| 60.0 + 160.0 * hash01(bx, bz, salt))
        };
        image::Rgb(base.map(|c| (c + grain).clamp(0.0, 255.0) as u8))
    });
    let mut bytes = Vec::new();
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90);
    image
        .write_with_encoder(encoder)
        .expect("JPEG encoding of an in-memory RGB image");
    bytes
}

/// A seeded `n`-splat aerial-like scene of SH degree `sh_degree` (see the module docs).
#[must_use]
pub fn aerial_splats(n: usize, sh_degree: u32) -> GaussianSplats {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 2·n² triangles over n·0.25 m, every index in range, heights those of the plan (streets
    /// at 0 ± 5 cm, roofs 3–40 m ± 5 cm), and the same mesh on a second call.
    #[test]
    fn city_mesh_has_the_stated_size_heights_and_is_deterministic() {
        let m = city_mesh(20_000);
        let n = city_grid_side(20_000);
        assert_eq!(n, 100);
        assert_eq!(m.indices.len() / 3, 2 * n * n);
        assert_eq!(m.positions.len(), (n + 1) * (n + 1));
        assert!(m.indices.iter().all(|&i| (i as usize) < m.positions.len()));
        m.check_materials().unwrap();
        let (min, max) = m.aabb().unwrap();
        assert!((max[0] - 25.0).abs() < 1e-4 && (max[2] - 25.0).abs() < 1e-4);
        assert!(
            min[1] >= -0.05 - 1e-6 && max[1] <= 40.05 + 1e-4,
            "{min:?} {max:?}"
        );
        // (1 m, 1 m) is a street; (10 m, 10 m) the first block's roof.
        let at = |x: f32, z: f32| {
            m.positions
                .iter()
                .find(|p| (p[0] - x).abs() < 1e-4 && (p[2] - z).abs() < 1e-4)
                .unwrap()[1]
        };
        assert!(at(1.0, 1.0).abs() <= 0.05 + 1e-6);
        assert!(at(10.0, 10.0) >= 3.0 - 0.05);
        let again = city_mesh(20_000);
        assert_eq!(again.positions, m.positions);
        assert_eq!(again.images[0].bytes, m.images[0].bytes);
        let tex = image::load_from_memory(&m.images[0].bytes).unwrap();
        assert_eq!((tex.width(), tex.height()), (2048, 2048));
    }

    #[test]
    fn aerial_splats_are_seeded() {
        let a = aerial_splats(100, 3);
        assert_eq!(a.len(), 100);
        assert_eq!(a.sh_coeffs.len(), 100 * 16 * 3);
        assert_eq!(a, aerial_splats(100, 3));
    }
}
