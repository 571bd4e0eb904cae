//! Parent content of the splat hierarchy: a set of splats reduced to a target count by merging
//! the most similar neighbours in pairs, round after round.
//!
//! Sources: Kerbl et al. 2024, "A Hierarchical 3D Gaussian Representation for Real-Time Rendering
//! of Very Large Datasets", §4 (a merged Gaussian is the mass-weighted mean and covariance of its
//! parts, mass = opacity × area); Spark 2 `bhatt-lod` (sparkjsdev/spark
//! `rust/spark-lib/src/bhatt_lod.rs`, read in shared/research/splat-delivery.md §2.1): pair each
//! splat with its most similar neighbour in the 3×3×3 grid cells around it, similarity from the
//! Bhattacharyya coefficient and the colour difference. Bhattacharyya distance between Gaussians:
//! D = ⅛ Δμᵀ Σ̄⁻¹ Δμ + ½ ln(det Σ̄ / √(det Σ₁ det Σ₂)), Σ̄ = (Σ₁ + Σ₂)/2, BC = e^−D.
//!
//! Kiln's choices, each tested below:
//! - cost of a pair = merged area × (D + [`COLOUR_WEIGHT`]·|Δrgb|²): small, overlapping, same-coloured
//!   splats merge first, so what disappears first is what becomes sub-pixel first;
//! - never across surfaces: two flat splats (thinnest axis < [`FLAT_RATIO`] of the middle one)
//!   whose normals differ by more than 60°, or that lie apart mostly along their normal by more
//!   than three times their thicknesses (front and back of a thin object), are not merged;
//! - opacity from coverage, not capped: the merged mass is the pair's combined coverage
//!   α₁A₁ + α₂A₂ − α₁α₂·½BC²·min(A₁, A₂) (the overlap is not counted twice); when that needs an
//!   opacity above [`MAX_OPACITY`], the merged Gaussian is widened until it covers the mass
//!   instead of dropping it (clipping is what made the old parents see-through);
//! - colour is the mass-weighted mean of the SH, so a merge never darkens.
//!
//! What a merge costs on screen is measured afterwards, by rendering ([`super::error`]).
//!
//! NaN/Inf: inputs are finite (the tiler checks them); degenerate covariances are floored at
//! [`MIN_VARIANCE_M2`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use kiln_formats::rotation::{quaternion_to_rotation, rotation_to_quaternion};
use kiln_formats::splats::GaussianSplats;
use rayon::prelude::*;

/// The most opacity a merged splat gets; beyond it the splat is widened.
pub const MAX_OPACITY: f64 = 0.99;
/// Weight of the squared colour difference (RGB in [0, 1]) in a pair's cost: a difference of
/// 0.1 (25 of 255 levels) weighs as much as two neighbours half a standard deviation apart.
pub const COLOUR_WEIGHT: f64 = 50.0;
/// A splat is flat (a surface element with a normal) when its thinnest standard deviation is
/// below this fraction of the middle one.
pub const FLAT_RATIO: f64 = 0.3;
/// Smallest variance (m²) of any axis, so coincident or flat splats stay invertible: (1 µm)².
pub const MIN_VARIANCE_M2: f64 = 1e-12;
/// Nearest neighbours considered per splat.
const NEIGHBOURS: usize = 8;
/// Merge rounds before giving up on reaching the target (each round at most halves the count).
const MAX_ROUNDS: usize = 12;
/// SH band-0 constant: colour = C0·dc + 0.5.
const SH_C0: f64 = 0.282_094_791_773_878_1;

/// Splats being merged, in f64. `sh` is `[N, K·3]`.
#[derive(Debug, Clone, Default)]
pub struct MergeSet {
    pub means: Vec<[f64; 3]>,
    /// Covariances (xx, xy, xz, yy, yz, zz), m².
    pub covs: Vec<[f64; 6]>,
    pub opacities: Vec<f64>,
    pub sh: Vec<f32>,
    /// SH floats per splat, K·3.
    pub k3: usize,
    pub sh_degree: u32,
}

impl MergeSet {
    /// N.
    #[must_use]
    pub fn len(&self) -> usize {
        self.means.len()
    }

    /// True when N = 0.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// An empty set for splats of `sh_degree`.
    #[must_use]
    pub fn with_degree(sh_degree: u32) -> Self {
        let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
        Self {
            k3: k * 3,
            sh_degree,
            ..Default::default()
        }
    }

    /// Add splats.
    pub fn extend_from(&mut self, s: &GaussianSplats) {
        for i in 0..s.len() {
            let mean = std::array::from_fn(|a| f64::from(s.means[i * 3 + a]));
            let r =
                quaternion_to_rotation(std::array::from_fn(|k| f64::from(s.rotations[i * 4 + k])))
                    .unwrap_or([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]);
            let var: [f64; 3] = std::array::from_fn(|a| {
                (2.0 * f64::from(s.log_scales[i * 3 + a]))
                    .exp()
                    .max(MIN_VARIANCE_M2)
            });
            let c = |p: usize, q: usize| (0..3).map(|k| r[p][k] * var[k] * r[q][k]).sum::<f64>();
            self.means.push(mean);
            self.covs
                .push([c(0, 0), c(0, 1), c(0, 2), c(1, 1), c(1, 2), c(2, 2)]);
            self.opacities
                .push(1.0 / (1.0 + (-f64::from(s.logit_opacities[i])).exp()));
            self.sh
                .extend_from_slice(&s.sh_coeffs[i * self.k3..(i + 1) * self.k3]);
        }
    }

