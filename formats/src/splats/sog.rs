//! PlayCanvas SOG ("Spatially Ordered Gaussians", meta.json `version: 2`): read and write, as an
//! unbundled folder (`meta.json` beside its WebP images) or a bundled `.sog` (a ZIP of the same
//! files, entries stored uncompressed as splat-transform writes them; DEFLATE entries, as general
//! ZIP tools write, are read too).
//!
//! Source: the layout below was read from PlayCanvas splat-transform `src/lib/writers/write-sog.ts`
//! (commit 8d6b801, with `src/lib/ops/morton-order.ts` and `src/lib/spatial/quantize-1d-core.ts`
//! and `k-means.ts`) and checked against the PlayCanvas engine reader
//! (`src/scene/gsplat/gsplat-sog-data.js`, shader chunk `gsplat/vert/formats/sog.js`, commit
//! 0aaef5e); developer.playcanvas.com "SOG format". The code here is Kiln's own.
//!
//! Layout. Texel i of every per-splat image holds splat i in Morton order (10 bits per axis over
//! the scene's bounding box, x in the lowest bit; buckets of more than 256 splats sharing a code
//! are re-sorted within their own box). Images are W × H with W = ⌈√N / 4⌉·4 and
//! H = ⌈N / W / 4⌉·4 (WebP caps both at 16383); texels past N are zero. All images are lossless
//! RGBA WebP.
//!
//! | file | RGB | A |
//! |---|---|---|
//! | `means_l.webp`, `means_u.webp` | low / high byte of the 16-bit position per axis | 255 |
//! | `quats.webp` | the three smaller quaternion components | 252 + index (wxyz) of the dropped one |
//! | `scales.webp` | per-axis index into `scales.codebook` (natural-log scales) | 255 |
//! | `sh0.webp` | per-channel index into `sh0.codebook` (`f_dc`) | round(255 · opacity) |
//! | `shN_labels.webp` | R, G: 16-bit palette index (low, high); B 0 | 255 |
//! | `shN_centroids.webp` | palette: 64 entries per row, K − 1 texels each, RGB = channel, index into `shN.codebook` | 255 |
//!
//! Positions: t = sign(x)·ln(|x| + 1) per axis, mapped linearly between the per-axis min and max
//! of t (stored in `meta.json` `means.mins` / `means.maxs`) onto 0..=65535. Rotations: the unit
//! quaternion (wxyz) is flipped so its largest-magnitude component is positive, that component is
//! dropped, and the other three (each in ±1/√2) are stored as round(255 · (√2·c·0.5 + 0.5)).
//! Scales, DC colour and the SH palette values each go through one 256-entry scalar codebook
//! shared by all their columns. Opacity is stored linearly (sigmoid, not logit).
//!
//! Where Kiln differs from splat-transform, and why the files still read the same: Kiln rounds to
//! the nearest byte / 16-bit step where splat-transform truncates (halves the worst-case error,
//! same decoder). The 1-D codebooks use the same method (a weighted histogram of 1024 bins whose
//! positions blend value and rank, weights count^0.5, then optimal 1-D k-means on the bins by
//! dynamic programming) but solve the DP with the divide-and-conquer split search, valid because
//! the 1-D SSE cost satisfies the quadrangle inequality (Grønlund et al., "Fast exact k-means,
//! k-medians and Bregman divergence clustering in 1D", 2017); ties may pick a different but
//! equally good codebook. The SH palette is Lloyd k-means (palette size
//! min(64, 2^⌊log₂(N/1024)⌋)·1024, [`SogOptions::kmeans_iterations`] rounds, 10 by default like
//! splat-transform's `-i`; tree-structured above [`FLAT_KMEANS_MAX_PAIRS`], see [`tree_kmeans`]),
//! seeded from [`SogOptions::seed`] instead of `Math.random`, so the
//! output is a pure function of the input and the options.
//!
//! NaN and ±Inf are refused by the writer (naming the field and splat); a zero quaternion is
//! refused too (it has no orientation to store).

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use self::palette::{FilePalette, PaletteIndex};
use super::placed::{PlacedRef, PlacedSplats};
use super::{GaussianSplats, domain, logit, sigmoid};
use crate::atomic_write::write_atomic_with;
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

mod palette;
pub use palette::{PALETTE_FIT_MAX_ROWS, ShPalette};

/// The SOG `meta.json` version Kiln reads and writes.
pub const SOG_VERSION: u32 = 2;

/// Largest WebP width or height (the format's 14-bit dimension fields).
const WEBP_MAX_DIM: usize = 16383;

/// Entries in every scalar codebook (one byte per index).
const CODEBOOK_LEN: usize = 256;

/// Palette entries per row of `shN_centroids.webp` (fixed by the engine's shader).
const CENTROIDS_PER_ROW: usize = 64;

/// Histogram bins of the 1-D quantiser (splat-transform's H; more bins only refine a codebook
/// that has 256 entries anyway).
const QUANTIZE_BINS: usize = 1024;

/// Density exponent of the 1-D quantiser's bin weights: 0.5 lets sparse tails pull centroids
/// towards them (1.0 would be plain MSE, where the dense middle takes every entry).
const QUANTIZE_ALPHA: f64 = 0.5;

/// Buckets of splats sharing one 30-bit Morton code larger than this are re-sorted inside their
/// own bounding box (splat-transform's threshold, so both give the same order).
const MORTON_REFINE_ABOVE: usize = 256;

/// Logit written for opacity bytes 0 and 255 (sigmoid(±40) rounds to 0 and 1 in f32), the
/// PlayCanvas engine's choice when it turns SOG back into PLY.
const OPACITY_LOGIT_LIMIT: f32 = 40.0;

/// Image file names, as meta.json lists them.
const MEANS_L: &str = "means_l.webp";
const MEANS_U: &str = "means_u.webp";
const QUATS: &str = "quats.webp";
const SCALES: &str = "scales.webp";
const SH0: &str = "sh0.webp";
const SHN_CENTROIDS: &str = "shN_centroids.webp";
const SHN_LABELS: &str = "shN_labels.webp";

/// How [`write()`] encodes. `Default`: 10 k-means rounds, seed 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SogOptions {
    /// Lloyd iterations of the SH palette k-means (splat-transform's `-i`, default 10). 0 keeps
    /// the seeded initial palette (fast, coarse).
    pub kmeans_iterations: u32,
    /// Seed of the palette initialisation and of re-seeding empty clusters; the same input,
    /// options and seed always give the same files (on every thread count).
    pub seed: u64,
    /// Entries of the SH palette, 1 ..= 65536 (16-bit labels); `None` takes splat-transform's
    /// size for the splat count ([`sh_palette_size`]: 8192 for 15,105 splats, 65536 from 64 K
    /// splats). Smaller palettes cost SH fidelity and save bytes on small scenes, where the
    /// palette dominates: plush-dog's 8192-entry palette is 57 % of its SOG.
    pub sh_palette: Option<usize>,
}

/// Largest SH palette a SOG can address (labels are 16-bit).
pub const MAX_SH_PALETTE: usize = 1 << 16;

impl Default for SogOptions {
    fn default() -> Self {
        Self {
            kmeans_iterations: 10,
            seed: 0,
            sh_palette: None,
        }
    }
}

