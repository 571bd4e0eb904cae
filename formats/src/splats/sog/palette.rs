//! SH palettes of SOG files: fitted per file ([`FilePalette::fit`], what [`super::write`] does), or
//! fitted once and shared by many files ([`ShPalette`], what a streamed SOG's chunks of one level
//! use), so that N files cost one k-means instead of N.
//!
//! A SOG has no external palette: every file carries the palette entries its labels index. A file
//! written against a [`ShPalette`] carries the entries its splats use, in the shared order, with the
//! shared 256-entry scalar codebook, so one entry decodes to the same values in every file of the
//! palette. The fit is the one a single SOG uses ([`super::sh_palette`]: Lloyd rounds and seed from
//! [`SogOptions`], tree-structured above [`super::FLAT_KMEANS_MAX_PAIRS`]), on at most
//! [`PALETTE_FIT_MAX_ROWS`] evenly spaced splats, and every splat then takes the entry the fit
//! would have given it: the nearest of a flat palette, or the nearest of its nearest tree group.
//!
//! Source: splat-transform `src/lib/writers/write-sog.ts` (palette layout, palette size rule);
//! Gersho & Gray, "Vector Quantization and Signal Compression", 1992, §12.6 (search of a
//! tree-structured codebook).

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::{
    BRUTE_FORCE_MAX_K, GaussianSplats, KdTree, MAX_SH_PALETTE, SogOptions, nearest_brute_force,
    quantize_1d, sh_palette, sh_palette_size,
};
use crate::{Error, Result};

/// Most splats a [`ShPalette`] is fitted on. Twice the largest palette (65,536 entries), so each
/// entry is fitted on about two splats at worst; measured on the 1 M-splat synthetic aerial scene
/// (SH 3, 2-core CPU) this keeps the fit of level 0 within the budget of issue 43 (see
/// `docs/splats.md`, "Streamed SOG"). Levels with fewer splats are fitted on all of them, and then
/// get exactly the palette a single SOG of the level would.
pub const PALETTE_FIT_MAX_ROWS: usize = 1 << 17;

/// How a rest vector finds its palette entry, mirroring the fit: the nearest entry of a flat
/// range, or at a tree level the nearest group centroid, then that group's index.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PaletteIndex {
    /// Entries `start..end`, searched for the nearest (lowest index on ties).
    Flat { start: u32, end: u32 },
    /// `groups` `[G, d]` (only groups that own entries), each with the index of its entries.
    Tree {
        groups: Vec<f32>,
        children: Vec<PaletteIndex>,
    },
}

impl PaletteIndex {
    /// All `k` entries, searched flat.
    pub(super) fn flat(k: usize) -> Self {
        Self::Flat {
            start: 0,
            end: k as u32,
        }
    }

    /// The same index with every entry number moved up by `by` (a group's place in the palette).
    pub(super) fn shifted(self, by: u32) -> Self {
        match self {
            Self::Flat { start, end } => Self::Flat {
                start: start + by,
                end: end + by,
            },
            Self::Tree { groups, children } => Self::Tree {
                groups,
                children: children.into_iter().map(|c| c.shifted(by)).collect(),
            },
        }
    }

    /// The entry of `q` (`[d]`): `kd` holds a k-d tree for every flat range larger than
    /// [`BRUTE_FORCE_MAX_K`], keyed by its start, as [`super::kmeans`] searches those.
    fn nearest(
        &self,
        centroids: &[f32],
        d: usize,
        kd: &BTreeMap<u32, KdTree<'_>>,
        q: &[f32],
    ) -> u32 {
        match self {
            Self::Flat { start, end } => match kd.get(start) {
                Some(tree) => start + tree.nearest(q),
                None => {
                    let range = &centroids[*start as usize * d..*end as usize * d];
                    start + nearest_brute_force(range, d, q)
                }
            },
            Self::Tree { groups, children } => {
                let g = nearest_brute_force(groups, d, q) as usize;
                children[g].nearest(centroids, d, kd, q)
            }
        }
    }

    /// The flat ranges that [`Self::nearest`] searches with a k-d tree.
    fn large_ranges(&self, out: &mut Vec<(u32, u32)>) {
        match self {
            Self::Flat { start, end } if (end - start) as usize > BRUTE_FORCE_MAX_K => {
                out.push((*start, *end));
            }
            Self::Flat { .. } => {}
            Self::Tree { children, .. } => children.iter().for_each(|c| c.large_ranges(out)),
        }
    }
}

/// The SH palette one SOG file stores: the scalar codebook (`meta.json` `shN.codebook`), each
/// entry's values as codebook indices, and each splat's entry.
pub(super) struct FilePalette {
    /// 256 values (or fewer for tiny palettes).
    pub codebook: Vec<f32>,
    /// `[K, d]` index into `codebook` of every entry value, channel-major rows like PLY `f_rest`.
    pub entry_values: Vec<u8>,
    /// `[N]` entry of every splat (input order), < K.
    pub labels: Vec<u32>,
}

