//! Parent tile content built bottom-up from merge-grid moments, so that each original splat is
//! visited once however deep the octree is.
//!
//! A parent's content is one moment-matched Gaussian per non-empty cell of a
//! [`MERGE_GRID_CELLS`]³ grid over its cube (see the module doc of `tile/splat`). Moment matching
//! (Kerbl et al. 2024 §4) only needs sums over the cell's splats — total weight W = Σwᵢ, first
//! moment Σwᵢ(μᵢ − a) and second moment Σwᵢ(Σᵢ + (μᵢ − a)(μᵢ − a)ᵀ) about an anchor a, and Σwᵢ·shᵢ —
//! and a child's cell is exactly one eighth of its parent's cell (half the edge, aligned), so a
//! parent's sums are its children's sums moved to the parent cell's anchor by the parallel-axis
//! shift (Chan, Golub & LeVeque 1979, pairwise update). Only the level right above the leaves
//! reads original splats; every level above combines ≤ 8 × 4096 cells.
//!
//! Anchors are cell corners, so |μᵢ − a| is at most a cell diagonal and the final
//! `S₂/W − μμᵀ` keeps its precision far from the origin.
//!
//! Weights: wᵢ = mᵢ = αᵢ·areaᵢ clamped to [`f64::MIN_POSITIVE`, 1e300], so a cell whose splats all
//! have zero mass falls back to equal weights (as `merge_group` does) while the reported mass stays
//! the true Σmᵢ.

use kiln_formats::splats::GaussianSplats;

use super::{MERGE_GRID_CELLS, Node, area_of, gaussian_from_moments, quat_to_matrix, sigmoid};

/// Cells per grid.
const CELLS: usize = (MERGE_GRID_CELLS * MERGE_GRID_CELLS * MERGE_GRID_CELLS) as usize;

/// Largest weight of one splat (keeps sums finite for absurd scales).
const MAX_WEIGHT: f64 = 1e300;

/// Moment sums of every cell of one node's merge grid, one contiguous record per cell (the
/// accumulation touches one record per splat, so the record's fields share cache lines):
/// `[W, M, first(3), second(6), sh(K·3)]` with W = Σwᵢ, M = Σmᵢ (unclamped masses, m²),
/// first = Σwᵢ(μᵢ − a) (metres), second = Σwᵢ(Σᵢ + dᵢdᵢᵀ) as (xx, xy, xz, yy, yz, zz) (m²),
/// sh = Σwᵢ·shᵢ.
pub(super) struct Grid {
    /// SH floats per splat, K·3.
    k3: usize,
    /// Node cube minimum corner (training frame, metres) and cell edge (metres).
    min: [f64; 3],
    cell: f64,
    /// `[CELLS, RECORD + K·3]`.
    data: Vec<f64>,
}

/// Offsets in a cell record.
const W: usize = 0;
const MASS: usize = 1;
const FIRST: usize = 2;
const SECOND: usize = 5;
const SH: usize = 11;

/// Index pairs of the six stored entries of a symmetric 3×3.
const SYM: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];

impl Grid {
    /// An empty grid over `node`'s cube.
    pub(super) fn new(node: &Node, k3: usize) -> Grid {
        Grid {
            k3,
            min: node.min,
            cell: node.edge / f64::from(MERGE_GRID_CELLS),
            data: vec![0.0; CELLS * (SH + k3)],
        }
    }

    fn record(&self, key: usize) -> &[f64] {
        let len = SH + self.k3;
        &self.data[key * len..(key + 1) * len]
    }

    fn record_mut(&mut self, key: usize) -> &mut [f64] {
        let len = SH + self.k3;
        &mut self.data[key * len..(key + 1) * len]
    }

    fn coords(key: usize) -> [usize; 3] {
        let n = MERGE_GRID_CELLS as usize;
        [key % n, (key / n) % n, key / (n * n)]
    }

    fn key(c: [usize; 3]) -> usize {
        let n = MERGE_GRID_CELLS as usize;
        c[0] + n * (c[1] + n * c[2])
    }

    /// Minimum corner of cell `key`, metres.
    fn corner(&self, key: usize) -> [f64; 3] {
        let c = Self::coords(key);
        std::array::from_fn(|a| self.min[a] + c[a] as f64 * self.cell)
    }