/// `meta.json` as splat-transform writes it (version 2). Unknown keys (`model`, future
/// additions) are ignored on read.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SogMeta {
    version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    asset: Option<serde_json::Value>,
    count: usize,
    means: MeansMeta,
    scales: CodebookMeta,
    quats: FilesMeta,
    sh0: CodebookMeta,
    #[serde(rename = "shN", default, skip_serializing_if = "Option::is_none")]
    sh_n: Option<ShNMeta>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MeansMeta {
    mins: [f64; 3],
    maxs: [f64; 3],
    files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CodebookMeta {
    codebook: Vec<f32>,
    files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FilesMeta {
    files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ShNMeta {
    count: usize,
    bands: u32,
    codebook: Vec<f32>,
    files: Vec<String>,
}

/// Where a SOG lives: a `.sog` ZIP bundle, or a `meta.json` (any `*.json` name) with its images
/// in the same folder.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SogContainer {
    Bundle(PathBuf),
    Folder { meta: PathBuf },
}

impl SogContainer {
    /// `.sog` → bundle; `*.json` → that file; anything else is a folder holding `meta.json`.
    fn from_path(path: &Path) -> Self {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if name.ends_with(".sog") && !path.is_dir() {
            Self::Bundle(path.to_path_buf())
        } else if name.ends_with(".json") {
            Self::Folder {
                meta: path.to_path_buf(),
            }
        } else {
            Self::Folder {
                meta: path.join("meta.json"),
            }
        }
    }
}

/// Texture size for N splats: W = ⌈√N / 4⌉·4, H = ⌈N / W / 4⌉·4 (splat-transform's choice;
/// multiples of 4 for block-based GPU upload).
fn texture_size(n: usize) -> (usize, usize) {
    let w = ((n as f64).sqrt() / 4.0).ceil() as usize * 4;
    let h = (n as f64 / w as f64 / 4.0).ceil() as usize * 4;
    (w, h)
}

/// Number of palette entries the SH k-means uses for N splats:
/// min(64, 2^⌊log₂(N/1024)⌋)·1024 (so 512 for N = 1000, 65536 from N = 65536 up), never more than N.
fn sh_palette_size(n: usize) -> usize {
    let e = (n as f64 / 1024.0).log2().floor();
    let size = (2f64.powf(e).min(64.0) * 1024.0) as usize;
    size.clamp(1, n.max(1))
}

/// sign(x)·ln(|x| + 1), the SOG position transform (odd, monotone, exact near 0).
fn log_transform(x: f64) -> f64 {
    x.signum() * (x.abs() + 1.0).ln()
}

/// Inverse of [`log_transform`]: sign(t)·(e^|t| − 1).
fn inverse_log_transform(t: f64) -> f64 {
    t.signum() * (t.abs().exp() - 1.0)
}

/// Spread the low 10 bits of `v` to every third bit (bit i → bit 3i).
fn part1by2(v: u32) -> u32 {
    let mut v = v & 0x3ff;
    v = (v ^ (v << 16)) & 0xff00_00ff;
    v = (v ^ (v << 8)) & 0x0300_f00f;
    v = (v ^ (v << 4)) & 0x030c_30c3;
    v = (v ^ (v << 2)) & 0x0924_9249;
    v
}

/// 30-bit Morton code of three 10-bit cells, x in bit 0, y in bit 1, z in bit 2.
fn morton3(x: u32, y: u32, z: u32) -> u32 {
    (part1by2(z) << 2) | (part1by2(y) << 1) | part1by2(x)
}

/// Sort `order` (splat indices) into Morton order of `means` `[N, 3]`: 1024 cells per axis over
/// the bounding box of the splats in `order`, ties kept in input order, and buckets of more than
/// [`MORTON_REFINE_ABOVE`] equal codes re-sorted over their own box. Identical points stay as
/// they are.
fn sort_morton(means: &[f32], order: &mut [u32]) {
    if order.is_empty() {
        return;
    }
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for &g in order.iter() {
        for a in 0..3 {
            let v = means[g as usize * 3 + a] as f64;
            lo[a] = lo[a].min(v);
            hi[a] = hi[a].max(v);
        }
    }
    let len = [hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]];
    if len.iter().all(|&l| l == 0.0) || len.iter().any(|l| !l.is_finite()) {
        return;
    }
    let mul = len.map(|l| if l == 0.0 { 0.0 } else { 1024.0 / l });
    let cell = |g: u32, a: usize| -> u32 {
        ((means[g as usize * 3 + a] as f64 - lo[a]) * mul[a]).min(1023.0) as u32
    };
    let mut keyed: Vec<(u32, u32)> = order
        .iter()
        .map(|&g| (morton3(cell(g, 0), cell(g, 1), cell(g, 2)), g))
        .collect();
    keyed.sort_by_key(|&(code, _)| code); // stable: ties keep input order
    for (slot, &(_, g)) in order.iter_mut().zip(&keyed) {
        *slot = g;
    }
    let mut start = 0;
    while start < keyed.len() {
        let mut end = start + 1;
        while end < keyed.len() && keyed[end].0 == keyed[start].0 {
            end += 1;
        }
        if end - start > MORTON_REFINE_ABOVE {
            sort_morton(means, &mut order[start..end]);
        }
        start = end;
    }
}

/// Smallest-three encoding of a quaternion `q` (wxyz, any non-zero length): RGB bytes of the
/// three kept components in wxyz order and the alpha byte 252 + index of the dropped (largest
/// magnitude; the first on ties) component.
fn encode_quat(q: [f32; 4]) -> [u8; 4] {
    let q = q.map(|v| v as f64);
    let len = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let mut largest = 0;
    for i in 1..4 {
        if q[i].abs() > q[largest].abs() {
            largest = i;
        }
    }
    let s = if q[largest] < 0.0 { -1.0 } else { 1.0 } * std::f64::consts::SQRT_2 / len;
    let mut out = [0u8; 4];
    let mut c = 0;
    for (i, v) in q.iter().enumerate() {
        if i != largest {
            out[c] = (255.0 * (v * s * 0.5 + 0.5)).round().clamp(0.0, 255.0) as u8;
            c += 1;
        }
    }
    out[3] = 252 + largest as u8;
    out
}

/// Inverse of [`encode_quat`]: unit quaternion wxyz; `None` when the alpha byte is not 252..=255.
fn decode_quat(t: [u8; 4]) -> Option<[f32; 4]> {
    let largest = t[3].checked_sub(252).filter(|&m| m < 4)? as usize;
    let abc = [t[0], t[1], t[2]].map(|b| (b as f64 / 255.0 - 0.5) * std::f64::consts::SQRT_2);
    let d = (1.0 - abc.iter().map(|v| v * v).sum::<f64>())
        .max(0.0)
        .sqrt();
    let mut q = [0f32; 4];
    let mut c = 0;
    for (i, slot) in q.iter_mut().enumerate() {
        if i == largest {
            *slot = d as f32;
        } else {
            *slot = abc[c] as f32;
            c += 1;
        }
    }
    Some(q)
}

/// A 256-entry scalar codebook for `values` (all finite), sorted ascending and padded with its
/// last entry, and the nearest-entry index of every value.
///
/// Method (splat-transform's `quantize1d`): sort; bin into H = min(1024, n) bins whose position
/// blends rank and value, bin = ⌊H·(β·i/n + (1 − β)·(v − min)/range)⌋ with β = clamp(1 − IQR/range,
/// 0.5, 0.999); weight each bin by count^[`QUANTIZE_ALPHA`] at its mean value; choose ≤ 256
/// contiguous bin groups minimising the weighted SSE (exact DP); the codebook is the group means.
fn quantize_1d(values: &[f32]) -> (Vec<f32>, Vec<u8>) {
    let n = values.len();
    let mut sorted: Vec<f32> = values.to_vec();
    sorted.par_sort_unstable_by(f32::total_cmp);
    let (vmin, vmax) = (sorted[0] as f64, sorted[n - 1] as f64);
    let range = vmax - vmin;
    let centroids: Vec<f64> = if range < 1e-20 {
        vec![vmin]
    } else {
        let h = QUANTIZE_BINS.min(n);
        let iqr = sorted[n * 3 / 4] as f64 - sorted[n / 4] as f64;
        let beta = (1.0 - iqr / range).clamp(0.5, 0.999);
        let mut counts = vec![0f64; h];
        let mut sums = vec![0f64; h];
        for (i, &v) in sorted.iter().enumerate() {
            let pos = beta * (i as f64 / n as f64) + (1.0 - beta) * ((v as f64 - vmin) / range);
            let bin = ((h as f64 * pos) as usize).min(h - 1);
            counts[bin] += 1.0;
            sums[bin] += v as f64;
        }
        // Only occupied bins take part: an empty bin has weight 0 and cannot move a centroid.
        let bins: Vec<(f64, f64)> = counts
            .iter()
            .zip(&sums)
            .filter(|(c, _)| **c > 0.0)
            .map(|(c, s)| (s / c, c.powf(QUANTIZE_ALPHA)))
            .collect();
        optimal_1d_kmeans(&bins, CODEBOOK_LEN)
    };
    let mut codebook: Vec<f32> = centroids.iter().map(|&c| c as f32).collect();
    codebook.sort_by(f32::total_cmp);
    let last = *codebook.last().expect("at least one centroid");
    codebook.resize(CODEBOOK_LEN, last);
    let labels = values
        .par_iter()
        .map(|&v| nearest_sorted(&codebook, v))
        .collect();
    (codebook, labels)
}

/// Index of the entry of ascending `codebook` nearest to `v` (the lower one on a tie).
fn nearest_sorted(codebook: &[f32], v: f32) -> u8 {
    let i = codebook.partition_point(|&c| c < v);
    let best = if i == 0 {
        0
    } else if i == codebook.len() {
        codebook.len() - 1
    } else if (v - codebook[i - 1]) <= (codebook[i] - v) {
        i - 1
    } else {
        i
    };
    best as u8
}

/// Optimal weighted 1-D k-means of `bins` (value ascending, weight > 0) into at most `k`
/// contiguous groups; returns the group means. Divide-and-conquer DP, O(k·B·log B).
fn optimal_1d_kmeans(bins: &[(f64, f64)], k: usize) -> Vec<f64> {
    let b = bins.len();
    let k = k.min(b);
    let mut pw = vec![0f64; b + 1];
    let mut pwx = vec![0f64; b + 1];
    let mut pwxx = vec![0f64; b + 1];
    for (i, &(x, w)) in bins.iter().enumerate() {
        pw[i + 1] = pw[i] + w;
        pwx[i + 1] = pwx[i] + w * x;
        pwxx[i + 1] = pwxx[i] + w * x * x;
    }
    // SSE of bins a..=b around their weighted mean.
    let cost = |a: usize, e: usize| -> f64 {
        let w = pw[e + 1] - pw[a];
        let wx = pwx[e + 1] - pwx[a];
        (pwxx[e + 1] - pwxx[a] - wx * wx / w).max(0.0)
    };
    let mean = |a: usize, e: usize| (pwx[e + 1] - pwx[a]) / (pw[e + 1] - pw[a]);
    // prev[j]: best cost of bins 0..=j in m − 1 groups; split[m][j]: first bin of the last group.
    let mut prev: Vec<f64> = (0..b).map(|j| cost(0, j)).collect();
    let mut split: Vec<Vec<usize>> = vec![vec![0; b]];
    for m in 1..k {
        let mut cur = vec![f64::INFINITY; b];
        let mut arg = vec![0usize; b];
        // Fill cur[lo..=hi] knowing the optimal split lies in opt_lo..=opt_hi.
        let mut stack = vec![(m, b - 1, m, b - 1)];
        while let Some((lo, hi, opt_lo, opt_hi)) = stack.pop() {
            if lo > hi {
                continue;
            }
            let j = (lo + hi) / 2;
            let mut best = (f64::INFINITY, opt_lo.max(m));
            for s in opt_lo.max(m)..=opt_hi.min(j) {
                let c = prev[s - 1] + cost(s, j);
                if c < best.0 {
                    best = (c, s);
                }
            }
            cur[j] = best.0;
            arg[j] = best.1;
            if j > lo {
                stack.push((lo, j - 1, opt_lo, best.1));
            }
            stack.push((j + 1, hi, best.1, opt_hi));
        }
        prev = cur;
        split.push(arg);
    }
    let mut out = Vec::with_capacity(k);
    let mut end = b - 1;
    for m in (0..k).rev() {
        let start = split[m][end];
        out.push(mean(start, end));
        if m > 0 {
            end = start - 1;
        }
    }
    out.reverse();
    out
}

/// xorshift64* for the palette seeding (deterministic, no `rand` dependency in kiln-formats).
struct SeededRng(u64);

impl SeededRng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform integer in 0..n (n ≥ 1).
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (((v >> 11) as u128 * n as u128) >> 53) as usize
    }
}

/// An exact nearest-neighbour k-d tree over `k` points of dimension `d` (row-major): median
/// split on the widest axis, leaves of up to [`KdTree::LEAF`] points, branch-and-bound search.
struct KdTree<'a> {
    points: &'a [f32],
    d: usize,
    /// Point indices, permuted so every node owns a contiguous range.
    order: Vec<u32>,
    nodes: Vec<KdNode>,
}

enum KdNode {
    Leaf {
        start: usize,
        end: usize,
    },
    Split {
        axis: usize,
        value: f32,
        left: usize,
        right: usize,
    },
}

impl<'a> KdTree<'a> {
    const LEAF: usize = 8;

    fn new(points: &'a [f32], d: usize) -> Self {
        let k = points.len() / d;
        let mut tree = Self {
            points,
            d,
            order: (0..k as u32).collect(),
            nodes: Vec::new(),
        };
        tree.build(0, k);
        tree
    }

    fn build(&mut self, start: usize, end: usize) -> usize {
        let id = self.nodes.len();
        self.nodes.push(KdNode::Leaf { start, end });
        if end - start <= Self::LEAF {
            return id;
        }
        let (d, points) = (self.d, self.points);
        let mut axis = 0;
        let mut widest = -1.0f32;
        for a in 0..d {
            let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
            for &p in &self.order[start..end] {
                let v = points[p as usize * d + a];
                lo = lo.min(v);
                hi = hi.max(v);
            }
            if hi - lo > widest {
                widest = hi - lo;
                axis = a;
            }
        }
        if widest <= 0.0 {
            return id; // all points equal: one leaf
        }
        let mid = (start + end) / 2;
        self.order[start..end].select_nth_unstable_by(mid - start, |&p, &q| {
            points[p as usize * d + axis].total_cmp(&points[q as usize * d + axis])
        });
        let value = points[self.order[mid] as usize * d + axis];
        let left = self.build(start, mid);
        let right = self.build(mid, end);
        self.nodes[id] = KdNode::Split {
            axis,
            value,
            left,
            right,
        };
        id
    }