impl FilePalette {
    /// This file's own palette, fitted on all its splats (what [`super::write`] stores).
    pub fn fit(splats: &GaussianSplats, options: &SogOptions) -> Self {
        let n = splats.len();
        let dim = rest_dim(splats.sh_degree);
        let rest = rest_rows(splats, 0..n);
        let entries = options
            .sh_palette
            .map_or_else(|| sh_palette_size(n), |p| p.clamp(1, n));
        let (centroids, labels, _) = sh_palette(&rest, dim, entries, options);
        let (codebook, entry_values) = quantize_1d(&centroids);
        Self {
            codebook,
            entry_values,
            labels,
        }
    }

    /// Entries in this file.
    pub fn len(&self, dim: usize) -> usize {
        self.entry_values.len() / dim
    }
}

/// Experimental: an SH palette fitted once and shared by several SOG files (the chunks of one
/// streamed SOG level), written with [`super::write_with_palette`].
///
/// Guarantees: the same splats and options give the same palette (on every thread count); a
/// splat's entry ([`ShPalette::labels`]) is the one the fit gives it when the fit saw it, and
/// otherwise the nearest entry the fit's search finds (the nearest overall for a flat palette,
/// within the nearest group for a tree). Not guaranteed: that a splat's entry is the nearest of the
/// whole palette (tree palettes), or that the palette is as good as one fitted on every splat
/// when more than [`PALETTE_FIT_MAX_ROWS`] are given.
#[derive(Debug, Clone)]
pub struct ShPalette {
    sh_degree: u32,
    /// `[K, d]` entries, d = 3·((degree + 1)² − 1), channel-major like PLY `f_rest`.
    centroids: Vec<f32>,
    codebook: Vec<f32>,
    /// `[K, d]` index into `codebook` of every entry value.
    entry_values: Vec<u8>,
    index: PaletteIndex,
}

impl ShPalette {
    /// Fit the palette of `splats` (all the splats that will index it).
    ///
    /// - `splats`: ≥ 1 splat, SH degree 1..=3, finite.
    /// - `options`: `sh_palette` entries (default: the size a single SOG of all `splats` would
    ///   get, [`sh_palette_size`]), Lloyd rounds and seed.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (context `"SOG palette"`) for no splats, SH degree 0 or above 3,
    /// inconsistent shapes, NaN/Inf, or a palette size outside 1 ..= 65,536.
    pub fn fit(splats: &GaussianSplats, options: &SogOptions) -> Result<Self> {
        check_fit_input(splats, options)?;
        let n = splats.len();
        let dim = rest_dim(splats.sh_degree);
        let rest = rest_rows(splats, sample_rows(n, PALETTE_FIT_MAX_ROWS));
        let entries = options
            .sh_palette
            .map_or_else(|| sh_palette_size(n), |p| p.clamp(1, n));
        let (centroids, _, index) = sh_palette(&rest, dim, entries, options);
        let (codebook, entry_values) = quantize_1d(&centroids);
        Ok(Self {
            sh_degree: splats.sh_degree,
            centroids,
            codebook,
            entry_values,
            index,
        })
    }

    /// Entries K.
    pub fn len(&self) -> usize {
        self.entry_values.len() / rest_dim(self.sh_degree)
    }

    /// Whether the palette has no entries (never, for a fitted one).
    pub fn is_empty(&self) -> bool {
        self.entry_values.is_empty()
    }

    /// SH degree of the splats it was fitted on (and that may index it).
    pub fn sh_degree(&self) -> u32 {
        self.sh_degree
    }

    /// `[N]` entry (< K) of every splat of `splats`, in input order; parallel, deterministic.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (context `"SOG palette"`) when `splats` has another SH degree
    /// than the palette or inconsistent shapes.
    pub fn labels(&self, splats: &GaussianSplats) -> Result<Vec<u32>> {
        splats.check_shapes(CONTEXT)?;
        self.check_degree(splats.sh_degree)?;
        let d = rest_dim(self.sh_degree);
        let mut large = Vec::new();
        self.index.large_ranges(&mut large);
        let kd: BTreeMap<u32, KdTree<'_>> = large
            .into_iter()
            .map(|(s, e)| {
                let tree = KdTree::new(&self.centroids[s as usize * d..e as usize * d], d);
                (s, tree)
            })
            .collect();
        Ok((0..splats.len())
            .into_par_iter()
            .map_init(
                || vec![0f32; d],
                |row, g| {
                    rest_row(splats, g, row);
                    self.index.nearest(&self.centroids, d, &kd, row)
                },
            )
            .collect())
    }