    fn push_from(&mut self, other: &MergeSet, i: usize) {
        self.means.push(other.means[i]);
        self.covs.push(other.covs[i]);
        self.opacities.push(other.opacities[i]);
        self.sh
            .extend_from_slice(&other.sh[i * self.k3..(i + 1) * self.k3]);
    }

    /// As splats (scales and rotation from each covariance's eigenvectors).
    #[must_use]
    pub fn to_splats(&self) -> GaussianSplats {
        // Each covariance's eigen-decomposition, in parallel: (log-scales, wxyz rotation).
        let shapes: Vec<([f32; 3], [f32; 4])> = self
            .covs
            .par_iter()
            .map(|c| {
                let m = [[c[0], c[1], c[2]], [c[1], c[3], c[4]], [c[2], c[4], c[5]]];
                let (lambda, mut vecs) = eigen_symmetric3(m);
                if det3(&vecs) < 0.0 {
                    for row in &mut vecs {
                        row[2] = -row[2];
                    }
                }
                (
                    lambda.map(|l| (0.5 * l.max(MIN_VARIANCE_M2).ln()) as f32),
                    rotation_to_quaternion(vecs).map(|v| v as f32),
                )
            })
            .collect();
        let n = self.len();
        let mut out = GaussianSplats {
            sh_degree: self.sh_degree,
            means: Vec::with_capacity(3 * n),
            log_scales: Vec::with_capacity(3 * n),
            rotations: Vec::with_capacity(4 * n),
            logit_opacities: Vec::with_capacity(n),
            sh_coeffs: self.sh.clone(),
        };
        for (i, (log_scales, rotation)) in shapes.into_iter().enumerate() {
            out.means.extend(self.means[i].map(|v| v as f32));
            out.log_scales.extend(log_scales);
            out.rotations.extend(rotation);
            let a = self.opacities[i].clamp(1e-6, 1.0 - 1e-6);
            out.logit_opacities.push((a / (1.0 - a)).ln() as f32);
        }
        out
    }
}

/// Per-splat shape facts used by the pair rules, computed once per round.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Unit normal (axis of the smallest variance).
    normal: [f64; 3],
    /// Smallest and middle standard deviations, metres.
    thin: f64,
    mid: f64,
    /// ln det Σ (floored), which every pair cost of this splat needs.
    ln_det: f64,
}

impl Shape {
    fn of(c: &[f64; 6]) -> Self {
        let [smallest, middle, _] = eigenvalues_symmetric3(c);
        Self {
            normal: eigenvector_of_smallest(c, smallest),
            thin: smallest.max(MIN_VARIANCE_M2).sqrt(),
            mid: middle.max(MIN_VARIANCE_M2).sqrt(),
            ln_det: ln_det(c),
        }
    }

    fn is_flat(&self) -> bool {
        self.thin < FLAT_RATIO * self.mid
    }
}

/// Whether merging splats with shapes `a`, `b` and mean offset `d` would join two surfaces:
/// flat splats whose normals differ by more than 60°, or that are apart mostly along their
/// normal by more than three times their thicknesses.
fn across_surfaces(a: &Shape, b: &Shape, d: [f64; 3]) -> bool {
    if !(a.is_flat() && b.is_flat()) {
        return false;
    }
    let dot = dot3(a.normal, b.normal);
    if dot.abs() < 0.5 {
        return true;
    }
    let s = dot.signum();
    let n = normalize(std::array::from_fn(|k| a.normal[k] + s * b.normal[k]));
    let along = dot3(d, n).abs();
    let across = (dot3(d, d) - along * along).max(0.0).sqrt();
    along > 3.0 * (a.thin + b.thin) && along > across
}

/// Area proxy of a covariance, m²: √(λ₁λ₂ + λ₁λ₃ + λ₂λ₃) (the sum of the principal 2×2 minors),
/// which is the product of the two largest standard deviations for a flat Gaussian and smooth for
/// every shape.
fn area(c: &[f64; 6]) -> f64 {
    let minors = c[0] * c[3] - c[1] * c[1] + c[0] * c[5] - c[2] * c[2] + c[3] * c[5] - c[4] * c[4];
    minors.max(MIN_VARIANCE_M2 * MIN_VARIANCE_M2).sqrt()
}

fn det_sym(c: &[f64; 6]) -> f64 {
    c[0] * (c[3] * c[5] - c[4] * c[4]) - c[1] * (c[1] * c[5] - c[4] * c[2])
        + c[2] * (c[1] * c[4] - c[3] * c[2])
}

/// ln det Σ, with det floored at the smallest positive f64.
fn ln_det(c: &[f64; 6]) -> f64 {
    det_sym(c).max(f64::MIN_POSITIVE).ln()
}