    /// Index of the point nearest to `q` (squared Euclidean; the lowest index on ties).
    fn nearest(&self, q: &[f32]) -> u32 {
        let mut best = (f32::INFINITY, u32::MAX);
        self.search(0, q, &mut best);
        best.1
    }

    fn search(&self, node: usize, q: &[f32], best: &mut (f32, u32)) {
        match self.nodes[node] {
            KdNode::Leaf { start, end } => {
                for &p in &self.order[start..end] {
                    let row = &self.points[p as usize * self.d..(p as usize + 1) * self.d];
                    let mut dist = 0.0f32;
                    for (a, b) in row.iter().zip(q) {
                        dist += (a - b) * (a - b);
                        if dist > best.0 {
                            break;
                        }
                    }
                    if dist < best.0 || (dist == best.0 && p < best.1) {
                        *best = (dist, p);
                    }
                }
            }
            KdNode::Split {
                axis,
                value,
                left,
                right,
            } => {
                let delta = q[axis] - value;
                let (near, far) = if delta < 0.0 {
                    (left, right)
                } else {
                    (right, left)
                };
                self.search(near, q, best);
                if delta * delta <= best.0 {
                    self.search(far, q, best);
                }
            }
        }
    }
}

/// Largest N·k (rows × palette entries) for which the SH palette uses flat [`kmeans`] (about 2 s
/// per round on 2 cores); larger palettes use [`tree_kmeans`].
const FLAT_KMEANS_MAX_PAIRS: usize = 1 << 28;

/// The SH palette of `rest` (`[N, dim]`): flat k-means while it is affordable, else the tree.
/// Returns (entries `[K, dim]`, labels `[N]`, the search that finds an entry as the fit did).
fn sh_palette(
    rest: &[f32],
    dim: usize,
    k: usize,
    options: &SogOptions,
) -> (Vec<f32>, Vec<u32>, PaletteIndex) {
    let n = rest.len() / dim;
    let (iterations, seed) = (options.kmeans_iterations, options.seed);
    if n.saturating_mul(k) <= FLAT_KMEANS_MAX_PAIRS {
        let (centroids, labels) = kmeans(rest, dim, k.min(n), iterations, seed);
        let index = PaletteIndex::flat(centroids.len() / dim);
        (centroids, labels, index)
    } else {
        tree_kmeans(rest, dim, k, iterations, seed)
    }
}

/// Branching factor of [`tree_kmeans`]: each level clusters its rows into at most this many
/// groups with flat k-means, so a row is compared with at most this many centroids per level.
const TREE_BRANCH: usize = 256;

/// Tree-structured vector quantisation (Gersho & Gray, "Vector Quantization and Signal
/// Compression", 1992, §12.6 "Tree-structured VQ", with unbalanced splits): a palette of about
/// `k` entries for the N = `points.len() / d` rows. Flat [`kmeans`] compares every row with
/// every entry, N·k distances per round (10¹¹ for 1 M splats at k = 65,536: minutes per round on
/// 2 cores); here a palette larger than [`TREE_BRANCH`] first clusters the rows into
/// [`TREE_BRANCH`] groups, gives each group a share of `k` proportional to its rows (largest
/// remainders; at least one entry, at most its row count) and recurses into the groups in
/// parallel, so each round costs about N·[`TREE_BRANCH`] per level. The price is that a row's
/// entry is the best within its group, not over the whole palette: on plush-dog (15,105 splats,
/// 8192 entries) the tree encodes in 1.0 s instead of 11.2 s and its SOG renders 0.64 dB lower
/// (40.22 against 40.86 dB vs the source, `kiln eval --orbit`), so [`sh_palette`] keeps flat
/// k-means while N·k ≤ [`FLAT_KMEANS_MAX_PAIRS`].
///
/// Deterministic: a group's seed is derived from `seed` and its index, and its rows keep their
/// input order. Returns (centroids `[k', d]`, labels `[N]`, the tree's search) with k' ≤ `k`
/// (fewer when groups hold fewer distinct rows than their share).
fn tree_kmeans(
    points: &[f32],
    d: usize,
    k: usize,
    iterations: u32,
    seed: u64,
) -> (Vec<f32>, Vec<u32>, PaletteIndex) {
    let n = points.len() / d;
    if k <= TREE_BRANCH || n <= k {
        let (centroids, labels) = kmeans(points, d, k.min(n), iterations, seed);
        let index = PaletteIndex::flat(centroids.len() / d);
        return (centroids, labels, index);
    }
    let (group_centroids, groups) = kmeans(points, d, TREE_BRANCH, iterations, seed);
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); TREE_BRANCH];
    for (row, &g) in groups.iter().enumerate() {
        members[g as usize].push(row as u32);
    }
    let shares = palette_shares(&members.iter().map(Vec::len).collect::<Vec<_>>(), k);
    let parts: Vec<(Vec<f32>, Vec<u32>, PaletteIndex)> = members
        .par_iter()
        .zip(&shares)
        .enumerate()
        .map(|(g, (rows, &share))| {
            let gathered: Vec<f32> = rows
                .iter()
                .flat_map(|&r| points[r as usize * d..(r as usize + 1) * d].iter().copied())
                .collect();
            let child_seed = seed ^ (g as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            tree_kmeans(&gathered, d, share, iterations, child_seed)
        })
        .collect();
    let mut centroids = Vec::with_capacity(k * d);
    let mut labels = vec![0u32; n];
    // Groups no row chose own no entries; leaving them out of the search changes no row's
    // nearest group, and a new row then never lands in a group without entries.
    let (mut searched_groups, mut children) = (Vec::new(), Vec::new());
    for (g, (rows, (c, l, index))) in members.iter().zip(parts).enumerate() {
        let offset = (centroids.len() / d) as u32;
        for (&row, &label) in rows.iter().zip(&l) {
            labels[row as usize] = offset + label;
        }
        if !rows.is_empty() {
            searched_groups.extend_from_slice(&group_centroids[g * d..(g + 1) * d]);
            children.push(index.shifted(offset));
        }
        centroids.extend(c);
    }
    let index = PaletteIndex::Tree {
        groups: searched_groups,
        children,
    };
    (centroids, labels, index)
}

/// Split `k` palette entries over groups of `sizes` rows in proportion to their sizes (largest
/// remainder method): every non-empty group gets at least 1 and at most its size, empty groups 0.
/// The shares add up to min(k, Σ sizes) when k ≥ the number of non-empty groups.
fn palette_shares(sizes: &[usize], k: usize) -> Vec<usize> {
    let total: usize = sizes.iter().sum();
    let exact: Vec<f64> = sizes
        .iter()
        .map(|&s| k as f64 * s as f64 / total.max(1) as f64)
        .collect();
    let mut shares: Vec<usize> = sizes
        .iter()
        .zip(&exact)
        .map(|(&s, &e)| (e.floor() as usize).clamp(usize::from(s > 0), s))
        .collect();
    // The at-least-one floor can overshoot k: take the excess back from the largest shares.
    let target = k.min(total);
    while shares.iter().sum::<usize>() > target {
        let Some(largest) = (0..shares.len())
            .filter(|&i| shares[i] > 1)
            .max_by_key(|&i| (shares[i], std::cmp::Reverse(i)))
        else {
            break;
        };
        shares[largest] -= 1;
    }
    let mut left = target.saturating_sub(shares.iter().sum());
    let mut by_remainder: Vec<usize> = (0..sizes.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        let r = |i: usize| exact[i] - shares[i] as f64;
        r(b).total_cmp(&r(a)).then(a.cmp(&b))
    });
    // Hand out what is left one entry at a time, largest remainder first, to groups with room.
    while left > 0 {
        let before = left;
        for &i in &by_remainder {
            if left > 0 && shares[i] < sizes[i] {
                shares[i] += 1;
                left -= 1;
            }
        }
        if left == before {
            break;
        }
    }
    shares
}

/// Palettes up to this size are searched exhaustively: in SH's 45 dimensions a k-d tree prunes
/// little, and its branching costs more than the plain scan: 1 M random SH-3 splats encode in
/// 95 s instead of 236 s with the tree's 256-entry levels (2-core CPU, 10 rounds).
const BRUTE_FORCE_MAX_K: usize = 512;

/// Index of the nearest row of `centroids` (`[k, d]`) to `q` by squared distance; the first on a
/// tie (as [`KdTree::nearest`]). Summing stops as soon as a partial sum passes the best so far.
fn nearest_brute_force(centroids: &[f32], d: usize, q: &[f32]) -> u32 {
    let mut best = (f32::INFINITY, 0u32);
    for (i, c) in centroids.chunks_exact(d).enumerate() {
        let mut dist = 0f32;
        for (block_q, block_c) in q.chunks(16).zip(c.chunks(16)) {
            dist += block_q
                .iter()
                .zip(block_c)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>();
            if dist >= best.0 {
                break;
            }
        }
        if dist < best.0 {
            best = (dist, i as u32);
        }
    }
    best.1
}

/// Lloyd k-means of N = `points.len() / d` rows into `k` ≤ N centroids: initial centroids are k
/// distinct rows drawn with Floyd's algorithm from `seed`; each round assigns every row to its
/// nearest centroid (k-d tree, in parallel) and moves each centroid to its rows' mean (summed in
/// row order in f64, so the result does not depend on the thread count); an empty cluster takes a
/// random row. Returns (centroids `[k, d]`, labels `[N]`).
fn kmeans(points: &[f32], d: usize, k: usize, iterations: u32, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let n = points.len() / d;
    let mut rng = SeededRng::new(seed);
    let mut chosen = std::collections::BTreeSet::new();
    let mut picks = Vec::with_capacity(k);
    for j in n - k..n {
        let t = rng.below(j + 1);
        let pick = if chosen.contains(&t) { j } else { t };
        chosen.insert(pick);
        picks.push(pick);
    }
    let mut centroids: Vec<f32> = picks
        .iter()
        .flat_map(|&p| points[p * d..(p + 1) * d].iter().copied())
        .collect();
    let assign = |centroids: &[f32]| -> Vec<u32> {
        if k <= BRUTE_FORCE_MAX_K {
            return points
                .par_chunks_exact(d)
                .map(|row| nearest_brute_force(centroids, d, row))
                .collect();
        }
        let tree = KdTree::new(centroids, d);
        points
            .par_chunks_exact(d)
            .map(|row| tree.nearest(row))
            .collect()
    };
    for _ in 0..iterations {
        let labels = assign(&centroids);
        let mut sums = vec![0f64; k * d];
        let mut counts = vec![0usize; k];
        for (row, &c) in points.chunks_exact(d).zip(&labels) {
            counts[c as usize] += 1;
            for (s, &v) in sums[c as usize * d..].iter_mut().zip(row) {
                *s += v as f64;
            }
        }
        for c in 0..k {
            let dst = &mut centroids[c * d..(c + 1) * d];
            if counts[c] == 0 {
                let p = rng.below(n);
                dst.copy_from_slice(&points[p * d..(p + 1) * d]);
            } else {
                for (o, s) in dst.iter_mut().zip(&sums[c * d..]) {
                    *o = (s / counts[c] as f64) as f32;
                }
            }
        }
    }
    let labels = assign(&centroids);
    (centroids, labels)
}

