//! Refinement of merged parent levels against the capture's photos: after a level is merged, its
//! splats are optimised for a few hundred steps against the training views with the trainer's
//! own step (render, L1 + D-SSIM, backward, Adam; no densification, so the splat count and the
//! tiles stay as merged).
//!
//! Source: Kerbl et al. 2024, "A Hierarchical 3D Gaussian Representation for Real-Time Rendering
//! of Very Large Datasets", §5 (hierarchy optimisation: interior nodes are optimised against the
//! training images); Brush's LOD refinement (`lod_refine_steps`).
//!
//! At the photos' full resolution: a client shows a parent level at screen resolution, just
//! farther away, and the held-out cuts `eval` scores show it at the photos' resolution. Fitting
//! at a downscaled resolution (1/2 and 1/4 for the first two levels, as Brush's
//! `lod_image_scale`) was measured on the fox retiled at 4,096 splats per leaf: the τ = 64 and
//! τ = 120 cuts lost 0.5 and 0.9 dB against the unrefined merge (splats shrunk to fit the small
//! images leave gaps at full size), while full resolution gained 1.25 and 1.14 dB.
//!
//! Only training views are used (never the held-out ones, which `eval` scores). Views are
//! rendered in the tiles' content frame: each camera is moved by the same rotation as the splats.

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{Camera, RenderOptions, Renderer};
use rand::SeedableRng;

use crate::stages::train::gaussians::Gaussians;
use crate::stages::train::sampler::ViewSampler;
use crate::stages::train::store::{ParamStore, StepInput, Target};
use crate::stages::train::views::ViewCache;
use crate::stages::train::{TrainParams, TrainView};
use crate::{Error, Result};

/// Training views and settings for refining levels.
pub struct LevelRefiner<'a> {
    /// The rasterizer (the job's training device).
    pub renderer: &'a Renderer,
    /// Training views (capture frame), full resolution.
    pub views: &'a [TrainView],
    /// Learning rates, loss weight, background and antialiasing of the training run.
    pub params: &'a TrainParams,
    /// Steps per level.
    pub steps: usize,
    /// Rotation capture frame → content frame (row-major), applied to every camera.
    pub content_from_capture: [[f64; 3]; 3],
    /// Scene extent (metres) the means' learning rate is scaled by, as in training.
    pub scene_extent: f64,
}

/// What one level's refinement did.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LevelRefinement {
    /// Levels above the leaves (1 = the leaves' parents).
    pub levels_above_leaves: u32,
    pub splats: usize,
    pub steps: usize,
    /// Mean photometric loss of the first and last 10 % of the steps.
    pub loss_start: f64,
    pub loss_end: f64,
}