/// Bhattacharyya distance between N(μa, Σa) and N(μb, Σb) (module docs), given ln det Σa and
/// ln det Σb.
fn bhattacharyya(d: [f64; 3], ca: &[f64; 6], cb: &[f64; 6], ln_da: f64, ln_db: f64) -> f64 {
    let m: [f64; 6] = std::array::from_fn(|k| 0.5 * (ca[k] + cb[k]));
    let det = det_sym(&m).max(f64::MIN_POSITIVE);
    // Adjugate of the symmetric m, for m⁻¹·d.
    let inv = [
        m[3] * m[5] - m[4] * m[4],
        m[2] * m[4] - m[1] * m[5],
        m[1] * m[4] - m[2] * m[3],
        m[0] * m[5] - m[2] * m[2],
        m[1] * m[2] - m[0] * m[4],
        m[0] * m[3] - m[1] * m[1],
    ];
    let q = (d[0] * (inv[0] * d[0] + inv[1] * d[1] + inv[2] * d[2])
        + d[1] * (inv[1] * d[0] + inv[3] * d[1] + inv[4] * d[2])
        + d[2] * (inv[2] * d[0] + inv[4] * d[1] + inv[5] * d[2]))
        / det;
    0.125 * q.max(0.0) + 0.5 * (det.ln() - 0.5 * (ln_da + ln_db)).max(0.0)
}

/// The overlap ∫G₁G₂ of two Gaussian footprints with peak 1, in the units of [`area`] (where a
/// footprint's own integral is its area): exactly A·BC²/2 for equal covariances (∫ over the
/// plane of two Gaussians of variance σ² at distance d is πσ²·e^(−d²/4σ²), BC = e^(−d²/8σ²));
/// the smaller area stands in for A when they differ. So the coverage of two layers,
/// α₁A₁ + α₂A₂ − α₁α₂·overlap, is the integral of 1 − (1 − α₁G₁)(1 − α₂G₂).
fn overlap(bc: f64, smaller_area: f64) -> f64 {
    0.5 * bc * bc * smaller_area
}

/// The merge of splats `i` and `j` of `s`: (mean, covariance, opacity); the SH go to `sh_out`.
fn merge_pair(
    s: &MergeSet,
    i: usize,
    j: usize,
    sh_out: &mut Vec<f32>,
) -> ([f64; 3], [f64; 6], f64) {
    let (ca, cb) = (&s.covs[i], &s.covs[j]);
    let (aa, ab) = (area(ca), area(cb));
    let (oa, ob) = (s.opacities[i], s.opacities[j]);
    let (ma, mb) = (oa * aa, ob * ab);
    let wa = if ma + mb > 0.0 { ma / (ma + mb) } else { 0.5 };
    let wb = 1.0 - wa;
    let mean: [f64; 3] = std::array::from_fn(|k| wa * s.means[i][k] + wb * s.means[j][k]);
    let da: [f64; 3] = std::array::from_fn(|k| s.means[i][k] - mean[k]);
    let db: [f64; 3] = std::array::from_fn(|k| s.means[j][k] - mean[k]);
    const SYM: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];
    let mut cov: [f64; 6] = std::array::from_fn(|k| {
        let (p, q) = SYM[k];
        wa * (ca[k] + da[p] * da[q]) + wb * (cb[k] + db[p] * db[q])
    });
    let d: [f64; 3] = std::array::from_fn(|k| s.means[i][k] - s.means[j][k]);
    let bc = (-bhattacharyya(d, ca, cb, ln_det(ca), ln_det(cb))).exp();
    let mass = (ma + mb - oa * ob * overlap(bc, aa.min(ab))).max(0.0);
    let mut opacity = mass / area(&cov);
    if opacity > MAX_OPACITY {
        // Widen (area ∝ the covariance's scale) until the coverage fits at MAX_OPACITY.
        let f = opacity / MAX_OPACITY;
        for v in &mut cov {
            *v *= f;
        }
        opacity = MAX_OPACITY;
    }
    let k3 = s.k3;
    sh_out.extend(
        s.sh[i * k3..(i + 1) * k3]
            .iter()
            .zip(&s.sh[j * k3..(j + 1) * k3])
            .map(|(x, y)| (wa * f64::from(*x) + wb * f64::from(*y)) as f32),
    );
    (mean, cov, opacity.max(1e-6))
}

/// The cost of merging `i` and `j` (module docs), `None` when the rules forbid it.
fn pair_cost(s: &MergeSet, shapes: &[Shape], i: usize, j: usize) -> Option<f64> {
    let d: [f64; 3] = std::array::from_fn(|k| s.means[j][k] - s.means[i][k]);
    if across_surfaces(&shapes[i], &shapes[j], d) {
        return None;
    }
    let (ca, cb) = (&s.covs[i], &s.covs[j]);
    let b = bhattacharyya(d, ca, cb, shapes[i].ln_det, shapes[j].ln_det);
    let k3 = s.k3;
    let dc: f64 = (0..3)
        .map(|c| (SH_C0 * f64::from(s.sh[i * k3 + c] - s.sh[j * k3 + c])).powi(2))
        .sum();
    // Area of the unwidened merge (equal weights: a cheap stand-in for the mass weights).
    let merged: [f64; 6] = {
        const SYM: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];
        std::array::from_fn(|k| {
            let (p, q) = SYM[k];
            0.5 * (ca[k] + cb[k]) + 0.25 * d[p] * d[q]
        })
    };
    Some(area(&merged) * (b + COLOUR_WEIGHT * dc))
}