/// Lossless RGBA WebP of `rgba` (`[H, W, 4]` bytes), by libwebp at its default lossless effort
/// (quality 75, method 4: what `cwebp -lossless` and splat-transform use). `exact` keeps the RGB
/// of texels whose alpha is 0: `sh0.webp` stores opacity in alpha, and a fully transparent splat
/// still has a colour (libwebp would otherwise clear it to compress better).
fn encode_webp(rgba: &[u8], w: usize, h: usize, name: &str) -> Result<Vec<u8>> {
    let failed = |found: String| Error::InvalidInput {
        context: "SOG write",
        field: format!("{name} (lossless WebP)"),
        expected: "an image libwebp encodes (each side 1 ..= 16383 texels)".into(),
        found,
    };
    let mut config = webp::WebPConfig::new().map_err(|()| {
        failed("libwebp refused its default configuration (a libwebp build mismatch)".into())
    })?;
    config.lossless = 1;
    config.exact = 1;
    config.quality = 75.0;
    config.method = 4;
    let encoded = webp::Encoder::from_rgba(rgba, w as u32, h as u32)
        .encode_advanced(&config)
        .map_err(|e| failed(format!("libwebp failed on a {w}×{h} image: {e:?}")))?;
    Ok(encoded.to_vec())
}

/// The finished files of a SOG: (name, bytes), images first and `meta.json` last. `shared` is a
/// palette fitted for several files with this file's labels into it (else the file fits its own).
fn encode_sog(
    splats: &GaussianSplats,
    options: &SogOptions,
    shared: Option<(&ShPalette, &[u32])>,
) -> Result<Vec<(String, Vec<u8>)>> {
    let (w, h) = check_sog_input(splats, options)?;
    let n = splats.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    sort_morton(&splats.means, &mut order);
    let layout = TexelLayout {
        order: &order,
        texels: w * h * 4,
    };
    let (means_l, means_u, mins, maxs) = layout.means(splats);
    let quats = layout.quats(splats);
    let (scales_codebook, scales) = layout.scales(splats);
    let (sh0_codebook, sh0) = layout.sh0(splats);
    let mut files = Vec::new();
    for (name, rgba) in [
        (MEANS_L, &means_l),
        (MEANS_U, &means_u),
        (QUATS, &quats),
        (SCALES, &scales),
        (SH0, &sh0),
    ] {
        files.push((name.to_string(), encode_webp(rgba, w, h, name)?));
    }
    let sh_n = if splats.sh_degree > 0 {
        let palette = match shared {
            Some((palette, labels)) => palette.for_file(labels),
            None => FilePalette::fit(splats, options),
        };
        Some(layout.sh_n(splats.sh_degree, &palette, (w, h), &mut files)?)
    } else {
        None
    };
    let meta = SogMeta {
        version: SOG_VERSION,
        asset: Some(serde_json::json!({
            "generator": format!("kiln v{}", env!("CARGO_PKG_VERSION"))
        })),
        count: n,
        means: MeansMeta {
            mins,
            maxs,
            files: vec![MEANS_L.into(), MEANS_U.into()],
        },
        scales: CodebookMeta {
            codebook: scales_codebook,
            files: vec![SCALES.into()],
        },
        quats: FilesMeta {
            files: vec![QUATS.into()],
        },
        sh0: CodebookMeta {
            codebook: sh0_codebook,
            files: vec![SH0.into()],
        },
        sh_n,
    };
    let json = serde_json::to_vec(&meta).expect("SOG meta serialises");
    files.push(("meta.json".into(), json));
    Ok(files)
}

/// Check what SOG can hold: consistent, finite splats, at least one, no more than a WebP
/// texture holds, no zero quaternion, an SH palette of 1 ..= 65,536 entries. Returns the
/// texture size.
fn check_sog_input(splats: &GaussianSplats, options: &SogOptions) -> Result<(usize, usize)> {
    const CONTEXT: &str = "SOG write";
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    let n = splats.len();
    if n == 0 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "splat count".into(),
            expected: "at least one splat (a SOG texture cannot be 0 × 0)".into(),
            found: "0 splats".into(),
        });
    }
    if let Some(p) = options
        .sh_palette
        .filter(|p| !(1..=MAX_SH_PALETTE).contains(p))
    {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "SH palette size".into(),
            expected: format!("1 ..= {MAX_SH_PALETTE} entries (labels are 16-bit)"),
            found: p.to_string(),
        });
    }
    let (w, h) = texture_size(n);
    if w > WEBP_MAX_DIM || h > WEBP_MAX_DIM {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "splat count".into(),
            expected: format!(
                "at most {WEBP_MAX_DIM}² texels (~268 M splats); tile the scene with a splats job"
            ),
            found: format!("{n} splats ({w} × {h} texels)"),
        });
    }
    if let Some(i) = splats
        .rotations
        .chunks_exact(4)
        .position(|q| q.iter().map(|v| v * v).sum::<f32>() <= f32::MIN_POSITIVE)
    {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: format!("rotations[splat {i}]"),
            expected: "a non-zero quaternion".into(),
            found: format!("{:?}", &splats.rotations[4 * i..4 * i + 4]),
        });
    }
    Ok((w, h))
}

/// Where each splat goes in the textures: texel `i` holds splat `order[i]` (Morton order);
/// `texels` bytes of RGBA per texture.
struct TexelLayout<'o> {
    order: &'o [u32],
    texels: usize,
}

impl TexelLayout<'_> {
    /// `means_l` / `means_u`: the low and high bytes of each mean's log-transformed coordinates,
    /// 16-bit over the per-axis range `mins ..= maxs` (returned, for meta.json).
    #[allow(clippy::type_complexity)]
    fn means(&self, splats: &GaussianSplats) -> (Vec<u8>, Vec<u8>, [f64; 3], [f64; 3]) {
        let mut mins = [f64::INFINITY; 3];
        let mut maxs = [f64::NEG_INFINITY; 3];
        for p in splats.means.chunks_exact(3) {
            for a in 0..3 {
                let t = log_transform(p[a] as f64);
                mins[a] = mins[a].min(t);
                maxs[a] = maxs[a].max(t);
            }
        }
        let mut means_l = vec![0u8; self.texels];
        let mut means_u = vec![0u8; self.texels];
        for (i, &g) in self.order.iter().enumerate() {
            for a in 0..3 {
                let t = log_transform(splats.means[g as usize * 3 + a] as f64);
                let span = maxs[a] - mins[a];
                let q = if span > 0.0 {
                    (65535.0 * (t - mins[a]) / span).round().clamp(0.0, 65535.0) as u16
                } else {
                    0
                };
                means_l[i * 4 + a] = q as u8;
                means_u[i * 4 + a] = (q >> 8) as u8;
            }
            means_l[i * 4 + 3] = 255;
            means_u[i * 4 + 3] = 255;
        }
        (means_l, means_u, mins, maxs)
    }

    /// `quats`: each rotation as SOG's smallest-three encoding.
    fn quats(&self, splats: &GaussianSplats) -> Vec<u8> {
        let mut quats = vec![0u8; self.texels];
        for (i, &g) in self.order.iter().enumerate() {
            let g = g as usize;
            let q = [0, 1, 2, 3].map(|c| splats.rotations[g * 4 + c]);
            quats[i * 4..i * 4 + 4].copy_from_slice(&encode_quat(q));
        }
        quats
    }

    /// `scales`: labels into one 256-entry codebook over all three axes' log-scales.
    fn scales(&self, splats: &GaussianSplats) -> (Vec<f32>, Vec<u8>) {
        let (codebook, labels) = quantize_1d(&splats.log_scales);
        let mut scales = vec![0u8; self.texels];
        for (i, &g) in self.order.iter().enumerate() {
            let g = g as usize;
            scales[i * 4..i * 4 + 3].copy_from_slice(&labels[g * 3..g * 3 + 3]);
            scales[i * 4 + 3] = 255;
        }
        (codebook, scales)
    }

    /// `sh0`: DC colour labels into one codebook, opacity as 8-bit alpha.
    fn sh0(&self, splats: &GaussianSplats) -> (Vec<f32>, Vec<u8>) {
        let k = splats.sh_coeffs_per_channel();
        let dc: Vec<f32> = (0..splats.len())
            .flat_map(|g| (0..3).map(move |c| (g, c)))
            .map(|(g, c)| splats.sh_coeffs[g * k * 3 + c])
            .collect();
        let (codebook, labels) = quantize_1d(&dc);
        let mut sh0 = vec![0u8; self.texels];
        for (i, &g) in self.order.iter().enumerate() {
            let g = g as usize;
            sh0[i * 4..i * 4 + 3].copy_from_slice(&labels[g * 3..g * 3 + 3]);
            let alpha = sigmoid(splats.logit_opacities[g]);
            sh0[i * 4 + 3] = (alpha * 255.0).round().clamp(0.0, 255.0) as u8;
        }
        (codebook, sh0)
    }

    /// Higher SH: the palette of rest vectors (channel-major like PLY `f_rest`: [R c1.., G c1..,
    /// B c1..]) in `shN_centroids.webp`, each splat's 16-bit label in `shN_labels.webp` (both
    /// pushed to `files`); returns their meta.
    fn sh_n(
        &self,
        sh_degree: u32,
        palette: &FilePalette,
        (w, h): (usize, usize),
        files: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<ShNMeta> {
        let coeffs = ((sh_degree + 1) * (sh_degree + 1)) as usize - 1;
        let dim = coeffs * 3;
        let (centroid_labels, labels) = (&palette.entry_values, &palette.labels);
        let palette_len = palette.len(dim);
        let rows = palette_len.div_ceil(CENTROIDS_PER_ROW);
        let cw = CENTROIDS_PER_ROW * coeffs;
        let mut cbuf = vec![0u8; cw * rows * 4];
        for e in 0..palette_len {
            for j in 0..coeffs {
                let t = (e * coeffs + j) * 4;
                for c in 0..3 {
                    cbuf[t + c] = centroid_labels[e * dim + c * coeffs + j];
                }
                cbuf[t + 3] = 255;
            }
        }
        let mut lbuf = vec![0u8; self.texels];
        for (i, &g) in self.order.iter().enumerate() {
            let label = labels[g as usize];
            lbuf[i * 4] = label as u8;
            lbuf[i * 4 + 1] = (label >> 8) as u8;
            lbuf[i * 4 + 3] = 255;
        }
        files.push((
            SHN_CENTROIDS.to_string(),
            encode_webp(&cbuf, cw, rows, SHN_CENTROIDS)?,
        ));
        files.push((
            SHN_LABELS.to_string(),
            encode_webp(&lbuf, w, h, SHN_LABELS)?,
        ));
        Ok(ShNMeta {
            count: palette_len,
            bands: sh_degree,
            codebook: palette.codebook.clone(),
            files: vec![SHN_CENTROIDS.into(), SHN_LABELS.into()],
        })
    }
}