impl LevelRefiner<'_> {
    /// Optimise `level` (the merged splats of every tile at one depth, in the content frame),
    /// `levels_above_leaves` ≥ 1 levels above the leaves, in place.
    ///
    /// # Errors
    /// [`Error::Param`] without views; view loading, rasterizer or numeric errors from the step.
    pub fn refine(
        &self,
        level: &mut GaussianSplats,
        levels_above_leaves: u32,
    ) -> Result<LevelRefinement> {
        if self.views.is_empty() {
            return Err(Error::Param {
                stage: "tile",
                field: "refine".into(),
                expected: "training views to refine parent levels against".into(),
                found: "none".into(),
            });
        }
        // The photos go through the trainer's bounded cache (`train.image_cache_mb`): a large
        // capture does not fit in memory as float images.
        let mut cache = ViewCache::new(self.params.image_cache_mb.saturating_mul(1 << 20));
        let cameras: Vec<Camera> = self
            .views
            .iter()
            .map(|v| self.to_content_frame(&v.camera))
            .collect();
        let sh_degree = level.sh_degree;
        let mut store = ParamStore::new(self.renderer, Gaussians::from_host(level))?;
        let options = RenderOptions {
            background: self.params.background,
            antialiased: self.params.antialiased,
            absgrad: false,
        };
        let mut rng =
            rand::rngs::SmallRng::seed_from_u64(self.params.seed ^ u64::from(levels_above_leaves));
        let mut sampler = ViewSampler::new(self.views.len());
        let mut losses = Vec::with_capacity(self.steps);
        for step in 1..=self.steps {
            let vi = sampler.next(&mut rng);
            let (camera, pixels) = (&cameras[vi], cache.get(vi, &self.views[vi])?);
            // The end of the training schedule: the means' smallest learning rate.
            let lr_means = self.params.lr_means(self.params.steps, self.scene_extent);
            let input = StepInput {
                camera,
                view_index: vi,
                target: &pixels.image,
                target_kind: Target::ViewImage,
                weights: pixels.loss_weights.as_deref(),
                sh_degree,
                options: &options,
                lr_means,
                step,
            };
            let out = store.step(self.renderer, self.params, &input)?;
            if !out.loss.is_finite() {
                return Err(Error::Numeric {
                    stage: "tile",
                    step,
                    problem: format!(
                        "refinement loss is {} (level {levels_above_leaves} above the leaves)",
                        out.loss
                    ),
                });
            }
            losses.push(out.loss);
        }
        let mut refined = store.to_host()?;
        normalise_rotations(&mut refined);
        refined.sh_degree = sh_degree;
        *level = refined;
        let tenth = (losses.len() / 10).max(1);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        Ok(LevelRefinement {
            levels_above_leaves,
            splats: level.len(),
            steps: self.steps,
            loss_start: mean(&losses[..tenth.min(losses.len())]),
            loss_end: mean(&losses[losses.len().saturating_sub(tenth)..]),
        })
    }

    /// `world_to_camera · R⁻¹`: the same camera looking at splats rotated by R.
    fn to_content_frame(&self, c: &Camera) -> Camera {
        let r = self.content_from_capture;
        let mut w = c.world_to_camera;
        for row in w.iter_mut().take(3) {
            let old = [f64::from(row[0]), f64::from(row[1]), f64::from(row[2])];
            for (col, v) in row.iter_mut().take(3).enumerate() {
                // (R⁻¹)[k][col] = R[col][k].
                *v = (0..3).map(|k| old[k] * r[col][k]).sum::<f64>() as f32;
            }
        }
        Camera {
            world_to_camera: w,
            ..*c
        }
    }
}

/// Unit quaternions (the optimiser leaves them unnormalised); the identity for degenerate ones.
fn normalise_rotations(s: &mut GaussianSplats) {
    for q in s.rotations.chunks_exact_mut(4) {
        let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        if n > 1e-12 && n.is_finite() {
            for v in q.iter_mut() {
                *v /= n;
            }
        } else {
            q.copy_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_camera_in_the_content_frame_sees_rotated_splats_where_it_saw_the_originals() {
        let c = Camera {
            width: 8,
            height: 8,
            fx: 8.0,
            fy: 8.0,
            cx: 4.0,
            cy: 4.0,
            world_to_camera: [
                [0.0, -1.0, 0.0, 0.1],
                [0.0, 0.0, -1.0, 0.2],
                [1.0, 0.0, 0.0, 3.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        };
        // Capture +z up → glTF +y up: (x, y, z) → (x, z, −y).
        let r = [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]];
        let params = TrainParams::default();
        let refiner = LevelRefiner {
            renderer: &Renderer::Cpu,
            views: &[],
            params: &params,
            steps: 1,
            content_from_capture: r,
            scene_extent: 1.0,
        };
        let moved = refiner.to_content_frame(&c);
        let p = [0.3f32, -0.7, 1.1];
        let q: [f32; 3] = std::array::from_fn(|i| (0..3).map(|k| r[i][k] as f32 * p[k]).sum());
        let cam = |w: &[[f32; 4]; 4], x: [f32; 3]| -> [f32; 3] {
            std::array::from_fn(|row| (0..3).map(|k| w[row][k] * x[k]).sum::<f32>() + w[row][3])
        };
        let (a, b) = (cam(&c.world_to_camera, p), cam(&moved.world_to_camera, q));
        for i in 0..3 {
            assert!((a[i] - b[i]).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }
}