    /// Add original splat `i` of `s` to the cell holding its mean.
    pub(super) fn add_splat(&mut self, s: &GaussianSplats, i: usize) {
        let last = MERGE_GRID_CELLS as i64 - 1;
        let p: [f64; 3] = std::array::from_fn(|a| f64::from(s.means[i * 3 + a]));
        // Clamped to ≥ 0 first, truncation is floor (and avoids a libm call per axis).
        let key = Self::key(std::array::from_fn(|a| {
            ((p[a] - self.min[a]) / self.cell).clamp(0.0, last as f64) as usize
        }));
        let anchor = self.corner(key);
        let log_scales = &s.log_scales[i * 3..i * 3 + 3];
        let scales: [f64; 3] = std::array::from_fn(|a| f64::from(log_scales[a]).exp());
        let m = sigmoid(s.logit_opacities[i]) * area_of(scales);
        let w = if m.is_nan() {
            f64::MIN_POSITIVE
        } else {
            m.clamp(f64::MIN_POSITIVE, MAX_WEIGHT)
        };
        let r = quat_to_matrix(&s.rotations[i * 4..i * 4 + 4]);
        let var: [f64; 3] = scales.map(|v| v * v);
        let d: [f64; 3] = std::array::from_fn(|a| p[a] - anchor[a]);
        let k3 = self.k3;
        let rec = self.record_mut(key);
        rec[W] += w;
        rec[MASS] += m;
        for a in 0..3 {
            rec[FIRST + a] += w * d[a];
        }
        for (e, &(row, col)) in SYM.iter().enumerate() {
            let own: f64 = (0..3).map(|k| r[row][k] * var[k] * r[col][k]).sum();
            rec[SECOND + e] += w * (own + d[row] * d[col]);
        }
        for (acc, v) in rec[SH..].iter_mut().zip(&s.sh_coeffs[i * k3..(i + 1) * k3]) {
            *acc += w * f64::from(*v);
        }
    }

    /// Add the sums of `child`, a grid over one octant of this grid's cube (half the edge): each
    /// child cell lies inside one of this grid's cells.
    pub(super) fn add_child(&mut self, child: &Grid) {
        let last = MERGE_GRID_CELLS as i64 - 1;
        let offset: [i64; 3] =
            std::array::from_fn(|a| ((child.min[a] - self.min[a]) / self.cell).round() as i64);
        for ckey in 0..CELLS {
            let src = child.record(ckey);
            let w = src[W];
            if w == 0.0 {
                continue;
            }
            let c = Self::coords(ckey);
            let key = Self::key(std::array::from_fn(|a| {
                (offset[a] + (c[a] / 2) as i64).clamp(0, last) as usize
            }));
            let from = child.corner(ckey);
            let to = self.corner(key);
            // Parallel-axis shift of the sums from the child's anchor to ours.
            let delta: [f64; 3] = std::array::from_fn(|a| from[a] - to[a]);
            let s1: [f64; 3] = std::array::from_fn(|a| src[FIRST + a]);
            let dst = self.record_mut(key);
            for (e, &(row, col)) in SYM.iter().enumerate() {
                dst[SECOND + e] += src[SECOND + e]
                    + s1[row] * delta[col]
                    + delta[row] * s1[col]
                    + w * delta[row] * delta[col];
            }
            for a in 0..3 {
                dst[FIRST + a] += s1[a] + w * delta[a];
            }
            dst[W] += w;
            dst[MASS] += src[MASS];
            for (acc, v) in dst[SH..].iter_mut().zip(&src[SH..]) {
                *acc += v;
            }
        }
    }

    /// One moment-matched Gaussian per non-empty cell, cells in x-fastest order.
    pub(super) fn to_splats(&self, sh_degree: u32) -> GaussianSplats {
        let mut out = GaussianSplats {
            sh_degree,
            ..Default::default()
        };
        for key in 0..CELLS {
            let rec = self.record(key);
            let w = rec[W];
            if w == 0.0 {
                continue;
            }
            let mu: [f64; 3] = std::array::from_fn(|a| rec[FIRST + a] / w);
            let mut cov = [[0.0; 3]; 3];
            for (e, &(row, col)) in SYM.iter().enumerate() {
                let v = rec[SECOND + e] / w - mu[row] * mu[col];
                cov[row][col] = v;
                cov[col][row] = v;
            }
            let anchor = self.corner(key);
            let sh = rec[SH..].iter().map(|v| v / w).collect();
            let m = gaussian_from_moments(
                rec[MASS],
                std::array::from_fn(|a| anchor[a] + mu[a]),
                cov,
                sh,
            );
            out.means.extend(m.mean.map(|v| v as f32));
            out.log_scales.extend_from_slice(&m.log_scales);
            out.rotations.extend_from_slice(&m.rotation);
            out.logit_opacities.push(m.logit_opacity);
            out.sh_coeffs.extend_from_slice(&m.sh);
        }
        out
    }
}