/// Short name of the format in messages.
pub const NAME: &str = "SOG";

/// Write splats as a SOG (meta.json version 2) that the PlayCanvas engine, SuperSplat and
/// splat-transform read.
///
/// Guarantees: inputs are checked before anything is written; a bundle appears complete or not
/// at all (written to a temporary sibling and renamed); in the folder form every image is
/// written atomically and `meta.json` last, so a reader never sees a `meta.json` without its
/// images (an interrupted write may leave new images beside an old `meta.json`). The same input
/// and options always give the same bytes. Lossy: positions to 16 bits per axis after the log
/// transform, rotations to 8 bits per kept component, scales / DC colour / SH palette values to
/// 256-entry codebooks, opacity to 1/255, higher SH to a k-means palette (see the module docs).
///
/// - `dir_or_file`: `*.sog` writes a bundle (ZIP, entries stored); `*.json` writes that file
///   as the meta file with the images beside it; anything else is a folder that receives
///   `meta.json` and the images (created if missing).
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means; any N ≥ 1 with
///   N ≤ 16383² texels' worth (W × H as in the module docs), SH degree 0..=3, finite values,
///   non-zero quaternions (wxyz; normalised here). A non-zero origin is added to the means in
///   f64 and cast to f32 (SOG stores absolute positions).
/// - `options`: k-means iterations and seed ([`SogOptions::default`]: 10, 0).
///
/// Returns the bytes written (all files together).
///
/// # Errors
/// [`Error::PositionRange`] naming `dir_or_file` when the cast to f32 moves a coordinate by
/// more than [`super::placed::POSITION_TOLERANCE_M`] (nothing is written);
/// [`Error::InvalidInput`] (context `"SOG write"`) for inconsistent shapes, NaN/Inf, a zero
/// quaternion, no splats, or too many splats for one WebP; [`Error::Io`] naming the file that
/// could not be written.
///
/// Source: splat-transform `src/lib/writers/write-sog.ts`.
pub fn write<'a>(
    dir_or_file: &Path,
    splats: impl Into<PlacedRef<'a>>,
    options: &SogOptions,
) -> Result<u64> {
    let absolute = splats.into().absolute_f32_for(
        dir_or_file,
        NAME,
        "f32 positions (log-transformed, 16 bits between per-axis bounds)",
    )?;
    let files = encode_sog(&absolute, options, None)?;
    store(dir_or_file, &files)
}

/// Experimental: write splats as a SOG whose SH palette is `palette`, shared with other files,
/// instead of one fitted on these splats alone; the file stores the entries its splats use (in
/// the palette's order) with the palette's scalar codebook, so an entry decodes to the same
/// values in every file written against it. Otherwise as [`write()`].
///
/// - `splats`: as [`write()`], with the palette's SH degree (≥ 1).
/// - `palette`: fitted with [`ShPalette::fit`] on splats that include these (or resemble them).
/// - `labels`: `[N]` entry of every splat, in `splats`' order, each < `palette.len()` (from
///   [`ShPalette::labels`], gathered like the splats).
/// - `options`: only the checks read it (the palette is fitted already).
///
/// # Errors
/// As [`write()`], and [`Error::InvalidInput`] (context `"SOG palette"`) when the SH degree is
/// not the palette's, or `labels` has another length or an entry past the palette.
pub fn write_with_palette<'a>(
    dir_or_file: &Path,
    splats: impl Into<PlacedRef<'a>>,
    options: &SogOptions,
    palette: &ShPalette,
    labels: &[u32],
) -> Result<u64> {
    let absolute = splats.into().absolute_f32_for(
        dir_or_file,
        NAME,
        "f32 positions (log-transformed, 16 bits between per-axis bounds)",
    )?;
    palette.check_file(&absolute, labels)?;
    let files = encode_sog(&absolute, options, Some((palette, labels)))?;
    store(dir_or_file, &files)
}

/// Write the encoded `files` as a bundle or a folder ([`SogContainer::from_path`]); returns the
/// bytes written.
fn store(dir_or_file: &Path, files: &[(String, Vec<u8>)]) -> Result<u64> {
    let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    match SogContainer::from_path(dir_or_file) {
        SogContainer::Bundle(path) => {
            write_atomic_with(&path, |w| write_zip(w, files))?;
            std::fs::metadata(&path)
                .map(|m| m.len())
                .map_err(|e| Error::io(&path, e))
        }
        SogContainer::Folder { meta } => {
            write_folder(&meta, files)?;
            Ok(total)
        }
    }
}

/// Write an unbundled SOG: every file goes to a temporary name beside its target first, and only
/// when all are written are they renamed into place (images first, the meta file last), so a
/// failure leaves the folder as it was. SH images of an earlier SOG in the folder that this one
/// does not have are removed (no reader would look at them, but they would be published).
fn write_folder(meta: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
    let dir = meta.parent().unwrap_or(Path::new("")).to_path_buf();
    if !dir.as_os_str().is_empty() {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    let target = |name: &str| {
        if name == "meta.json" {
            meta.to_path_buf()
        } else {
            dir.join(name)
        }
    };
    let temp = |path: &Path| {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
    };
    let mut written = Vec::with_capacity(files.len());
    let staged = files.iter().try_for_each(|(name, bytes)| {
        let path = target(name);
        if path.is_dir() {
            return Err(Error::io(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "a folder is in the way of a SOG file",
                ),
            ));
        }
        let tmp = temp(&path);
        written.push((tmp.clone(), path));
        std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))
    });
    if let Err(e) = staged {
        for (tmp, _) in &written {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    for (tmp, path) in &written {
        std::fs::rename(tmp, path).map_err(|e| Error::io(path, e))?;
    }
    if !files.iter().any(|(name, _)| name == SHN_LABELS) {
        for stale in [SHN_CENTROIDS, SHN_LABELS] {
            let _ = std::fs::remove_file(dir.join(stale));
        }
    }
    Ok(())
}

/// A ZIP of `files` with every entry stored (method 0), as splat-transform writes bundles.
fn write_zip<W: Write + Seek>(w: W, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let mut zip = zip::ZipWriter::new(w);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default());
    for (name, bytes) in files {
        zip.start_file(name.as_str(), opts)
            .map_err(std::io::Error::other)?;
        zip.write_all(bytes)?;
    }
    zip.finish().map_err(std::io::Error::other)?;
    Ok(())
}

/// The files of a SOG, fetched by name.
enum SogFiles {
    Folder {
        dir: PathBuf,
    },
    Bundle {
        path: PathBuf,
        zip: zip::ZipArchive<std::fs::File>,
    },
}

impl SogFiles {
    /// The path that names `name` in errors (`bundle.sog/name` for a bundle entry).
    fn display_path(&self, name: &str) -> PathBuf {
        match self {
            Self::Folder { dir } => dir.join(name),
            Self::Bundle { path, .. } => path.join(name),
        }
    }

    fn read(&mut self, name: &str) -> Result<Vec<u8>> {
        match self {
            Self::Folder { dir } => {
                // meta.json names its images; they must lie in its folder (issue 41).
                let dir = match dir.as_os_str().is_empty() {
                    true => Path::new("."),
                    false => dir.as_path(),
                };
                let Ok(root) = ConfinedRoot::new(dir) else {
                    // No folder: the file is missing, and the error names it.
                    let path = dir.join(name);
                    return Err(Error::NotFound {
                        path,
                        what: "no such file",
                    });
                };
                let path = root.resolve(&dir.join("meta.json"), "files[]", dir, name)?;
                std::fs::read(&path).map_err(|e| Error::io(path, e))
            }
            Self::Bundle { path, zip } => {
                // splat-transform writes names at the root; accept one folder level too.
                let entry = zip
                    .file_names()
                    .find(|f| *f == name || f.rsplit('/').next() == Some(name))
                    .map(str::to_string)
                    .ok_or_else(|| Error::NotFound {
                        path: path.join(name),
                        what: "entry missing from the SOG bundle",
                    })?;
                let mut file = zip.by_name(&entry).map_err(|e| Error::Unsupported {
                    path: path.join(&entry),
                    field: "ZIP entry".into(),
                    found: e.to_string(),
                    supported: "stored or DEFLATE entries (as splat-transform and common ZIP \
                                tools write); re-bundle with splat-transform or unzip to a folder"
                        .into(),
                })?;
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)
                    .map_err(|e| Error::io(path.join(&entry), e))?;
                Ok(bytes)
            }
        }
    }
}

/// A decoded RGBA image: width, height, `[H, W, 4]` bytes.
struct Rgba {
    w: usize,
    h: usize,
    data: Vec<u8>,
}

/// Read a SOG (meta.json version 2) written by splat-transform, SuperSplat or [`write()`].
///
/// Returns splats at origin `[0, 0, 0]` (SOG stores f32 positions) in Kiln's parametrisation,
/// in the file's (Morton) order: means in metres,
/// natural-log scales from the codebook, unit quaternions wxyz, logit opacities (bytes 0 and
/// 255 become ∓40), SH coefficient-major with degree = `shN.bands` (0 without `shN`).
///
/// - `path`: a `.sog` bundle, a meta `*.json` file, or a folder holding `meta.json`.
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] for a missing or unreadable file (named);
/// [`Error::Corrupt`] for JSON that does not parse or a bundle that is not a ZIP;
/// [`Error::Unsupported`] for `version` ≠ 2 (SOG v1 used min/max instead of codebooks) or
/// bundle entries compressed other than by DEFLATE; [`Error::Image`] for an image that does not decode;
/// [`Error::Invalid`] naming the file and field for a count of 0, codebooks not of 256 entries,
/// images too small for `count`, a quaternion mode byte outside 252..=255, `shN.bands` outside
/// 1..=3, or a palette label past the palette.
///
/// Source: PlayCanvas engine `src/scene/gsplat/gsplat-sog-data.js` (the CPU decoder).
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let is_bundle = path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| {
                let mut magic = [0u8; 4];
                f.read_exact(&mut magic).map(|_| magic == *b"PK\x03\x04")
            })
            .unwrap_or(false);
    let named_bundle = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("sog"));
    if named_bundle && path.is_file() && !is_bundle {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            location: "first 4 bytes".into(),
            what: "not a ZIP archive (a .sog bundle starts with PK\\x03\\x04); give the bundle \
                   splat-transform or kiln wrote, or the folder's meta.json for an unbundled SOG"
                .into(),
        });
    }
    let (mut files, meta_path, meta_name) = if is_bundle {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let zip = zip::ZipArchive::new(file).map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            location: "ZIP directory".into(),
            what: e.to_string(),
        })?;
        let files = SogFiles::Bundle {
            path: path.to_path_buf(),
            zip,
        };
        (files, path.join("meta.json"), "meta.json".to_string())
    } else {
        let meta = match SogContainer::from_path(path) {
            SogContainer::Folder { meta } => meta,
            SogContainer::Bundle(p) => p.join("meta.json"),
        };
        let dir = meta.parent().unwrap_or(Path::new("")).to_path_buf();
        let name = meta
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "meta.json".into());
        (SogFiles::Folder { dir }, meta, name)
    };
    let json = files.read(&meta_name)?;
    let meta = parse_meta(&meta_path, &json)?;
    let read = decode_sog(&mut files, &meta_path, &meta).map(PlacedSplats::at_zero);
    domain::checked(path, &ATTRIBUTES, read)
}