    /// The palette a file with these `labels` (`[N]`, each < K) stores: the entries used, in
    /// palette order, and the labels renumbered into them; the codebook is the shared one.
    pub(super) fn for_file(&self, labels: &[u32]) -> FilePalette {
        let d = rest_dim(self.sh_degree);
        let mut renumber = vec![u32::MAX; self.len()];
        for &l in labels {
            renumber[l as usize] = 0;
        }
        let mut entry_values = Vec::new();
        let mut used = 0u32;
        for (entry, slot) in renumber.iter_mut().enumerate() {
            if *slot == 0 {
                *slot = used;
                used += 1;
                entry_values.extend_from_slice(&self.entry_values[entry * d..(entry + 1) * d]);
            }
        }
        FilePalette {
            codebook: self.codebook.clone(),
            entry_values,
            labels: labels.iter().map(|&l| renumber[l as usize]).collect(),
        }
    }

    /// The boundary check of [`super::write_with_palette`]: `splats` may index this palette by
    /// `labels`.
    pub(super) fn check_file(&self, splats: &GaussianSplats, labels: &[u32]) -> Result<()> {
        self.check_degree(splats.sh_degree)?;
        if labels.len() != splats.len() {
            return Err(invalid(
                "labels",
                format!("one palette entry per splat ({})", splats.len()),
                format!("{} labels", labels.len()),
            ));
        }
        if let Some(i) = labels.iter().position(|&l| l as usize >= self.len()) {
            return Err(invalid(
                &format!("labels[{i}]"),
                format!("an entry of the {}-entry palette", self.len()),
                labels[i].to_string(),
            ));
        }
        Ok(())
    }

    fn check_degree(&self, sh_degree: u32) -> Result<()> {
        if sh_degree == self.sh_degree {
            return Ok(());
        }
        Err(invalid(
            "sh_degree",
            format!("{} (the degree the palette was fitted on)", self.sh_degree),
            sh_degree.to_string(),
        ))
    }
}

const CONTEXT: &str = "SOG palette";

fn invalid(field: &str, expected: String, found: String) -> Error {
    Error::InvalidInput {
        context: CONTEXT,
        field: field.into(),
        expected,
        found,
    }
}

/// The boundary check of [`ShPalette::fit`].
fn check_fit_input(splats: &GaussianSplats, options: &SogOptions) -> Result<()> {
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    if splats.is_empty() {
        return Err(invalid(
            "splat count",
            "at least one splat".into(),
            "0".into(),
        ));
    }
    if !(1..=3).contains(&splats.sh_degree) {
        return Err(invalid(
            "sh_degree",
            "1 ..= 3 (degree 0 has no SH palette)".into(),
            splats.sh_degree.to_string(),
        ));
    }
    if let Some(p) = options
        .sh_palette
        .filter(|p| !(1..=MAX_SH_PALETTE).contains(p))
    {
        return Err(invalid(
            "SH palette size",
            format!("1 ..= {MAX_SH_PALETTE} entries (labels are 16-bit)"),
            p.to_string(),
        ));
    }
    Ok(())
}

/// Values in one splat's rest vector: 3 channels × the coefficients above degree 0.
fn rest_dim(sh_degree: u32) -> usize {
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    3 * (k - 1)
}

/// At most `max` row indices of `0..n`, evenly spaced (all of them when n ≤ `max`).
fn sample_rows(n: usize, max: usize) -> impl Iterator<Item = usize> {
    let take = n.min(max);
    (0..take).map(move |i| i * n / take)
}

/// Splat `g`'s rest vector into `out` (`[d]`), channel-major like PLY `f_rest`:
/// [R c1.., G c1.., B c1..] from Kiln's coefficient-major `sh_coeffs`.
fn rest_row(splats: &GaussianSplats, g: usize, out: &mut [f32]) {
    let k = splats.sh_coeffs_per_channel();
    let coeffs = k - 1;
    for j in 0..coeffs {
        for c in 0..3 {
            out[c * coeffs + j] = splats.sh_coeffs[g * k * 3 + (j + 1) * 3 + c];
        }
    }
}

