//! A parent tile's geometricError, measured by rendering: the parent's content and its children's
//! content (what a client shows once it refines the parent) are rendered from four directions, and
//! the geometricError is the size of one pixel at the finest resolution at which the two renders
//! still match (PSNR ≥ [`MATCH_PSNR_DB`] over the pixels either covers).
//!
//! Why this unit: a 3D Tiles client computes a tile's screen-space error as
//! geometricError · height / (2 · distance · tan(fovy/2)) (OGC 3D Tiles 1.1, 22-025r4,
//! §"Geometric error"; CesiumJS `Cesium3DTile.getScreenSpaceError`), which is geometricError
//! divided by the size of a screen pixel at the tile. With geometricError = the pixel size p* at
//! which the parent matches its children, the screen-space error is "how many times finer than p*
//! the screen is": at τ = 1 a client switches exactly where the switch cannot be seen (to
//! [`MATCH_PSNR_DB`]), and at τ = 16 (CesiumJS's default) where the screen resolves 16× more
//! than that. The old estimate (how far merged splats moved) ignored what the merges did to the
//! picture: colour, coverage and the refinement against photos.
//!
//! Method: each view is a [`PROBE_SIZE_PX`]² pinhole render (field of view [`PROBE_FOV_DEG`]) of
//! the tile's bounding sphere, on black, with the splats' full SH. Coarser resolutions are the
//! same renders box-averaged by 2, 4, …, 64 (a box average is what a finer render looks like
//! from further away). The squared error is pooled over the four views and over the pixels either
//! render covers (alpha > 1/255), so an empty margin does not dilute it. The finest probe size
//! s* whose PSNR and every coarser one's pass is interpolated linearly in log₂ size. Beyond the
//! finest probe the PSNR is extrapolated at the slope of the two finest (1 to 6.02 dB per
//! octave, at most 8 octaves); below the coarsest at 6.02 dB per octave (error amplitude
//! proportional to resolution). p* = 2 · distance · tan(fov/2) / s*.
//!
//! Cost: eight 256² renders per parent (its content and its children's, four directions).

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{RenderOptions, Renderer};

use crate::Result;
use crate::stages::eval::views::look_at;

/// PSNR (dB) at which a parent's render counts as matching its children's.
///
/// Chosen with `kiln eval` on two scenes (2-core CPU): the README fox retiled at 4,096 splats per
/// leaf with refined parents (7 held-out photos; τ = 16 cut against the photos relative to the
/// full leaves, and its bytes fetched) and the PlayCanvas biker (152,746 splats, 16,384 per leaf,
/// no refinement; 8 orbit views at 2× its radius, 512²; τ = 16 against the full splats, and the
/// largest PSNR step between consecutive τ of 16, 32, 64, 120):
///
/// | threshold | 25 dB | 26 dB | 27 dB | 28 dB |
/// |---|---|---|---|---|
/// | fox τ = 16 | −0.36 dB, 1.11 MB | −0.35 dB, 1.17 MB | −0.36 dB, 1.24 MB | −0.18 dB, 1.51 MB |
/// | biker τ = 16 | 29.2 dB, 0.15 MB | 29.6 dB, 0.23 MB | 31.1 dB, 0.46 MB | 33.5 dB, 0.68 MB |
/// | biker largest step | 0 dB | 0.4 dB | 1.9 dB | 3.9 dB |
///
/// 27 dB is the finest that keeps the biker's steps under 2 dB and the fox's τ = 16 cut under
/// the 1.44 MB the grid-merge hierarchy fetched (at −0.37 dB). Lower thresholds make parents
/// count as matching sooner (smaller geometricErrors, coarser cuts).
pub const MATCH_PSNR_DB: f64 = 27.0;
/// Side of the probe renders, pixels.
pub const PROBE_SIZE_PX: u32 = 256;
/// Vertical (and horizontal) field of view of the probe cameras, degrees.
pub const PROBE_FOV_DEG: f64 = 50.0;
/// Probe sizes: PROBE_SIZE_PX / 2^k for k < this (256 … 4 px).
const PROBE_OCTAVES: usize = 7;
/// PSNR change per octave of resolution outside the probed sizes (error ∝ resolution).
const DB_PER_OCTAVE: f64 = 6.02;
/// Smallest PSNR change per octave used when extrapolating from the finest probes.
const MIN_DB_PER_OCTAVE: f64 = 1.0;
/// Alpha above which a pixel counts as covered.
const COVERED_ALPHA: f32 = 1.0 / 255.0;