/// Attribute names of `meta.json`'s sections, for [`domain`]'s messages.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "means",
    scales: "scales",
    rotations: "quats",
    opacities: "sh0 alpha",
    sh: "sh0 / shN",
};

/// Parse and check `meta.json` (version, count, codebook lengths, SH bands).
fn parse_meta(path: &Path, json: &[u8]) -> Result<SogMeta> {
    let version = serde_json::from_slice::<serde_json::Value>(json)
        .map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            location: format!("line {}, column {}", e.line(), e.column()),
            what: format!("invalid JSON: {e}"),
        })?
        .get("version")
        .and_then(serde_json::Value::as_u64);
    if version != Some(SOG_VERSION as u64) {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "version".into(),
            found: version.map_or("no version (SOG v1)".into(), |v| format!("version {v}")),
            supported: "SOG version 2 (re-export with splat-transform ≥ 1.0)".into(),
        });
    }
    let meta: SogMeta = serde_json::from_slice(json).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        location: format!("line {}, column {}", e.line(), e.column()),
        what: format!("not a SOG v2 meta.json: {e}"),
    })?;
    let invalid = |field: &str, expected: &str, found: String| Error::Invalid {
        path: path.to_path_buf(),
        field: field.into(),
        expected: expected.into(),
        found,
    };
    if meta.count == 0 {
        return Err(invalid("count", "at least one splat", "0".into()));
    }
    for (field, cb) in [
        ("scales.codebook", Some(&meta.scales.codebook)),
        ("sh0.codebook", Some(&meta.sh0.codebook)),
        ("shN.codebook", meta.sh_n.as_ref().map(|s| &s.codebook)),
    ] {
        if let Some(cb) = cb
            && cb.len() != CODEBOOK_LEN
        {
            return Err(invalid(
                field,
                "256 entries",
                format!("{} entries", cb.len()),
            ));
        }
    }
    if let Some(sh) = &meta.sh_n
        && !(1..=3).contains(&sh.bands)
    {
        return Err(invalid("shN.bands", "1, 2 or 3", sh.bands.to_string()));
    }
    let expect_files = |field: &str, files: &[String], n: usize| {
        if files.len() == n {
            Ok(())
        } else {
            Err(invalid(
                field,
                &format!("{n} file names"),
                format!("{files:?}"),
            ))
        }
    };
    expect_files("means.files", &meta.means.files, 2)?;
    expect_files("scales.files", &meta.scales.files, 1)?;
    expect_files("quats.files", &meta.quats.files, 1)?;
    expect_files("sh0.files", &meta.sh0.files, 1)?;
    if let Some(sh) = &meta.sh_n {
        expect_files("shN.files", &sh.files, 2)?;
    }
    Ok(meta)
}

/// Decode one image of the SOG and check it holds at least `min_texels` texels.
fn load_image(files: &mut SogFiles, name: &str, min_texels: usize) -> Result<Rgba> {
    let bytes = files.read(name)?;
    let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::WebP)
        .map_err(|source| Error::Image {
            path: files.display_path(name),
            source,
        })?
        .to_rgba8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w * h < min_texels {
        return Err(Error::Invalid {
            path: files.display_path(name),
            field: "image size".into(),
            expected: format!("at least {min_texels} texels (one per splat of meta.json `count`)"),
            found: format!("{w} × {h}"),
        });
    }
    Ok(Rgba {
        w,
        h,
        data: img.into_raw(),
    })
}