/// Cell coordinates are packed into one `u64` as 21 bits per axis (two's complement, wrapped):
/// cells 2²¹ apart share a key, which only adds candidates (distances are exact).
const AXIS_BITS: u32 = 21;
const AXIS_MASK: u64 = (1 << AXIS_BITS) - 1;

/// The packed key of cell (x, y, z), ordered by x, then y, then z.
fn pack(c: [i64; 3]) -> u64 {
    ((c[0] as u64 & AXIS_MASK) << (2 * AXIS_BITS))
        | ((c[1] as u64 & AXIS_MASK) << AXIS_BITS)
        | (c[2] as u64 & AXIS_MASK)
}

/// A Fibonacci hash for packed cell keys: one multiply and a fold; the keys are hashed millions of times
/// per level, and SipHash's protection against adversarial keys buys nothing here.
#[derive(Default, Clone, Copy)]
struct CellHasher(u64);

impl Hasher for CellHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        // The product's high half mixes every key bit; fold it into the low bits, which the
        // table uses as the bucket index.
        let h = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type CellBuild = BuildHasherDefault<CellHasher>;

/// Splats bucketed in a uniform grid: `order` lists the splat indices sorted by packed cell key,
/// `sorted` their means in that order (a cell's splats are read from contiguous memory), and
/// `cells` maps each occupied key to its range in both.
struct Grid {
    cell_m: f64,
    order: Vec<u32>,
    sorted: Vec<[f64; 3]>,
    cells: HashMap<u64, (u32, u32), CellBuild>,
}

impl Grid {
    fn coords(&self, p: &[f64; 3]) -> [i64; 3] {
        std::array::from_fn(|a| (p[a] / self.cell_m).floor() as i64)
    }

    fn new(means: &[[f64; 3]], cell_m: f64) -> Self {
        let mut grid = Self {
            cell_m,
            order: Vec::new(),
            sorted: Vec::new(),
            cells: HashMap::default(),
        };
        let mut keyed: Vec<(u64, u32)> = means
            .par_iter()
            .enumerate()
            .map(|(i, p)| (pack(grid.coords(p)), i as u32))
            .collect();
        keyed.par_sort_unstable();
        grid.cells.reserve(keyed.len() / 2);
        let mut start = 0;
        for k in 1..=keyed.len() {
            if k == keyed.len() || keyed[k].0 != keyed[start].0 {
                grid.cells.insert(keyed[start].0, (start as u32, k as u32));
                start = k;
            }
        }
        grid.order = keyed.into_iter().map(|(_, i)| i).collect();
        grid.sorted = grid.order.par_iter().map(|&i| means[i as usize]).collect();
        grid
    }
}

/// Up to [`NEIGHBOURS`] nearest other splats of each splat, found in the 2×2×2 grid cells around
/// it (cell edge `cell_m`, about four splats per cell), as a flat `[N, NEIGHBOURS]` table with the count found per splat (ties
/// in distance go to the smaller index).
struct Neighbours {
    ids: Vec<u32>,
    counts: Vec<u8>,
}

impl Neighbours {
    fn of(&self, i: usize) -> &[u32] {
        &self.ids[i * NEIGHBOURS..i * NEIGHBOURS + usize::from(self.counts[i])]
    }
}

fn neighbours(means: &[[f64; 3]], cell_m: f64) -> Neighbours {
    let grid = Grid::new(means, cell_m);
    // Splats in cell order, so that consecutive queries read the same cells.
    let found: Vec<([u32; NEIGHBOURS], u8)> = (0..grid.order.len())
        .into_par_iter()
        .map(|k| nearest_in_grid(&grid, k))
        .collect();
    let mut out = Neighbours {
        ids: vec![0; means.len() * NEIGHBOURS],
        counts: vec![0; means.len()],
    };
    for (&i, (ids, count)) in grid.order.iter().zip(found) {
        let i = i as usize;
        out.ids[i * NEIGHBOURS..(i + 1) * NEIGHBOURS].copy_from_slice(&ids);
        out.counts[i] = count;
    }
    out
}

/// The nearest [`NEIGHBOURS`] other splats of the splat at position `at` of the grid's order, in
/// the 2×2×2 cells around it. Approximate (a nearer splat just outside the block is missed): the
/// 3×3×3 block scans 3.3× as many candidates and took 2.4× as long on 1 M splats, for parent
/// tiles of the fox (4,096 per leaf) within 0.1 % of the same bytes.
fn nearest_in_grid(grid: &Grid, at: usize) -> ([u32; NEIGHBOURS], u8) {
    let p = &grid.sorted[at];
    let c = grid.coords(p);
    // The 2×2×2 cells around the point: its own and, per axis, the neighbour on the side of the
    // cell it lies in, so the block reaches at least half a cell beyond it in every direction.
    let side: [i64; 3] = std::array::from_fn(|a| {
        if p[a] / grid.cell_m - c[a] as f64 >= 0.5 {
            1
        } else {
            -1
        }
    });
    // Best so far, sorted by (distance², index).
    let mut best = [(f64::INFINITY, u32::MAX); NEIGHBOURS];
    let mut count = 0usize;
    for dx in [0, side[0]] {
        for dy in [0, side[1]] {
            for dz in [0, side[2]] {
                let Some(&(start, end)) = grid.cells.get(&pack([c[0] + dx, c[1] + dy, c[2] + dz]))
                else {
                    continue;
                };
                let range = start as usize..end as usize;
                for (k, (&j, q)) in range
                    .clone()
                    .zip(grid.order[range.clone()].iter().zip(&grid.sorted[range]))
                {
                    if k == at {
                        continue;
                    }
                    let d2 = (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2);
                    let cand = (d2, j);
                    let last = best[NEIGHBOURS - 1];
                    if count == NEIGHBOURS && (cand.0, cand.1) >= (last.0, last.1) {
                        continue;
                    }
                    // Insertion into the sorted list.
                    let mut k = count.min(NEIGHBOURS - 1);
                    while k > 0 && (best[k - 1].0, best[k - 1].1) > (cand.0, cand.1) {
                        best[k] = best[k - 1];
                        k -= 1;
                    }
                    best[k] = cand;
                    count = (count + 1).min(NEIGHBOURS);
                }
            }
        }
    }
    (best.map(|b| b.1), count as u8)
}