/// The four probe directions (from the sphere's centre towards the camera): the corners of a
/// tetrahedron, so every surface is seen by at least one of them at 35° or more from edge-on
/// (max |n·d| ≥ 1/√3 for any unit normal n), at two thirds of the cost of six axis views.
const DIRECTIONS: [[f64; 3]; 4] = [
    [1.0, 1.0, 1.0],
    [1.0, -1.0, -1.0],
    [-1.0, 1.0, -1.0],
    [-1.0, -1.0, 1.0],
];

/// What [`measure`] found for one parent.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredError {
    /// geometricError, metres: the pixel size p* at the finest matching probe size.
    pub metres: f64,
    /// PSNR (dB, parent vs children) at each probe size, finest (PROBE_SIZE_PX) first.
    pub psnr_db: Vec<f64>,
}

/// Accumulated squared error and covered pixel count at one probe size.
#[derive(Debug, Clone, Copy, Default)]
struct Pooled {
    squared_error: f64,
    covered: f64,
}

/// Measure the geometricError of `parent` standing for `children` (both in the same frame,
/// metres), inside the sphere `center`, `radius` (metres, > 0). See the module docs.
///
/// # Errors
/// Rasterizer errors ([`crate::Error::Kernel`]).
pub fn measure(
    parent: &GaussianSplats,
    children: &GaussianSplats,
    center: [f64; 3],
    radius: f64,
) -> Result<MeasuredError> {
    let half_fov = (PROBE_FOV_DEG / 2.0).to_radians();
    let distance = radius.max(1e-6) / half_fov.sin();
    let mut pooled = [Pooled::default(); PROBE_OCTAVES];
    for dir in DIRECTIONS {
        let dir = dir.map(|v| v / 3f64.sqrt());
        let eye = std::array::from_fn(|k| center[k] + distance * dir[k]);
        let up = [0.0, 1.0, 0.0];
        let focal = f64::from(PROBE_SIZE_PX) / 2.0 / half_fov.tan();
        let camera = look_at(eye, center, up, PROBE_SIZE_PX, PROBE_SIZE_PX, focal);
        let a = render(parent, &camera)?;
        let b = render(children, &camera)?;
        pool_pyramid(&a, &b, &mut pooled);
    }
    let psnr_db: Vec<f64> = pooled
        .iter()
        .map(|p| {
            if p.covered == 0.0 {
                f64::INFINITY
            } else {
                -10.0 * (p.squared_error / (3.0 * p.covered)).max(1e-12).log10()
            }
        })
        .collect();
    let size = matching_size(&psnr_db);
    Ok(MeasuredError {
        metres: 2.0 * distance * half_fov.tan() / size,
        psnr_db,
    })
}

/// A probe render: `[S, S, 3]` RGB on black and `[S, S]` alpha.
struct Probe {
    rgb: Vec<f32>,
    alpha: Vec<f32>,
}

fn render(splats: &GaussianSplats, camera: &kiln_kernels::Camera) -> Result<Probe> {
    let options = RenderOptions::default();
    if splats.is_empty() {
        let n = (camera.width * camera.height) as usize;
        return Ok(Probe {
            rgb: vec![0.0; 3 * n],
            alpha: vec![0.0; n],
        });
    }
    let out = Renderer::Cpu.forward(
        &kiln_kernels::SplatsRef {
            means: &splats.means,
            log_scales: &splats.log_scales,
            rotations: &splats.rotations,
            logit_opacities: &splats.logit_opacities,
            sh_coeffs: &splats.sh_coeffs,
            sh_degree: splats.sh_degree,
        },
        camera,
        &options,
    )?;
    Ok(Probe {
        rgb: out.image,
        alpha: out.alpha,
    })
}