fn decode_sog(files: &mut SogFiles, meta_path: &Path, meta: &SogMeta) -> Result<GaussianSplats> {
    let n = meta.count;
    let means_l = load_image(files, &meta.means.files[0], n)?;
    let means_u = load_image(files, &meta.means.files[1], n)?;
    let quats = load_image(files, &meta.quats.files[0], n)?;
    let scales = load_image(files, &meta.scales.files[0], n)?;
    let sh0 = load_image(files, &meta.sh0.files[0], n)?;
    let degree = meta.sh_n.as_ref().map_or(0, |s| s.bands);
    let k = ((degree + 1) * (degree + 1)) as usize;
    let mut s = GaussianSplats {
        means: vec![0.0; n * 3],
        log_scales: vec![0.0; n * 3],
        rotations: vec![0.0; n * 4],
        logit_opacities: vec![0.0; n],
        sh_coeffs: vec![0.0; n * k * 3],
        sh_degree: degree,
    };
    for i in 0..n {
        for a in 0..3 {
            let q = (means_u.data[i * 4 + a] as u32) << 8 | means_l.data[i * 4 + a] as u32;
            let (lo, hi) = (meta.means.mins[a], meta.means.maxs[a]);
            let t = lo + (hi - lo) * (q as f64 / 65535.0);
            s.means[i * 3 + a] = inverse_log_transform(t) as f32;
            s.log_scales[i * 3 + a] = meta.scales.codebook[scales.data[i * 4 + a] as usize];
            s.sh_coeffs[i * k * 3 + a] = meta.sh0.codebook[sh0.data[i * 4 + a] as usize];
        }
        let t = [0, 1, 2, 3].map(|c| quats.data[i * 4 + c]);
        let q = decode_quat(t).ok_or_else(|| Error::Invalid {
            path: files.display_path(&meta.quats.files[0]),
            field: format!("alpha of texel {i} (dropped-component code)"),
            expected: "252..=255".into(),
            found: t[3].to_string(),
        })?;
        s.rotations[i * 4..i * 4 + 4].copy_from_slice(&q);
        s.logit_opacities[i] = match sh0.data[i * 4 + 3] {
            0 => -OPACITY_LOGIT_LIMIT,
            255 => OPACITY_LOGIT_LIMIT,
            a => logit(a as f64 / 255.0),
        };
    }
    if let Some(sh) = &meta.sh_n {
        let coeffs = k - 1;
        let centroids = load_image(files, &sh.files[0], 0)?;
        let labels = load_image(files, &sh.files[1], n)?;
        let centroids_path = files.display_path(&sh.files[0]);
        if centroids.w != CENTROIDS_PER_ROW * coeffs {
            return Err(Error::Invalid {
                path: centroids_path,
                field: "image width".into(),
                expected: format!(
                    "{} (64 palette entries × {coeffs} coefficients for shN.bands = {})",
                    CENTROIDS_PER_ROW * coeffs,
                    sh.bands
                ),
                found: centroids.w.to_string(),
            });
        }
        let palette = CENTROIDS_PER_ROW * centroids.h;
        for i in 0..n {
            let label = labels.data[i * 4] as usize | (labels.data[i * 4 + 1] as usize) << 8;
            if label >= palette {
                return Err(Error::Invalid {
                    path: files.display_path(&sh.files[1]),
                    field: format!("palette label of texel {i}"),
                    expected: format!("< {palette} (rows of {} in {meta_path:?})", sh.files[0]),
                    found: label.to_string(),
                });
            }
            for j in 0..coeffs {
                let t = (label * coeffs + j) * 4;
                for c in 0..3 {
                    s.sh_coeffs[i * k * 3 + (j + 1) * 3 + c] =
                        sh.codebook[centroids.data[t + c] as usize];
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::super::test_data::random_splats;
    use super::*;

    #[test]
    fn morton_codes_interleave_x_lowest() {
        // x = 1 → bit 0, y = 2 (bit 1) → bit 3·1 + 1 = 4, z = 4 (bit 2) → bit 3·2 + 2 = 8.
        assert_eq!(morton3(1, 0, 0), 1);
        assert_eq!(morton3(0, 1, 0), 2);
        assert_eq!(morton3(0, 0, 1), 4);
        assert_eq!(morton3(1, 2, 4), 1 + 16 + 256);
        assert_eq!(morton3(1023, 1023, 1023), (1 << 30) - 1);
    }

    #[test]
    fn morton_order_of_unit_cube_corners() {
        // Box [0, 1]³: coordinate 1 maps to cell min(1023, 1024) = 1023, so the codes are
        // (0,0,0) → 0, (1,0,0) → 0x09249249, (0,1,0) → 0x12492492, (0,0,1) → 0x24924924,
        // (1,1,1) → 2³⁰ − 1. The input lists them scrambled.
        let means = [
            1.0, 1.0, 1.0, // 0: (1,1,1)
            0.0, 0.0, 1.0, // 1: (0,0,1)
            0.0, 1.0, 0.0, // 2: (0,1,0)
            1.0, 0.0, 0.0, // 3: (1,0,0)
            0.0, 0.0, 0.0, // 4: origin
        ];
        let mut order: Vec<u32> = (0..5).collect();
        sort_morton(&means, &mut order);
        assert_eq!(order, [4, 3, 2, 1, 0]);
        assert_eq!(part1by2(1023), 0x0924_9249);
    }

    #[test]
    fn texture_size_follows_splat_transform() {
        // N = 1000: √1000 = 31.6 → W = 32; 1000 / 32 / 4 = 7.8 → H = 32.
        assert_eq!(texture_size(1000), (32, 32));
        // N = 1: W = 4, H = 4.
        assert_eq!(texture_size(1), (4, 4));
        // N = 100: √100 / 4 = 2.5 → W = 12; 100 / 12 / 4 = 2.08 → H = 12.
        assert_eq!(texture_size(100), (12, 12));
        assert_eq!(sh_palette_size(1000), 512);
        assert_eq!(sh_palette_size(4096), 4096);
        assert_eq!(sh_palette_size(1 << 20), 65536);
    }

    #[test]
    fn smallest_three_round_trips_known_quaternions() {
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let cases: [[f32; 4]; 6] = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, -1.0],  // largest z, negative: flips to +z
            [h, h, 0.0, 0.0],       // tie: the first (w) is dropped
            [0.5, -0.5, 0.5, -0.5], // all equal magnitude
            [0.2, 0.4, -0.8, 0.4],  // ‖q‖ = 1; z dropped
            [2.0, 0.0, 0.0, 0.0],   // not unit: normalised
        ];
        // A kept component c is stored as round(255·(√2·c/2 + 1/2)), so it decodes within
        // δ = √2 / 510 = 2.77e-3 (0 itself is not a code: 127.5 rounds to 128, decoding to
        // +2.77e-3). The dropped one is rebuilt as d = √(1 − Σa²), so it errs by at most
        // (Σ|a|·δ + 1.5·δ²) / d to first order.
        let delta = std::f32::consts::SQRT_2 / 510.0;
        for q in cases {
            let t = encode_quat(q);
            let len = q.iter().map(|v| v * v).sum::<f32>().sqrt();
            let largest = (0..4).fold(0, |m, i| if q[i].abs() > q[m].abs() { i } else { m });
            assert_eq!(t[3] as usize, 252 + largest, "{q:?}");
            let back = decode_quat(t).unwrap();
            let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
            let want = q.map(|v| sign * v / len);
            let kept_sum: f32 = (0..4)
                .filter(|&c| c != largest)
                .map(|c| want[c].abs())
                .sum();
            for c in 0..4 {
                let bound = if c == largest {
                    (kept_sum * delta + 1.5 * delta * delta) / want[c] + 1e-6
                } else {
                    delta + 1e-6
                };
                assert!((back[c] - want[c]).abs() <= bound, "{q:?} → {back:?}");
            }
            // As a rotation: 1 − |q·q̂| < 1e-3 (in fact < 1e-4 for every case here).
            let dot: f32 = want.iter().zip(&back).map(|(a, b)| a * b).sum();
            assert!(1.0 - dot.abs() < 1e-4, "{q:?} → {back:?}");
        }
        // Identity: the three zeros become byte 128 each, so w = √(1 − 3·δ²) = 0.9999885.
        assert_eq!(encode_quat([1.0, 0.0, 0.0, 0.0]), [128, 128, 128, 252]);
        let w = decode_quat([128, 128, 128, 252]).unwrap()[0];
        assert!((w - (1.0 - 3.0 * delta * delta).sqrt()).abs() < 1e-6);
        assert_eq!(encode_quat([0.0, 0.0, 0.0, -1.0]), [128, 128, 128, 255]);
        assert_eq!(decode_quat([0, 0, 0, 251]), None);
    }

    #[test]
    fn log_transform_round_trips_within_the_16_bit_step() {
        // Box x ∈ [−10, 100]: t ∈ [−ln 11, ln 101] = [−2.3979, 4.6151], step
        // Δt = 7.0130 / 65535 = 1.0701e-4; rounding errs by ≤ Δt/2 in t, i.e. by
        // ≤ (|x| + 1)·(e^{Δt/2} − 1) ≈ (|x| + 1)·5.35e-5 in x (5.4e-3 m at x = 100).
        let xs = [-10.0f32, -3.3, -0.01, 0.0, 0.5, 7.25, 42.0, 100.0];
        let s = GaussianSplats {
            means: xs.iter().flat_map(|&x| [x, 0.0, -x]).collect(),
            log_scales: vec![-2.0; xs.len() * 3],
            rotations: [1.0, 0.0, 0.0, 0.0].repeat(xs.len()),
            logit_opacities: vec![0.0; xs.len()],
            sh_coeffs: vec![0.1; xs.len() * 3],
            sh_degree: 0,
        };
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("meta.json"), &s, &SogOptions::default()).unwrap();
        let back = read(dir.path()).unwrap().splats;
        let dt = ((101f64).ln() + (11f64).ln()) / 65535.0;
        assert!((dt - 1.0701e-4).abs() < 1e-7);
        for p in back.means.chunks_exact(3) {
            let x = p[0] as f64;
            let orig = xs
                .iter()
                .map(|&v| v as f64)
                .min_by(|a, b| (a - x).abs().total_cmp(&(b - x).abs()))
                .unwrap();
            let bound = (orig.abs() + 1.0) * ((dt / 2.0).exp() - 1.0) + 1e-6;
            assert!((x - orig).abs() <= bound, "{orig} → {x} (bound {bound})");
            // y = 0 for every splat: the y box is degenerate, stored as code 0 → t = 0 → 0.
            assert_eq!(p[1], 0.0);
            assert!((p[2] as f64 + orig).abs() <= bound);
        }
        // Origin stays exact: t = 0 → x = 0 needs the code to hit 0 exactly, which a box that
        // straddles 0 does not promise; the bound above covers it.
    }

    /// Max |value − nearest codebook entry| must equal the decode error (labels are optimal),
    /// and the codebook must be at least as fine as a uniform 64-level one over the range
    /// (range / 128): a uniform 256-level grid errs by range / 510, and the density weighting
    /// may spend up to 4× that spacing on the tails.
    fn assert_codebook_error(orig: &[f32], decoded: &[f32], codebook: &[f32], what: &str) {
        let lo = orig.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = orig.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for (&o, &d) in orig.iter().zip(decoded) {
            let nearest = codebook
                .iter()
                .map(|c| (c - o).abs())
                .fold(f32::INFINITY, f32::min);
            assert!((d - o).abs() <= nearest + 1e-6, "{what}: {o} → {d}");
            assert!((d - o).abs() <= (hi - lo) / 128.0, "{what}: {o} → {d}");
        }
    }

    #[test]
    fn random_sh3_cloud_round_trips_within_quantisation_bounds() {
        let n = 1000;
        let s = random_splats(n, 3, 5.0, 7);
        let dir = tempfile::tempdir().unwrap();
        let bytes = write(&dir.path().join("meta.json"), &s, &SogOptions::default()).unwrap();
        assert!(bytes > 0);
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["version"], 2);
        assert_eq!(meta["count"], n);
        for key in ["means", "scales", "quats", "sh0", "shN"] {
            assert!(meta[key]["files"].is_array(), "{key}");
        }
        assert_eq!(meta["means"]["mins"].as_array().unwrap().len(), 3);
        assert_eq!(meta["means"]["maxs"].as_array().unwrap().len(), 3);
        assert_eq!(meta["scales"]["codebook"].as_array().unwrap().len(), 256);
        assert_eq!(meta["sh0"]["codebook"].as_array().unwrap().len(), 256);
        assert_eq!(meta["shN"]["codebook"].as_array().unwrap().len(), 256);
        assert_eq!(meta["shN"]["bands"], 3);
        assert_eq!(meta["shN"]["count"], 512);
        for f in [
            MEANS_L,
            MEANS_U,
            QUATS,
            SCALES,
            SH0,
            SHN_CENTROIDS,
            SHN_LABELS,
        ] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }

        let back = read(&dir.path().join("meta.json")).unwrap().splats;
        assert_eq!(back.len(), n);
        assert_eq!(back.sh_degree, 3);
        // Splats come back in Morton order: match each by its (unique) position.
        let mins: Vec<f64> = (0..3)
            .map(|a| meta["means"]["mins"][a].as_f64().unwrap())
            .collect();
        let maxs: Vec<f64> = (0..3)
            .map(|a| meta["means"]["maxs"][a].as_f64().unwrap())
            .collect();
        let scale_cb: Vec<f32> =
            serde_json::from_value(meta["scales"]["codebook"].clone()).unwrap();
        let sh0_cb: Vec<f32> = serde_json::from_value(meta["sh0"]["codebook"].clone()).unwrap();
        let k = 16;
        let mut used = vec![false; n];
        let (mut so, mut sd, mut co, mut cd) = (vec![], vec![], vec![], vec![]);
        for i in 0..n {
            let p = &back.means[i * 3..i * 3 + 3];
            let g = (0..n)
                .min_by(|&a, &b| {
                    let d = |g: usize| {
                        (0..3)
                            .map(|c| (s.means[g * 3 + c] - p[c]).powi(2))
                            .sum::<f32>()
                    };
                    d(a).total_cmp(&d(b))
                })
                .unwrap();
            assert!(!used[g]);
            used[g] = true;
            for a in 0..3 {
                // Δt per axis; error in x ≤ (|x| + 1)(e^{Δt/2} − 1) plus f32 rounding.
                let dt = (maxs[a] - mins[a]) / 65535.0;
                let x = s.means[g * 3 + a] as f64;
                let bound = (x.abs() + 1.0) * ((dt / 2.0).exp() - 1.0) + 1e-6;
                assert!((p[a] as f64 - x).abs() <= bound, "splat {g} axis {a}");
            }
            let a0 = sigmoid(s.logit_opacities[g]);
            let a1 = sigmoid(back.logit_opacities[i]);
            assert!((a0 - a1).abs() <= 0.5 / 255.0 + 1e-6, "opacity {a0} → {a1}");
            let (q0, q1) = (
                &s.rotations[g * 4..g * 4 + 4],
                &back.rotations[i * 4..i * 4 + 4],
            );
            let dot: f32 = q0.iter().zip(q1).map(|(a, b)| a * b).sum();
            assert!(dot.abs() > 1.0 - 1e-4, "rotation {q0:?} → {q1:?}");
            so.extend_from_slice(&s.log_scales[g * 3..g * 3 + 3]);
            sd.extend_from_slice(&back.log_scales[i * 3..i * 3 + 3]);
            co.extend_from_slice(&s.sh_coeffs[g * k * 3..g * k * 3 + 3]);
            cd.extend_from_slice(&back.sh_coeffs[i * k * 3..i * k * 3 + 3]);
        }
        assert_codebook_error(&so, &sd, &scale_cb, "log scale");
        assert_codebook_error(&co, &cd, &sh0_cb, "f_dc");
    }

    #[test]
    fn brute_force_and_kd_tree_find_the_same_nearest_entry() {
        let mut rng = super::super::test_data::Rng::new(4);
        for (d, k) in [(3, 7), (45, 300), (9, 512)] {
            let centroids: Vec<f32> = (0..k * d).map(|_| rng.range(-1.0, 1.0)).collect();
            let tree = KdTree::new(&centroids, d);
            for _ in 0..200 {
                let q: Vec<f32> = (0..d).map(|_| rng.range(-1.2, 1.2)).collect();
                assert_eq!(
                    nearest_brute_force(&centroids, d, &q),
                    tree.nearest(&q),
                    "d {d}"
                );
            }
        }
    }

    #[test]
    fn palette_shares_are_proportional_and_add_up() {
        // 10 entries over 10/0/30/60 rows: exactly 1, 0, 3, 6.
        assert_eq!(palette_shares(&[10, 0, 30, 60], 10), [1, 0, 3, 6]);
        // 10 over 1/1/98: 0.1, 0.1, 9.8 → floors 1 (at least one), 1, 9 = 11 > 10: the largest
        // gives one back.
        assert_eq!(palette_shares(&[1, 1, 98], 10), [1, 1, 8]);
        // 7 over 5/5: 3.5 each → 3, 3 and the first largest remainder takes the last.
        assert_eq!(palette_shares(&[5, 5], 7), [4, 3]);
        // More entries than rows: every group gets its rows.
        assert_eq!(palette_shares(&[2, 3], 100), [2, 3]);
    }

    /// Mean squared distance of each row to its entry.
    fn quantisation_mse(points: &[f32], d: usize, centroids: &[f32], labels: &[u32]) -> f64 {
        let sum: f64 = points
            .chunks_exact(d)
            .zip(labels)
            .map(|(row, &l)| {
                let e = &centroids[l as usize * d..][..d];
                row.iter()
                    .zip(e)
                    .map(|(a, b)| f64::from(a - b).powi(2))
                    .sum::<f64>()
            })
            .sum();
        sum / labels.len() as f64
    }

    #[test]
    fn tree_kmeans_is_close_to_flat_kmeans_and_stays_within_k() {
        // 6000 rows of d = 45 (an SH-3 rest vector) drawn around 1500 random centres with noise
        // a tenth of their spread: the tree's palette of 1024 (4 groups of the 256-way split on
        // average) must quantise almost as well as flat k-means over all 1024 entries.
        let (d, k, n) = (45, 1024, 6000);
        let mut rng = super::super::test_data::Rng::new(9);
        let centres: Vec<f32> = (0..1500 * d).map(|_| rng.range(-1.0, 1.0)).collect();
        let points: Vec<f32> = (0..n)
            .flat_map(|i| {
                let c = (i * 7919) % 1500;
                (0..d).map(move |a| (c, a)).collect::<Vec<_>>()
            })
            .map(|(c, a)| centres[c * d + a] + rng.range(-0.1, 0.1))
            .collect();
        let (tc, tl, _) = tree_kmeans(&points, d, k, 10, 3);
        let (fc, fl) = kmeans(&points, d, k, 10, 3);
        assert!(tc.len() / d <= k && tl.iter().all(|&l| (l as usize) < tc.len() / d));
        let (tree, flat) = (
            quantisation_mse(&points, d, &tc, &tl),
            quantisation_mse(&points, d, &fc, &fl),
        );
        assert!(tree <= 1.1 * flat, "tree {tree} vs flat {flat}");
        let again = tree_kmeans(&points, d, k, 10, 3);
        assert_eq!((again.0, again.1), (tc, tl));
    }

    #[test]
    fn sh_palette_recovers_few_distinct_sh_vectors() {
        // 1000 splats whose SH rest vectors are one of 6 prototypes (values from
        // {−0.5, 0, 0.25, 0.5}) plus noise within ±1e-3. The palette (512 entries) must
        // separate the prototypes, and the codebook must resolve the 4 value groups: every
        // decoded coefficient lies within 2e-3 (noise both ways) + 1e-3 of its prototype.
        let n = 1000;
        let mut s = random_splats(n, 3, 5.0, 11);
        let values = [-0.5f32, 0.0, 0.25, 0.5];
        let proto: Vec<Vec<f32>> = (0..6)
            .map(|p| {
                (0..45)
                    .map(|j| values[(p * 7 + j * 3 + j / 5) % 4])
                    .collect()
            })
            .collect();
        let mut rng = super::super::test_data::Rng::new(5);
        let mut which = vec![0; n];
        for g in 0..n {
            which[g] = g % 6;
            for j in 0..15 {
                for c in 0..3 {
                    s.sh_coeffs[g * 48 + (j + 1) * 3 + c] =
                        proto[g % 6][c * 15 + j] + rng.range(-1e-3, 1e-3);
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cloud.sog");
        write(&file, &s, &SogOptions::default()).unwrap();
        let back = read(&file).unwrap().splats;
        for i in 0..n {
            let p = &back.means[i * 3..i * 3 + 3];
            let g = (0..n)
                .min_by(|&a, &b| {
                    let d = |g: usize| {
                        (0..3)
                            .map(|c| (s.means[g * 3 + c] - p[c]).powi(2))
                            .sum::<f32>()
                    };
                    d(a).total_cmp(&d(b))
                })
                .unwrap();
            for j in 0..15 {
                for c in 0..3 {
                    let got = back.sh_coeffs[i * 48 + (j + 1) * 3 + c];
                    let want = proto[which[g]][c * 15 + j];
                    assert!(
                        (got - want).abs() <= 3e-3,
                        "splat {g} coeff {j} ch {c}: {got}"
                    );
                }
            }
        }
    }

    #[test]
    fn bundle_and_folder_hold_the_same_splats_and_output_is_deterministic() {
        let s = random_splats(300, 1, 2.0, 3);
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("a.sog");
        write(&bundle, &s, &SogOptions::default()).unwrap();
        write(&dir.path().join("f"), &s, &SogOptions::default()).unwrap();
        let first = std::fs::read(dir.path().join("f/shN_labels.webp")).unwrap();
        write(&dir.path().join("g/meta.json"), &s, &SogOptions::default()).unwrap();
        assert_eq!(
            first,
            std::fs::read(dir.path().join("g/shN_labels.webp")).unwrap()
        );
        let a = read(&bundle).unwrap().splats;
        let b = read(&dir.path().join("f")).unwrap().splats;
        assert_eq!(a, b);
        assert_eq!(a.sh_degree, 1);
        assert_eq!(&std::fs::read(&bundle).unwrap()[..4], b"PK\x03\x04");
    }

    /// A bundle re-zipped by a general ZIP tool (DEFLATE entries, in another order) reads as the
    /// same splats as splat-transform's stored bundle.
    #[test]
    fn a_deflated_bundle_reads_like_the_stored_one() {
        let s = random_splats(300, 2, 2.0, 5);
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("f"), &s, &SogOptions::default()).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("f"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.reverse();
        let deflated = dir.path().join("deflated.sog");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&deflated).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for name in &names {
            zip.start_file(name.as_str(), options).unwrap();
            zip.write_all(&std::fs::read(dir.path().join("f").join(name)).unwrap())
                .unwrap();
        }
        zip.finish().unwrap();
        let mut archive = zip::ZipArchive::new(std::fs::File::open(&deflated).unwrap()).unwrap();
        assert_eq!(
            archive.by_index(0).unwrap().compression(),
            zip::CompressionMethod::Deflated
        );
        assert_eq!(
            read(&deflated).unwrap().splats,
            read(&dir.path().join("f")).unwrap().splats
        );
    }

    /// A folder SOG that cannot be written completely is not written at all: an image path taken
    /// by a folder fails the write and the earlier SOG in that folder still reads whole. Writing
    /// an SH-0 SOG over an SH-2 one removes the old SH images.
    #[test]
    fn a_failed_folder_write_leaves_the_old_sog_and_sh0_removes_stale_sh_images() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f");
        let old = random_splats(200, 2, 2.0, 1);
        write(&out, &old, &SogOptions::default()).unwrap();
        let before = read(&out).unwrap().splats;
        std::fs::remove_file(out.join(SCALES)).unwrap();
        std::fs::create_dir(out.join(SCALES)).unwrap();
        let err = write(&out, &random_splats(300, 2, 2.0, 2), &SogOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("scales.webp"), "{err}");
        std::fs::remove_dir(out.join(SCALES)).unwrap();
        // Nothing of the failed write landed: the old SOG minus the file we removed, no temps.
        let names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        assert_eq!(std::fs::read(out.join(MEANS_L)).unwrap(), {
            let again = dir.path().join("again");
            write(&again, &old, &SogOptions::default()).unwrap();
            std::fs::read(again.join(MEANS_L)).unwrap()
        });
        write(&out, &old, &SogOptions::default()).unwrap();
        assert_eq!(read(&out).unwrap().splats, before);
        write(&out, &random_splats(50, 0, 2.0, 3), &SogOptions::default()).unwrap();
        assert!(!out.join(SHN_LABELS).exists() && !out.join(SHN_CENTROIDS).exists());
        assert_eq!(read(&out).unwrap().splats.sh_degree, 0);
    }

    #[test]
    fn a_sog_named_file_that_is_not_a_zip_is_refused_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("notes.sog");
        std::fs::write(&bad, "just text").unwrap();
        let err = read(&bad).unwrap_err().to_string();
        assert!(
            err.contains("notes.sog") && err.contains("not a ZIP archive"),
            "{err}"
        );
    }

    #[test]
    fn sog_write_refuses_empty_nan_and_zero_quaternion_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let err = write(&out, &GaussianSplats::default(), &SogOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("splat count") && err.contains("at least one splat"),
            "{err}"
        );
        let mut s = random_splats(10, 0, 1.0, 1);
        s.means[4] = f32::NAN;
        let err = write(&out, &s, &SogOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("means[splat 1]"), "{err}");
        let mut s = random_splats(10, 0, 1.0, 1);
        s.rotations[8..12].fill(0.0);
        let err = write(&out, &s, &SogOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("rotations[splat 2]"), "{err}");
        let mut s = random_splats(10, 0, 1.0, 1);
        s.log_scales.pop();
        assert!(write(&out, &s, &SogOptions::default()).is_err());
        assert!(!out.exists());
    }

    #[test]
    fn sog_read_rejects_wrong_version_missing_image_and_bad_json_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(20, 0, 1.0, 2);
        write(dir.path(), &s, &SogOptions::default()).unwrap();
        let meta_path = dir.path().join("meta.json");
        let json = std::fs::read_to_string(&meta_path).unwrap();

        std::fs::write(&meta_path, json.replace("\"version\":2", "\"version\":3")).unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("meta.json") && err.contains("version 3"),
            "{err}"
        );

        std::fs::write(&meta_path, &json[..json.len() / 2]).unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("meta.json") && err.contains("corrupt"),
            "{err}"
        );

        std::fs::write(&meta_path, json.replace("\"count\":20", "\"count\":0")).unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("`count`"), "{err}");

        std::fs::write(&meta_path, json.replace("\"count\":20", "\"count\":5000")).unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("means_l.webp") && err.contains("image size"),
            "{err}"
        );

        std::fs::write(&meta_path, &json).unwrap();
        std::fs::remove_file(dir.path().join(QUATS)).unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("quats.webp"), "{err}");

        std::fs::write(dir.path().join(QUATS), b"RIFF....WEBP").unwrap();
        let err = read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("quats.webp"), "{err}");

        let err = read(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(
            err.contains("nope/meta.json") && err.contains("not found"),
            "{err}"
        );
    }

    #[test]
    fn transparent_texels_keep_their_colour_through_lossless_webp() {
        // Opacity 0 puts alpha 0 in sh0.webp; a lossy or "alpha-cleaning" encoder would zero
        // the RGB labels there.
        let mut s = random_splats(50, 0, 1.0, 9);
        s.logit_opacities.fill(-30.0);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &s, &SogOptions::default()).unwrap();
        let back = read(dir.path()).unwrap().splats;
        let spread = |v: &GaussianSplats| {
            v.sh_coeffs
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
                    (a.min(x), b.max(x))
                })
        };
        let (lo, hi) = spread(&back);
        assert!(hi - lo > 1.0, "colours collapsed: {lo}..{hi}");
        assert!(
            back.logit_opacities
                .iter()
                .all(|&l| l == -OPACITY_LOGIT_LIMIT)
        );
    }
}

/// Issue 41: the files an unbundled SOG's `meta.json` names resolve through [`ConfinedRoot`].
#[cfg(test)]
mod confinement_tests {
    use super::*;
    use crate::confined::testing::{Seeded, is_refusal, layout, model_is_inside};

    /// Property: over generated names, a `files[]` entry of an unbundled SOG is refused exactly
    /// when it leaves the meta.json's folder (bundle entries are read from inside the ZIP, never
    /// from the disk).
    #[test]
    fn meta_file_entries_are_refused_exactly_when_they_leave_the_sog_folder() {
        let (_t, root) = layout();
        let mut files = SogFiles::Folder { dir: root.clone() };
        let mut g = Seeded(4104);
        for case in 0..1000 {
            let w = g.path();
            let got = files.read(&w);
            let refused = got.as_ref().err().is_some_and(|e| is_refusal(e, "files[]"));
            assert_eq!(
                refused,
                !model_is_inside(&root, &[], &w),
                "case {case}: `{w}`"
            );
        }
    }
}