/// A grid cell edge (metres) at which the splats' non-empty cells hold about `per_cell` splats
/// each: starting from the edge at which the set would fill its bounding box's largest face
/// (splats lie on surfaces), corrected by the measured occupancy (a volume fills more cells, a
/// line fewer) a few times; at least 1 µm.
fn cell_size(means: &[[f64; 3]], per_cell: f64) -> f64 {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in means {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    let mut e: [f64; 3] = std::array::from_fn(|a| (hi[a] - lo[a]).max(1e-6));
    e.sort_by(f64::total_cmp);
    let mut cell = (e[1] * e[2] * per_cell / means.len().max(1) as f64)
        .sqrt()
        .max(1e-6);
    for _ in 0..3 {
        let occupied = occupied_cells(means, cell);
        let occupancy = means.len() as f64 / occupied.max(1) as f64;
        if (0.5 * per_cell..=2.0 * per_cell).contains(&occupancy) {
            break;
        }
        // Occupancy grows between linearly (a line) and cubically (a volume) with the edge.
        cell *= (per_cell / occupancy).sqrt();
    }
    cell.max(1e-6)
}

/// How many grid cells of edge `cell_m` hold at least one of `means`.
fn occupied_cells(means: &[[f64; 3]], cell_m: f64) -> usize {
    let mut keys: Vec<u64> = means
        .par_iter()
        .map(|p| pack(std::array::from_fn(|a| (p[a] / cell_m).floor() as i64)))
        .collect();
    keys.par_sort_unstable();
    keys.dedup();
    keys.len()
}

/// Merge `set` down to at most `target` splats (≥ 1), most similar pairs first (module docs).
/// Stops above the target when no allowed pair is left within reach (the search grid is widened
/// 4× up to four times before giving up). Deterministic.
#[must_use]
pub fn merge_to(set: MergeSet, target: usize) -> MergeSet {
    let target = target.max(1);
    if set.len() <= target {
        return set;
    }
    let first = cell_size(&set.means, 4.0);
    let mut set = in_morton_order(set, first);
    let mut cell = Some(first);
    let mut widenings = 0;
    for _ in 0..MAX_ROUNDS {
        if set.len() <= target {
            break;
        }
        let edge = *cell.get_or_insert_with(|| cell_size(&set.means, 4.0));
        let merged = merge_round(&set, set.len() - target, edge);
        if merged.len() == set.len() {
            // Nothing within reach: look further (isolated splats), a few times.
            widenings += 1;
            if widenings > 4 {
                break;
            }
            cell = Some(edge * 4.0);
            continue;
        }
        set = merged;
        cell = None;
    }
    set
}

/// `set` permuted into the Morton (Z-order) of its grid cells of edge `cell_m`, so that
/// neighbours in space are near in memory through every round (each round keeps the order).
fn in_morton_order(set: MergeSet, cell_m: f64) -> MergeSet {
    let mut lo = [f64::INFINITY; 3];
    for p in &set.means {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
        }
    }
    let mut keyed: Vec<(u64, u32)> = set
        .means
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let c: [u64; 3] =
                std::array::from_fn(|a| (((p[a] - lo[a]) / cell_m) as u64).min(AXIS_MASK));
            (
                spread_bits(c[0]) << 2 | spread_bits(c[1]) << 1 | spread_bits(c[2]),
                i as u32,
            )
        })
        .collect();
    keyed.par_sort_unstable();
    let mut out = MergeSet::with_degree(set.sh_degree);
    out.means.reserve(set.len());
    out.covs.reserve(set.len());
    out.opacities.reserve(set.len());
    out.sh.reserve(set.sh.len());
    for &(_, i) in &keyed {
        out.push_from(&set, i as usize);
    }
    out
}

/// The low 21 bits of `v` spread to every third bit (bit k to bit 3k), for Morton keys.
fn spread_bits(v: u64) -> u64 {
    let mut x = v & AXIS_MASK;
    x = (x | x << 32) & 0x001f_0000_0000_ffff;
    x = (x | x << 16) & 0x001f_0000_ff00_00ff;
    x = (x | x << 8) & 0x100f_00f0_0f00_f00f;
    x = (x | x << 4) & 0x10c3_0c30_c30c_30c3;
    x = (x | x << 2) & 0x1249_2492_4924_9249;
    x
}