/// Add the squared error of `a` against `b` at every probe size (box-averaged by 2ᵏ) to `pooled`.
fn pool_pyramid(a: &Probe, b: &Probe, pooled: &mut [Pooled; PROBE_OCTAVES]) {
    let mut size = PROBE_SIZE_PX as usize;
    let (mut a, mut b) = (
        (a.rgb.clone(), a.alpha.clone()),
        (b.rgb.clone(), b.alpha.clone()),
    );
    for level in pooled.iter_mut() {
        for p in 0..size * size {
            if a.1[p] > COVERED_ALPHA || b.1[p] > COVERED_ALPHA {
                level.covered += 1.0;
                level.squared_error += (0..3)
                    .map(|c| {
                        let d = f64::from(a.0[3 * p + c].clamp(0.0, 1.0))
                            - f64::from(b.0[3 * p + c].clamp(0.0, 1.0));
                        d * d
                    })
                    .sum::<f64>();
            }
        }
        a = halve(&a, size);
        b = halve(&b, size);
        size /= 2;
    }
}

/// 2×2 box average of an `[S, S, 3]` image and its `[S, S]` alpha.
fn halve((rgb, alpha): &(Vec<f32>, Vec<f32>), size: usize) -> (Vec<f32>, Vec<f32>) {
    let half = size / 2;
    let mut out_rgb = vec![0.0; 3 * half * half];
    let mut out_alpha = vec![0.0; half * half];
    for y in 0..half {
        for x in 0..half {
            let src = [
                2 * y * size + 2 * x,
                2 * y * size + 2 * x + 1,
                (2 * y + 1) * size + 2 * x,
                (2 * y + 1) * size + 2 * x + 1,
            ];
            let o = y * half + x;
            out_alpha[o] = src.iter().map(|&s| alpha[s]).sum::<f32>() / 4.0;
            for c in 0..3 {
                out_rgb[3 * o + c] = src.iter().map(|&s| rgb[3 * s + c]).sum::<f32>() / 4.0;
            }
        }
    }
    (out_rgb, out_alpha)
}