/// `[rows, d]` rest vectors of the splats `rows`.
fn rest_rows(splats: &GaussianSplats, rows: impl Iterator<Item = usize>) -> Vec<f32> {
    let d = rest_dim(splats.sh_degree);
    let mut out = Vec::new();
    for g in rows {
        let at = out.len();
        out.resize(at + d, 0.0);
        rest_row(splats, g, &mut out[at..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::test_data::{Rng, random_splats};
    use super::super::{read, tree_kmeans, write, write_with_palette};
    use super::*;

    /// 6000 rows of d = 45 around 1500 centres (as the tree k-means test in `sog.rs`).
    fn clustered_rows(seed: u64) -> Vec<f32> {
        let d = 45;
        let mut rng = Rng::new(seed);
        let centres: Vec<f32> = (0..1500 * d).map(|_| rng.range(-1.0, 1.0)).collect();
        (0..6000)
            .flat_map(|i| (0..d).map(move |a| ((i * 7919) % 1500) * d + a))
            .map(|at| centres[at] + rng.range(-0.1, 0.1))
            .collect()
    }

    #[test]
    fn the_tree_search_finds_the_entry_the_tree_fit_gave_each_row() {
        let d = 45;
        let rows = clustered_rows(9);
        let (centroids, labels, index) = tree_kmeans(&rows, d, 1024, 10, 3);
        assert!(matches!(index, PaletteIndex::Tree { .. }));
        let mut large = Vec::new();
        index.large_ranges(&mut large);
        let kd: BTreeMap<u32, KdTree<'_>> = large
            .into_iter()
            .map(|(s, e)| {
                (
                    s,
                    KdTree::new(&centroids[s as usize * d..e as usize * d], d),
                )
            })
            .collect();
        for (row, &label) in rows.chunks_exact(d).zip(&labels) {
            assert_eq!(index.nearest(&centroids, d, &kd, row), label);
        }
    }

    /// A palette fitted on one file's splats (fewer than [`PALETTE_FIT_MAX_ROWS`]) is the
    /// palette that file fits for itself: the decoded splats are the same.
    #[test]
    fn a_palette_fitted_on_one_file_s_splats_decodes_as_the_file_s_own_fit() {
        let s = random_splats(3000, 3, 4.0, 21);
        let options = SogOptions::default();
        let palette = ShPalette::fit(&s, &options).unwrap();
        let labels = palette.labels(&s).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (own, shared) = (dir.path().join("own.sog"), dir.path().join("shared.sog"));
        write(&own, &s, &options).unwrap();
        write_with_palette(&shared, &s, &options, &palette, &labels).unwrap();
        let (a, b) = (read(&own).unwrap().splats, read(&shared).unwrap().splats);
        assert_eq!(a.sh_coeffs, b.sh_coeffs);
        assert_eq!(a.means, b.means);
    }

    /// Two halves of a cloud written against one palette: each file stores only the entries it
    /// uses, and an entry decodes to the same values in both (one codebook), so the halves
    /// together show no more distinct SH rest vectors than the palette has.
    #[test]
    fn files_sharing_a_palette_store_the_entries_they_use_with_one_codebook() {
        let s = random_splats(2000, 2, 4.0, 5);
        let options = SogOptions {
            sh_palette: Some(48),
            ..SogOptions::default()
        };
        let palette = ShPalette::fit(&s, &options).unwrap();
        assert_eq!(palette.len(), 48);
        let labels = palette.labels(&s).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut rest = std::collections::BTreeSet::new();
        for (half, range) in [(0, 0..300), (1, 300..2000)] {
            let idx: Vec<u32> = range.map(|i| i as u32).collect();
            let part = s.select(idx.iter().map(|&i| i as usize));
            let part_labels: Vec<u32> = idx.iter().map(|&i| labels[i as usize]).collect();
            let path = dir.path().join(format!("{half}.sog"));
            write_with_palette(&path, &part, &options, &palette, &part_labels).unwrap();
            let back = read(&path).unwrap().splats;
            let k = back.sh_coeffs_per_channel();
            for g in 0..back.len() {
                let row = &back.sh_coeffs[g * k * 3 + 3..(g + 1) * k * 3];
                rest.insert(row.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            }
        }
        assert!(rest.len() <= 48, "{} distinct rest vectors", rest.len());
    }

    #[test]
    fn a_palette_refuses_degree_zero_other_degrees_and_bad_labels_naming_the_field() {
        let options = SogOptions::default();
        let err = ShPalette::fit(&random_splats(10, 0, 1.0, 1), &options).unwrap_err();
        assert!(err.to_string().contains("sh_degree"), "{err}");
        let s = random_splats(100, 1, 1.0, 2);
        let palette = ShPalette::fit(&s, &options).unwrap();
        let err = palette.labels(&random_splats(10, 2, 1.0, 3)).unwrap_err();
        assert!(err.to_string().contains("sh_degree"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sog");
        let labels = palette.labels(&s).unwrap();
        let err = write_with_palette(&path, &s, &options, &palette, &labels[1..]).unwrap_err();
        assert!(err.to_string().contains("labels"), "{err}");
        let mut past = labels.clone();
        past[7] = palette.len() as u32;
        let err = write_with_palette(&path, &s, &options, &palette, &past).unwrap_err();
        assert!(err.to_string().contains("labels[7]"), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn sample_rows_are_evenly_spaced_and_all_rows_when_few() {
        assert_eq!(sample_rows(5, 10).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(sample_rows(10, 4).collect::<Vec<_>>(), [0, 2, 5, 7]);
    }
}