/// One round: greedy matching of the cheapest allowed pairs, at most `max_merges` of them.
fn merge_round(set: &MergeSet, max_merges: usize, cell_m: f64) -> MergeSet {
    let shapes: Vec<Shape> = set.covs.par_iter().map(Shape::of).collect();
    let near = neighbours(&set.means, cell_m);
    // Each pair once, as one sortable key: the cost's bits (a non-negative f64 orders as its
    // bits) above the two indices, so ties go to the smaller indices and the order (and the
    // result) does not depend on thread timing; sorting plain integers is 1.7× faster than
    // comparing (cost, a, b) tuples.
    let mut edges: Vec<u128> = (0..set.len())
        .into_par_iter()
        .flat_map_iter(|i| {
            let (near, shapes) = (&near, &shapes);
            near.of(i).iter().filter_map(move |&j| {
                let (a, b) = if (i as u32) < j {
                    (i as u32, j)
                } else {
                    (j, i as u32)
                };
                // From its smaller index, or from the larger when the smaller does not list it.
                if a as usize != i && near.of(a as usize).contains(&b) {
                    return None;
                }
                let cost = pair_cost(set, shapes, a as usize, b as usize)?;
                Some(u128::from(cost_bits(cost)) << 64 | u128::from(a) << 32 | u128::from(b))
            })
        })
        .collect();
    edges.par_sort_unstable();
    // Greedy matching, cheapest first; then the output in input order (a merged pair at its
    // smaller index), which keeps a spatially ordered set spatially ordered for the next round.
    let mut partner = vec![u32::MAX; set.len()];
    let mut merges = 0;
    for &key in &edges {
        if merges == max_merges {
            break;
        }
        let (a, b) = ((key >> 32) as u32 as usize, key as u32 as usize);
        if partner[a] != u32::MAX || partner[b] != u32::MAX {
            continue;
        }
        partner[a] = b as u32;
        partner[b] = a as u32;
        merges += 1;
    }
    let mut out = MergeSet::with_degree(set.sh_degree);
    for (i, &j) in partner.iter().enumerate() {
        if j == u32::MAX {
            out.push_from(set, i);
        } else if j as usize > i {
            let (mean, cov, opacity) = merge_pair(set, i, j as usize, &mut out.sh);
            out.means.push(mean);
            out.covs.push(cov);
            out.opacities.push(opacity);
        }
    }
    out
}

/// A pair cost as an integer of the same order: costs are ≥ 0 (areas times non-negative
/// distances), and the bits of a non-negative f64 order as the number does (−0.0 and NaN, which
/// cannot occur, go first and last).
fn cost_bits(cost: f64) -> u64 {
    if cost > 0.0 {
        cost.to_bits()
    } else if cost.is_nan() {
        u64::MAX
    } else {
        0
    }
}