/// The finest probe size (pixels, fractional) at which the PSNR reaches [`MATCH_PSNR_DB`] while
/// every coarser size does too; `psnr_db` is finest first (module docs).
fn matching_size(psnr_db: &[f64]) -> f64 {
    let sizes: Vec<f64> = (0..psnr_db.len())
        .map(|k| f64::from(PROBE_SIZE_PX) / f64::from(1u32 << k))
        .collect();
    let coarsest = psnr_db.len() - 1;
    if psnr_db[coarsest] < MATCH_PSNR_DB {
        // Even the coarsest probe differs: extrapolate to coarser sizes.
        let octaves = (MATCH_PSNR_DB - psnr_db[coarsest]) / DB_PER_OCTAVE;
        return sizes[coarsest] / octaves.exp2();
    }
    // Walk from coarse to fine while the sizes match.
    for k in (0..coarsest).rev() {
        if psnr_db[k] < MATCH_PSNR_DB {
            let (fine, coarse) = (psnr_db[k], psnr_db[k + 1]);
            let t = if coarse.is_finite() {
                ((coarse - MATCH_PSNR_DB) / (coarse - fine)).clamp(0.0, 1.0)
            } else {
                1.0
            };
            return sizes[k + 1] * t.exp2();
        }
    }
    // Every probe matches: extrapolate to finer sizes at the slope of the two finest probes
    // (bounded: an exact copy has infinite PSNR).
    let slope = if psnr_db[1].is_finite() && psnr_db[0].is_finite() {
        (psnr_db[1] - psnr_db[0]).clamp(MIN_DB_PER_OCTAVE, DB_PER_OCTAVE)
    } else {
        DB_PER_OCTAVE
    };
    let octaves = ((psnr_db[0] - MATCH_PSNR_DB) / slope).min(8.0);
    sizes[0] * octaves.exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flat `side_m` square in the z = 0 plane tiled by round splats `cell_m` apart, coloured
    /// as a checkerboard of `period_m` (black and white cells, SH degree 0).
    fn checkerboard(side_m: f32, cell_m: f32, period_m: f32) -> GaussianSplats {
        let mut s = GaussianSplats::default();
        let n = (side_m / cell_m).round() as i32;
        for i in 0..n {
            for j in 0..n {
                let (x, y) = (
                    (i as f32 + 0.5) * cell_m - side_m / 2.0,
                    (j as f32 + 0.5) * cell_m - side_m / 2.0,
                );
                let white = (((x + side_m) / (period_m / 2.0)).floor() as i32
                    + ((y + side_m) / (period_m / 2.0)).floor() as i32)
                    % 2
                    == 0;
                s.means.extend_from_slice(&[x, y, 0.0]);
                let sigma = (0.6 * cell_m).ln();
                s.log_scales
                    .extend_from_slice(&[sigma, sigma, (0.01 * cell_m).ln()]);
                s.rotations.extend_from_slice(&[1.0, 0.0, 0.0, 0.0]);
                s.logit_opacities.push(5.0);
                // DC coefficient for colour c: (c − 0.5) / C0.
                let dc = if white { 0.5 } else { -0.5 } / 0.282_094_8;
                s.sh_coeffs.extend_from_slice(&[dc, dc, dc]);
            }
        }
        s
    }

    /// The same square as one splat per `cell_m` of the mean grey.
    fn grey(side_m: f32, cell_m: f32) -> GaussianSplats {
        let mut s = checkerboard(side_m, cell_m, 1e6);
        s.sh_coeffs.fill(0.0);
        s
    }

    #[test]
    fn a_parent_identical_to_its_children_has_an_error_below_the_finest_probe_pixel() {
        let children = checkerboard(1.0, 0.02, 0.2);
        let m = measure(&children, &children, [0.0; 3], 0.75).unwrap();
        let pixel_m = 2.0 * 0.75 / (PROBE_FOV_DEG / 2.0).to_radians().sin()
            * (PROBE_FOV_DEG / 2.0).to_radians().tan()
            / f64::from(PROBE_SIZE_PX);
        assert!(
            m.metres < pixel_m,
            "{} vs one probe pixel {pixel_m}",
            m.metres
        );
        assert!(m.psnr_db.iter().all(|p| *p > 60.0), "{:?}", m.psnr_db);
    }

    #[test]
    fn the_error_of_a_grey_parent_grows_with_the_detail_it_drops() {
        // A grey parent matches a checkerboard once the board's cells are below a pixel: the
        // measured error scales with the period (hand estimate: 27 dB against a ±0.5 board is
        // reached when a pixel averages a few periods, so p* is of the order of the period).
        let fine = measure(
            &grey(1.0, 0.01),
            &checkerboard(1.0, 0.01, 0.04),
            [0.0; 3],
            0.75,
        )
        .unwrap();
        let coarse = measure(
            &grey(1.0, 0.01),
            &checkerboard(1.0, 0.01, 0.16),
            [0.0; 3],
            0.75,
        )
        .unwrap();
        assert!(
            (0.01..0.2).contains(&fine.metres),
            "fine board: {} m ({:?})",
            fine.metres,
            fine.psnr_db
        );
        let ratio = coarse.metres / fine.metres;
        assert!(
            (2.5..6.0).contains(&ratio),
            "a 4× coarser board should give about a 4× larger error: {} / {} m",
            coarse.metres,
            fine.metres
        );
    }

    #[test]
    fn matching_size_interpolates_between_probes_and_extrapolates_outside() {
        let sizes = |k: usize| f64::from(PROBE_SIZE_PX) / f64::from(1u32 << k);
        // Crossing halfway (in dB) between the 64 px (k = 2) and 32 px (k = 3) probes.
        let psnr = [20.0, 22.0, 25.0, 29.0, 33.0, 37.0, 41.0];
        let s = matching_size(&psnr);
        assert!((s - sizes(3) * 2f64.powf(0.5)).abs() < 1e-9, "{s}");
        // Every probe matches: the finest slope (3 dB per octave) carries it on.
        let psnr = [30.0, 33.0, 36.0, 39.0, 42.0, 45.0, 48.0];
        assert!((matching_size(&psnr) - sizes(0) * 2.0).abs() < 1e-9);
        // Even the coarsest differs: 6.02 dB per octave below it.
        let psnr = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 20.98];
        assert!((matching_size(&psnr) - sizes(6) / 2.0).abs() < 1e-9);
    }
}