fn dot3(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn norm3(a: [f64; 3]) -> f64 {
    dot3(a, a).sqrt()
}

fn normalize(a: [f64; 3]) -> [f64; 3] {
    let n = norm3(a).max(1e-300);
    a.map(|v| v / n)
}

fn det3(m: &[[f64; 3]; 3]) -> f64 {
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
}

/// Eigenvalues of the symmetric 3×3 `c` (xx, xy, xz, yy, yz, zz), ascending, in closed form
/// (the trigonometric solution of the characteristic cubic: Smith 1961, "Eigenvalues of a
/// symmetric 3 × 3 matrix", CACM 4(4)). Absolute error about ε·λ_max, which is all the pair rules
/// need (they compare standard deviations at ratios of 0.3 and 3); a fifth of the cost of
/// [`eigen_symmetric3`], which runs once per splat per merge round.
fn eigenvalues_symmetric3(c: &[f64; 6]) -> [f64; 3] {
    let q = (c[0] + c[3] + c[5]) / 3.0;
    let off = c[1] * c[1] + c[2] * c[2] + c[4] * c[4];
    let (d0, d1, d2) = (c[0] - q, c[3] - q, c[5] - q);
    let p2 = d0 * d0 + d1 * d1 + d2 * d2 + 2.0 * off;
    if p2 <= f64::MIN_POSITIVE {
        return [q; 3];
    }
    let p = (p2 / 6.0).sqrt();
    // det((A − qI)/p) / 2 = cos 3φ.
    let b = [d0 / p, c[1] / p, c[2] / p, d1 / p, c[4] / p, d2 / p];
    let r = (0.5 * det_sym(&b)).clamp(-1.0, 1.0);
    let phi = r.acos() / 3.0;
    let largest = q + 2.0 * p * phi.cos();
    let smallest = q + 2.0 * p * (phi + 2.0 * std::f64::consts::FRAC_PI_3).cos();
    [smallest, 3.0 * q - largest - smallest, largest]
}

/// A unit eigenvector of the symmetric 3×3 `c` for its eigenvalue `lambda`: the longest cross
/// product of two rows of c − λI (each row is orthogonal to the eigenvector). Well conditioned
/// when `lambda` is apart from the other eigenvalues, which holds for flat splats, the only ones
/// whose normal is used; an arbitrary unit vector when c − λI vanishes.
fn eigenvector_of_smallest(c: &[f64; 6], lambda: f64) -> [f64; 3] {
    let rows = [
        [c[0] - lambda, c[1], c[2]],
        [c[1], c[3] - lambda, c[4]],
        [c[2], c[4], c[5] - lambda],
    ];
    let candidates = [
        cross3(rows[0], rows[1]),
        cross3(rows[0], rows[2]),
        cross3(rows[1], rows[2]),
    ];
    let best = candidates
        .into_iter()
        .max_by(|a, b| dot3(*a, *a).total_cmp(&dot3(*b, *b)))
        .unwrap_or([0.0, 0.0, 1.0]);
    if dot3(best, best) > 0.0 {
        normalize(best)
    } else {
        [0.0, 0.0, 1.0]
    }
}

fn cross3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// Eigen-decomposition of a symmetric 3×3 by cyclic Jacobi rotations: eigenvalues and the
/// matrix whose columns are the matching unit eigenvectors (A = V·diag(λ)·Vᵀ).
pub(super) fn eigen_symmetric3(mut a: [[f64; 3]; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let mut v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    for _ in 0..50 {
        let off = a[0][1].powi(2) + a[0][2].powi(2) + a[1][2].powi(2);
        let diag = a[0][0].powi(2) + a[1][1].powi(2) + a[2][2].powi(2);
        if off <= 1e-30 * diag || off == 0.0 {
            break;
        }
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            if a[p][q] == 0.0 {
                continue;
            }
            let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
            let t = if theta >= 0.0 { 1.0 } else { -1.0 }
                / (theta.abs() + (theta * theta + 1.0).sqrt());
            let c = 1.0 / (t * t + 1.0).sqrt();
            let s = t * c;
            for row in &mut a {
                let (akp, akq) = (row[p], row[q]);
                row[p] = c * akp - s * akq;
                row[q] = s * akp + c * akq;
            }
            // Rows p < q, side by side.
            let (upper, lower) = a.split_at_mut(q);
            for (apk, aqk) in upper[p].iter_mut().zip(lower[0].iter_mut()) {
                let (x, y) = (*apk, *aqk);
                *apk = c * x - s * y;
                *aqk = s * x + c * y;
            }
            for row in &mut v {
                let (vp, vq) = (row[p], row[q]);
                row[p] = c * vp - s * vq;
                row[q] = s * vp + c * vq;
            }
        }
    }
    ([a[0][0], a[1][1], a[2][2]], v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One splat: mean, scales (m), wxyz rotation, opacity, DC colour.
    fn splat(
        s: &mut GaussianSplats,
        mean: [f32; 3],
        scales: [f32; 3],
        rot: [f32; 4],
        opacity: f32,
        dc: [f32; 3],
    ) {
        s.means.extend(mean);
        s.log_scales.extend(scales.map(f32::ln));
        s.rotations.extend(rot);
        s.logit_opacities.push((opacity / (1.0 - opacity)).ln());
        s.sh_coeffs.extend(dc);
    }

    fn set_of(s: &GaussianSplats) -> MergeSet {
        let mut m = MergeSet::with_degree(s.sh_degree);
        m.extend_from(s);
        m
    }

    const ID: [f32; 4] = [1.0, 0.0, 0.0, 0.0];
    /// 90° about x: the z axis (thin) becomes y.
    const ROT_X90: [f32; 4] = [
        std::f32::consts::FRAC_1_SQRT_2,
        std::f32::consts::FRAC_1_SQRT_2,
        0.0,
        0.0,
    ];

    #[test]
    fn two_splats_facing_apart_are_not_merged() {
        let mut s = GaussianSplats::default();
        // Two discs at a right angle (normals z and y), touching.
        splat(
            &mut s,
            [0.0, 0.0, 0.0],
            [0.1, 0.1, 0.001],
            ID,
            0.9,
            [0.5; 3],
        );
        splat(
            &mut s,
            [0.05, 0.0, 0.0],
            [0.1, 0.1, 0.001],
            ROT_X90,
            0.9,
            [0.5; 3],
        );
        assert_eq!(merge_to(set_of(&s), 1).len(), 2);
    }

    #[test]
    fn front_and_back_of_a_thin_object_are_not_merged() {
        let mut s = GaussianSplats::default();
        // Parallel discs 5 cm apart along their normal, each 1 mm thick: two sides of a slab.
        splat(
            &mut s,
            [0.0, 0.0, 0.0],
            [0.02, 0.02, 0.001],
            ID,
            0.9,
            [0.9, 0.2, 0.2],
        );
        splat(
            &mut s,
            [0.0, 0.0, 0.05],
            [0.02, 0.02, 0.001],
            ID,
            0.9,
            [0.2, 0.2, 0.9],
        );
        assert_eq!(merge_to(set_of(&s), 1).len(), 2);
    }

    #[test]
    fn a_merged_pair_covers_the_pair_and_keeps_its_colour() {
        let mut s = GaussianSplats::default();
        // Two side-by-side opaque discs on one surface, the same colour.
        splat(
            &mut s,
            [0.0, 0.0, 0.0],
            [0.1, 0.1, 0.002],
            ID,
            0.95,
            [0.8, 0.4, 0.1],
        );
        splat(
            &mut s,
            [0.2, 0.0, 0.0],
            [0.1, 0.1, 0.002],
            ID,
            0.95,
            [0.8, 0.4, 0.1],
        );
        let m = merge_to(set_of(&s), 1);
        assert_eq!(m.len(), 1);
        // Colour kept exactly (no darkening).
        assert_eq!(&m.sh[..3], &[0.8, 0.4, 0.1]);
        // Coverage (opacity × area) is the pair's union, ∫1 − (1 − αG₁)(1 − αG₂) (hand
        // calculation: 2αA − α²·A/2·e^(−d²/4σ²) with A = 0.01 m², d = 2σ): nothing is lost to an
        // opacity cap.
        let covered = m.opacities[0] * area(&m.covs[0]);
        let union = 2.0 * 0.95 * 0.01 - 0.95 * 0.95 * 0.005 * (-1.0f64).exp();
        assert!((covered / union - 1.0).abs() < 0.01, "{covered} vs {union}");
        // And it spans both: its standard deviation along x is at least the offset's half.
        assert!(m.covs[0][0].sqrt() >= 0.1, "{:?}", m.covs[0]);
    }

    #[test]
    fn coincident_opaque_splats_merge_into_the_same_splat() {
        let mut s = GaussianSplats::default();
        splat(
            &mut s,
            [1.0, 2.0, 3.0],
            [0.1, 0.2, 0.01],
            ID,
            0.99,
            [0.1, 0.2, 0.3],
        );
        splat(
            &mut s,
            [1.0, 2.0, 3.0],
            [0.1, 0.2, 0.01],
            ID,
            0.99,
            [0.1, 0.2, 0.3],
        );
        let m = merge_to(set_of(&s), 1);
        let out = m.to_splats();
        let mut scales: Vec<f32> = out.log_scales.iter().map(|v| v.exp()).collect();
        scales.sort_by(f32::total_cmp);
        // Two stacked layers of 0.99 cover 1.5× one layer's integral (the union's profile is
        // fuller), so the merge widens by at most √1.5 per axis, and keeps the place and shape.
        for (g, e) in scales.iter().zip([0.01, 0.1, 0.2]) {
            let k = g / e;
            assert!((1.0..=1.23).contains(&k), "{scales:?}");
        }
        assert_eq!(&out.means[..], &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn merging_reaches_the_target_on_a_surface_and_prefers_near_similar_pairs() {
        let mut s = GaussianSplats::default();
        for i in 0..40 {
            for j in 0..40 {
                let red = if i < 20 { 0.9 } else { 0.1 };
                splat(
                    &mut s,
                    [i as f32 * 0.01, j as f32 * 0.01, 0.0],
                    [0.006, 0.006, 0.0005],
                    ID,
                    0.8,
                    [red, 0.3, 0.3],
                );
            }
        }
        let m = merge_to(set_of(&s), 400);
        assert!(m.len() <= 400, "{}", m.len());
        // With room to choose (a third of the pairs merged), no pair mixes the two halves.
        let m = merge_to(set_of(&s), 1000);
        assert_eq!(m.len(), 1000);
        // No merged splat mixes the red and the blue halves.
        for i in 0..m.len() {
            let r = m.sh[i * 3];
            assert!(!(0.15..=0.85).contains(&r), "mixed colour {r}");
        }
    }

    #[test]
    fn closed_form_shape_agrees_with_jacobi() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        for case in 0..2000 {
            // Random rotation and scales over six orders of magnitude, flat ones included.
            let q: [f64; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let r = quaternion_to_rotation(q).unwrap_or([
                [1.0, 0.0, 0.0],
                [0.0, 1.0, 0.0],
                [0.0, 0.0, 1.0],
            ]);
            let var: [f64; 3] = std::array::from_fn(|_| 10f64.powf(rng.random_range(-8.0..-2.0)));
            let c = |p: usize, q: usize| (0..3).map(|k| r[p][k] * var[k] * r[q][k]).sum::<f64>();
            let cov = [c(0, 0), c(0, 1), c(0, 2), c(1, 1), c(1, 2), c(2, 2)];
            let m = [
                [cov[0], cov[1], cov[2]],
                [cov[1], cov[3], cov[4]],
                [cov[2], cov[4], cov[5]],
            ];
            let (l, v) = eigen_symmetric3(m);
            let mut order = [0usize, 1, 2];
            order.sort_by(|&a, &b| l[a].total_cmp(&l[b]));
            let fast = eigenvalues_symmetric3(&cov);
            let largest = l[order[2]];
            for k in 0..3 {
                assert!(
                    (fast[k] - l[order[k]]).abs() <= 1e-9 * largest,
                    "case {case}: {fast:?} vs {l:?}"
                );
            }
            let shape = Shape::of(&cov);
            if shape.is_flat() {
                let n = [v[0][order[0]], v[1][order[0]], v[2][order[0]]];
                assert!(
                    dot3(n, shape.normal).abs() > 1.0 - 1e-6,
                    "case {case}: normal {:?} vs {n:?}",
                    shape.normal
                );
            }
        }
    }

    #[test]
    fn spread_bits_puts_bit_k_at_bit_3k() {
        for k in 0..21 {
            assert_eq!(spread_bits(1 << k), 1 << (3 * k));
        }
        assert_eq!(spread_bits(AXIS_MASK), 0x1249_2492_4924_9249);
    }
}
