//! The one domain policy for splat values: what every reader accepts, clamps or refuses, and
//! what every writer must say when its format cannot hold a value (issue 44, rule 2).
//!
//! Why one module: the same fault (an opacity of 1.2, a negative scale, a log-scale of 100)
//! used to pass one reader silently, be refused by another and fail a later stage in a third
//! with a message naming neither file nor splat. Every reader now calls [`ValueCheck`] on the
//! values as its file stores them, before converting them, and every writer that narrows a
//! range calls [`warn_write_clamp`]; so the outcome depends on the value, not on the format.
//!
//! The policy, per attribute (N splats; "clamp" = clamped with one `tracing::warn!` per
//! (file, attribute) that counts the values and names the file, the attribute and the first
//! splat; "refuse" = [`Error::Invalid`] naming the file, the attribute and the first bad splat,
//! at read time, before any stage runs):
//!
//! | attribute | refused | clamped | why |
//! |---|---|---|---|
//! | positions | NaN, ±Inf | — | no position is meant by them |
//! | linear scales | NaN, ±Inf, < 0 | 0 → e^[`LOG_SCALE_MIN`] | a negative standard deviation means nothing; a zero one is a flat splat, drawn the same as one e^−30 m thick |
//! | log scales | NaN, ±Inf | outside [[`LOG_SCALE_MIN`], [`LOG_SCALE_MAX`]] | see the constants |
//! | linear opacities | NaN, ±Inf | outside [0, 1] | a viewer clamps alpha to [0, 1] before blending, so 1.2 draws as 1 and −0.1 as 0 |
//! | logit opacities | NaN, ±Inf | — | every finite logit is an opacity in (0, 1) |
//! | rotations | NaN, ±Inf, the zero quaternion | — | a zero quaternion has no orientation; any other is normalised by every renderer |
//! | SH coefficients | NaN, ±Inf | — | every finite colour is drawn (and clamped by the display) |
//!
//! Linear opacities of exactly 0 or 1 are in the domain; their logits are kept finite by
//! [`OPACITY_EPS`] (a conversion, not a clamp, so it is not warned about).

use std::path::Path;

use super::GaussianSplats;
use crate::{Error, Result};

/// Smallest log-scale (natural log of metres) a splat keeps: e^−30 m ≈ 9.4·10⁻¹⁴ m. Any
/// thinner splat projects to far below a pixel at any camera distance Kiln renders (near plane
/// 0.01 m) and is drawn as the rasteriser's screen-space low-pass alone (eps2d 0.3 px²), so
/// raising it to this value changes no pixel; it also keeps s² and s⁶ (the covariance
/// determinant) non-zero in f64.
pub const LOG_SCALE_MIN: f32 = -30.0;

/// Largest log-scale a splat keeps: e^20 m ≈ 4.9·10⁸ m, larger than any scene Kiln places
/// (f32 positions step by 31 mm at 500 km). Beyond about e^44 the covariance s² overflows f32
/// and the rasteriser's projection (J·Σ·Jᵀ, focal lengths of 10³ px) fails on non-finite
/// values; a splat this wide already covers every view of the scene, so capping it at e^20
/// keeps what a viewer draws (a veil over the whole view) while keeping every later stage
/// finite. PlayCanvas's compressed PLY uses the same ±20 bounds.
pub const LOG_SCALE_MAX: f32 = 20.0;

/// Opacities are kept in [ε, 1 − ε] when turned into logits, so an opacity of exactly 0 or 1
/// has a finite logit (±13.8), which sigmoid maps back to within 10⁻⁶ of it.
pub const OPACITY_EPS: f64 = 1e-6;

/// Squared length below which a quaternion counts as zero: the writers normalise in f64 and
/// refuse lengths under 1e−12, so a reader lets through only what every writer can store.
const MIN_QUATERNION_NORM2: f64 = 1e-24;

/// The value check of one file being read: names `path` and `format` in every warning and
/// error, so the user learns which file and which attribute (as the format spells it) hold the
/// values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueCheck<'a> {
    pub path: &'a Path,
}

/// Attribute names of one format, as its files spell them, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttributeNames {
    pub positions: &'static str,
    pub scales: &'static str,
    pub rotations: &'static str,
    pub opacities: &'static str,
    pub sh: &'static str,
}

impl<'a> ValueCheck<'a> {
    /// The check of a file at `path`.
    pub fn new(path: &'a Path) -> Self {
        Self { path }
    }

    /// The refusal of value `found` of splat `splat`'s `attribute`.
    fn refuse(&self, attribute: &str, splat: usize, expected: &str, found: impl ToString) -> Error {
        Error::Invalid {
            path: self.path.to_path_buf(),
            field: format!("{attribute} of splat {splat}"),
            expected: format!("{expected} (fix or remove that splat and export again)"),
            found: found.to_string(),
        }
    }

    /// One warning for the `count` values of `attribute` that were clamped into `range`.
    fn warn_clamped(
        &self,
        attribute: &str,
        count: usize,
        n: usize,
        first: (usize, f32),
        range: &str,
    ) {
        if count == 0 {
            return;
        }
        tracing::warn!(
            "{}: {count} `{attribute}` values of {n} splats are outside {range}; clamped into \
             it (first: splat {}, {})",
            self.path.display(),
            first.0,
            first.1,
        );
    }

    /// Refuse the first NaN/±Inf of `values` (`[N, per]`) as `attribute`.
    pub fn finite(&self, attribute: &str, values: &[f32], per: usize) -> Result<()> {
        match values.iter().position(|v| !v.is_finite()) {
            Some(at) => Err(self.refuse(attribute, at / per, "a finite value", values[at])),
            None => Ok(()),
        }
    }

    /// Linear standard deviations (`[N, 3]` metres) → log-scales, by the policy above: refuse
    /// non-finite and negative values, clamp 0 and anything whose log leaves
    /// [[`LOG_SCALE_MIN`], [`LOG_SCALE_MAX`]].
    pub fn linear_scales_to_log(&self, attribute: &str, scales: &[f32]) -> Result<Vec<f32>> {
        if let Some(at) = scales.iter().position(|s| !s.is_finite() || *s < 0.0) {
            let expected = "a finite scale ≥ 0 (a linear standard deviation in metres)";
            return Err(self.refuse(attribute, at / 3, expected, scales[at]));
        }
        let mut log_scales: Vec<f32> = scales.iter().map(|s| s.ln()).collect();
        let (count, first) = clamp_into(&mut log_scales, LOG_SCALE_MIN, LOG_SCALE_MAX);
        let first = first.map(|at| (at / 3, scales[at]));
        let range = format!("[e^{LOG_SCALE_MIN}, e^{LOG_SCALE_MAX}] m");
        self.warn_clamped(
            attribute,
            count,
            scales.len() / 3,
            first.unwrap_or_default(),
            &range,
        );
        Ok(log_scales)
    }

    /// Log-scales (`[N, 3]`) in place: refuse non-finite, clamp into
    /// [[`LOG_SCALE_MIN`], [`LOG_SCALE_MAX`]].
    pub fn log_scales(&self, attribute: &str, log_scales: &mut [f32]) -> Result<()> {
        self.finite(attribute, log_scales, 3)?;
        let first = log_scales
            .iter()
            .position(|v| !(LOG_SCALE_MIN..=LOG_SCALE_MAX).contains(v))
            .map(|at| (at / 3, log_scales[at]));
        let (count, _) = clamp_into(log_scales, LOG_SCALE_MIN, LOG_SCALE_MAX);
        let range = format!("the log range [{LOG_SCALE_MIN}, {LOG_SCALE_MAX}]");
        let n = log_scales.len() / 3;
        self.warn_clamped(attribute, count, n, first.unwrap_or_default(), &range);
        Ok(())
    }

    /// Linear opacities (`[N]`) → logits: refuse non-finite, clamp into [0, 1].
    pub fn linear_opacities_to_logit(&self, attribute: &str, alphas: &[f32]) -> Result<Vec<f32>> {
        self.finite(attribute, alphas, 1)?;
        let mut clamped = alphas.to_vec();
        let (count, first) = clamp_into(&mut clamped, 0.0, 1.0);
        let first = first.map(|at| (at, alphas[at])).unwrap_or_default();
        self.warn_clamped(attribute, count, alphas.len(), first, "[0, 1]");
        Ok(clamped
            .iter()
            .map(|&a| opacity_to_logit(f64::from(a)))
            .collect())
    }

    /// Rotations (`[N, 4]`, any component order): refuse non-finite and zero quaternions.
    pub fn rotations(&self, attribute: &str, rotations: &[f32]) -> Result<()> {
        self.finite(attribute, rotations, 4)?;
        let zero = rotations.chunks_exact(4).position(|q| {
            q.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() < MIN_QUATERNION_NORM2
        });
        match zero {
            Some(i) => {
                let q = format!("{:?}", &rotations[4 * i..4 * i + 4]);
                let expected = "a non-zero quaternion (length ≥ 1e-12)";
                Err(self.refuse(attribute, i, expected, q))
            }
            None => Ok(()),
        }
    }

    /// Every field of `splats` (training parametrisation, as a reader returns it) by the
    /// policy: positions, rotations and SH finite, rotations non-zero, logits finite,
    /// log-scales finite and clamped into range. Readers call this last, on what they decoded.
    pub fn splats(&self, names: &AttributeNames, splats: &mut GaussianSplats) -> Result<()> {
        let k3 = splats.sh_coeffs_per_channel() * 3;
        self.finite(names.positions, &splats.means, 3)?;
        self.log_scales(names.scales, &mut splats.log_scales)?;
        self.rotations(names.rotations, &splats.rotations)?;
        self.finite(names.opacities, &splats.logit_opacities, 1)?;
        self.finite(names.sh, &splats.sh_coeffs, k3.max(1))
    }
}

/// The logit of opacity `alpha` (in [0, 1]) kept finite by [`OPACITY_EPS`].
pub(crate) fn opacity_to_logit(alpha: f64) -> f32 {
    super::logit(alpha.clamp(OPACITY_EPS, 1.0 - OPACITY_EPS))
}

/// Clamp every value of `values` into [lo, hi]: how many changed and the index of the first.
fn clamp_into(values: &mut [f32], lo: f32, hi: f32) -> (usize, Option<usize>) {
    let mut count = 0;
    let mut first = None;
    for (i, v) in values.iter_mut().enumerate() {
        let c = v.clamp(lo, hi);
        if c != *v {
            count += 1;
            first.get_or_insert(i);
            *v = c;
        }
    }
    (count, first)
}

/// What a writer says when `output`'s format cannot hold some values of `attribute`: one
/// warning counting the values outside [lo, hi] that it will clamp, naming the output and the
/// attribute, with the first splat. Returns that count (0: nothing said).
///
/// - `values`: (splat index, value) pairs, e.g. the log-scales of N splats as
///   `(i / 3, log_scales[i])`; `n`: the number of splats, for the message.
///
/// Writers call it before they quantise, so no writer clamps silently.
pub(crate) fn warn_write_clamp(
    output: &Path,
    format: &str,
    attribute: &str,
    values: impl IntoIterator<Item = (usize, f32)>,
    n: usize,
    (lo, hi): (f32, f32),
) -> usize {
    let mut count = 0;
    let mut first = None;
    for (splat, v) in values {
        if v < lo || v > hi {
            count += 1;
            first.get_or_insert((splat, v));
        }
    }
    if let Some((splat, v)) = first {
        tracing::warn!(
            "{}: {format} holds `{attribute}` only in [{lo}, {hi}]; {count} values of {n} \
             splats were clamped into it (first: splat {splat}, {v})",
            output.display(),
        );
    }
    count
}

/// `read` (a reader's splats, as decoded) checked by the policy ([`ValueCheck::splats`]) with
/// errors and warnings naming `path` and `names`: the last step of every format's `read`.
pub(crate) fn checked(
    path: &Path,
    names: &AttributeNames,
    read: Result<super::placed::PlacedSplats>,
) -> Result<super::placed::PlacedSplats> {
    let mut placed = read?;
    ValueCheck::new(path).splats(names, &mut placed.splats)?;
    Ok(placed)
}

/// The policy checked through every reader and writer, on seeded generated splat sets: each
/// attribute set out of its domain in each way, in each format that can store it, gives the
/// policy's outcome (a refusal naming file, attribute and first splat, or a clamp with exactly
/// one warning per attribute counting the values), and every writer warns for what it clamps.
/// Expected values come from the policy table and the formats' byte ranges, not from output.
#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::splats::glb::{self, SplatGlbOptions};
    use crate::splats::test_data::{Rng, random_splats};
    use crate::splats::{compressed_ply, convert, dot_splat, ply, sigmoid, sog, spz};

    /// The `WARN` lines `f` emits (on this thread) and what it returns.
    pub(crate) fn warnings<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || SharedBuf(sink.clone()))
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        (out, text.lines().map(String::from).collect())
    }

    struct SharedBuf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `k` distinct splat indices of `n` (k ≤ n), ascending.
    fn pick(r: &mut Rng, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + (r.next_f32() * (n - i) as f32) as usize % (n - i);
            all.swap(i, j);
        }
        let mut chosen = all[..k].to_vec();
        chosen.sort_unstable();
        chosen
    }

    /// An INRIA PLY (SH degree 0, all `float`, little-endian) holding exactly `s`'s values,
    /// unchecked (the writer refuses non-finite ones), plus a `filter_3D` column when given.
    pub(crate) fn raw_ply(path: &Path, s: &GaussianSplats, filter: Option<&[f32]>) {
        raw_ply_as(path, s, filter, false);
    }

    /// [`raw_ply`], in ASCII when `ascii` (values as Rust prints them: `NaN`, `inf`, `-inf`).
    fn raw_ply_as(path: &Path, s: &GaussianSplats, filter: Option<&[f32]>, ascii: bool) {
        let mut names = vec!["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity"];
        names.extend([
            "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
        ]);
        if filter.is_some() {
            names.push("filter_3D");
        }
        let format = if ascii {
            "ascii"
        } else {
            "binary_little_endian"
        };
        let mut out = format!("ply\nformat {format} 1.0\nelement vertex {}\n", s.len());
        for n in &names {
            out.push_str(&format!("property float {n}\n"));
        }
        out.push_str("end_header\n");
        let mut bytes = out.into_bytes();
        for i in 0..s.len() {
            let mut row: Vec<f32> = s.means[3 * i..3 * i + 3].to_vec();
            row.extend(&s.sh_coeffs[3 * i..3 * i + 3]);
            row.push(s.logit_opacities[i]);
            row.extend(&s.log_scales[3 * i..3 * i + 3]);
            row.extend(&s.rotations[4 * i..4 * i + 4]);
            row.extend(filter.map(|f| f[i]));
            if ascii {
                let text: Vec<String> = row.iter().map(|v| v.to_string()).collect();
                bytes.extend(text.join(" ").bytes());
                bytes.push(b'\n');
            } else {
                bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
            }
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// A `.splat` file: positions, linear scales as given, grey, alpha byte, rotation bytes.
    fn raw_dot_splat(path: &Path, means: &[f32], scales: &[f32], rot: &[[u8; 4]]) {
        let mut bytes = Vec::new();
        for i in 0..rot.len() {
            for v in means[3 * i..3 * i + 3]
                .iter()
                .chain(&scales[3 * i..3 * i + 3])
            {
                bytes.extend(v.to_le_bytes());
            }
            bytes.extend([128, 128, 128, 200]);
            bytes.extend(rot[i]);
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// A plain `KHR_gaussian_splatting` GLB of `s` with the f32 values of `attribute` (e.g.
    /// `"KHR_gaussian_splatting:OPACITY"`) replaced by `values`, as another tool may store them.
    fn raw_glb(path: &Path, s: &GaussianSplats, attribute: &str, values: &[f32]) {
        let options = SplatGlbOptions {
            spz: None,
            ..Default::default()
        };
        let mut bytes = glb::encode(s, &options).unwrap();
        let json_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let doc: serde_json::Value = serde_json::from_slice(&bytes[20..20 + json_len]).unwrap();
        let accessor = &doc["accessors"][doc["meshes"][0]["primitives"][0]["attributes"][attribute]
            .as_u64()
            .unwrap() as usize];
        let view = &doc["bufferViews"][accessor["bufferView"].as_u64().unwrap() as usize];
        let at = 20
            + json_len
            + 8
            + view["byteOffset"].as_u64().unwrap_or(0) as usize
            + accessor["byteOffset"].as_u64().unwrap_or(0) as usize;
        for (j, v) in values.iter().enumerate() {
            bytes[at + 4 * j..at + 4 * j + 4].copy_from_slice(&v.to_le_bytes());
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// The refusal text of reading `path`, which must name it, `attribute` and `splat`.
    fn assert_refused(path: &Path, attribute: &str, splat: usize) {
        let e = convert::read(path).unwrap_err().to_string();
        let named = format!("{attribute} of splat {splat}");
        assert!(
            e.contains(&path.display().to_string()) && e.contains(&named),
            "{named}: {e}"
        );
    }

    /// The one warning of a clamp: names the file and the attribute, counts `count`.
    fn assert_one_clamp_warning(lines: &[String], path: &Path, attribute: &str, count: usize) {
        let hits: Vec<&String> = lines.iter().filter(|l| l.contains(attribute)).collect();
        assert_eq!(hits.len(), 1, "one warning for {attribute}: {lines:?}");
        let w = hits[0];
        assert!(w.contains(&path.display().to_string()), "{w}");
        assert!(w.contains(&format!(" {count} ")), "count {count}: {w}");
    }

    const OPACITY: &str = "KHR_gaussian_splatting:OPACITY";
    const SCALE: &str = "KHR_gaussian_splatting:SCALE";

    #[test]
    fn linear_opacities_outside_0_1_clamp_with_one_warning_and_read_as_the_clamp() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..12u64 {
            let mut r = Rng::new(seed);
            let n = 2 + (seed as usize % 9);
            let s = random_splats(n, (seed % 2) as u32, 3.0, seed);
            let mut alphas: Vec<f32> = s
                .logit_opacities
                .iter()
                .map(|&l| sigmoid(l) as f32)
                .collect();
            let bad = pick(&mut r, n, 1 + seed as usize % n);
            for &i in &bad {
                // Above 1 or below 0, by up to 2.
                alphas[i] = if r.next_f32() < 0.5 {
                    1.0 + r.range(1e-3, 2.0)
                } else {
                    -r.range(1e-3, 2.0)
                };
            }
            let path = dir.path().join(format!("opacity{seed}.glb"));
            raw_glb(&path, &s, OPACITY, &alphas);
            let (read, lines) = warnings(|| convert::read(&path));
            let read = read.unwrap().splats;
            assert_one_clamp_warning(&lines, &path, OPACITY, bad.len());
            for (i, a) in alphas.iter().enumerate() {
                let want = f64::from(a.clamp(0.0, 1.0)).clamp(OPACITY_EPS, 1.0 - OPACITY_EPS);
                let got = sigmoid(read.logit_opacities[i]);
                assert!((got - want).abs() < 1e-5, "splat {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn non_finite_values_refuse_the_file_naming_attribute_and_first_splat_in_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..8u64 {
            let mut r = Rng::new(seed);
            let n = 3 + seed as usize % 6;
            let s = random_splats(n, 0, 3.0, seed);
            let bad = pick(&mut r, n, 2);
            let value = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][seed as usize % 3];
            // GLB: every float attribute.
            for (attribute, per) in [
                ("POSITION", 3),
                (SCALE, 3),
                (OPACITY, 1),
                ("KHR_gaussian_splatting:ROTATION", 4),
            ] {
                let path = dir.path().join(format!("nan{seed}.glb"));
                let s2 = s.clone();
                let mut values: Vec<f32> = match attribute {
                    "POSITION" => s2.means.clone(),
                    SCALE => s2.log_scales.iter().map(|l| l.exp()).collect(),
                    OPACITY => s2
                        .logit_opacities
                        .iter()
                        .map(|&l| sigmoid(l) as f32)
                        .collect(),
                    _ => s2
                        .rotations
                        .chunks_exact(4)
                        .flat_map(|q| [q[1], q[2], q[3], q[0]])
                        .collect(),
                };
                for &i in &bad {
                    values[i * per + (seed as usize % per)] = value;
                }
                raw_glb(&path, &s, attribute, &values);
                let e = convert::read(&path).unwrap_err().to_string();
                assert!(
                    e.contains(&path.display().to_string())
                        && e.contains(&format!("splat {}", bad[0])),
                    "{attribute}: {e}"
                );
                assert!(
                    e.contains(attribute) || attribute == "POSITION",
                    "{attribute}: {e}"
                );
            }
            // INRIA PLY: the field the PLY names, with the vertex index.
            for (field, name) in [(0, "x/y/z"), (1, "scale_*"), (2, "rot_*"), (3, "opacity")] {
                let mut s2 = s.clone();
                let i = bad[0];
                match field {
                    0 => s2.means[3 * i + 1] = value,
                    1 => s2.log_scales[3 * i] = value,
                    2 => s2.rotations[4 * i + 2] = value,
                    _ => s2.logit_opacities[i] = value,
                }
                let path = dir.path().join(format!("nan{seed}.ply"));
                raw_ply(&path, &s2, None);
                let e = convert::read(&path).unwrap_err().to_string();
                assert!(
                    e.contains(&path.display().to_string())
                        && e.contains(&format!("vertex[{i}].{name}")),
                    "{e}"
                );
            }
            // .splat: a scale.
            let mut scales: Vec<f32> = s.log_scales.iter().map(|l| l.exp()).collect();
            scales[3 * bad[0] + 2] = value;
            let path = dir.path().join(format!("nan{seed}.splat"));
            raw_dot_splat(&path, &s.means, &scales, &vec![[255, 128, 128, 128]; n]);
            assert_refused(&path, "scale", bad[0]);
        }
    }

    #[test]
    fn negative_linear_scales_refuse_and_zero_ones_clamp_to_the_least_log_scale() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..8u64 {
            let mut r = Rng::new(seed);
            let n = 3 + seed as usize % 6;
            let s = random_splats(n, 0, 3.0, seed);
            let bad = pick(&mut r, n, 2);
            let mut scales: Vec<f32> = s.log_scales.iter().map(|l| l.exp()).collect();
            let mut zeros = scales.clone();
            for &i in &bad {
                scales[3 * i + seed as usize % 3] = -r.range(1e-6, 5.0);
                zeros[3 * i + seed as usize % 3] = 0.0;
            }
            let glb_path = dir.path().join(format!("neg{seed}.glb"));
            raw_glb(&glb_path, &s, SCALE, &scales);
            assert_refused(&glb_path, SCALE, bad[0]);
            let splat_path = dir.path().join(format!("neg{seed}.splat"));
            let rot = vec![[255, 128, 128, 128]; n];
            raw_dot_splat(&splat_path, &s.means, &scales, &rot);
            assert_refused(&splat_path, "scale", bad[0]);
            // Zero: a flat splat, clamped with one warning counting both.
            for path in [
                dir.path().join(format!("zero{seed}.glb")),
                dir.path().join(format!("zero{seed}.splat")),
            ] {
                if path.extension().unwrap() == "glb" {
                    raw_glb(&path, &s, SCALE, &zeros);
                } else {
                    raw_dot_splat(&path, &s.means, &zeros, &rot);
                }
                let (read, lines) = warnings(|| convert::read(&path));
                let read = read.unwrap().splats;
                let attribute = if path.extension().unwrap() == "glb" {
                    SCALE
                } else {
                    "scale"
                };
                assert_one_clamp_warning(&lines, &path, attribute, 2);
                for &i in &bad {
                    assert_eq!(read.log_scales[3 * i + seed as usize % 3], LOG_SCALE_MIN);
                }
            }
        }
    }

    #[test]
    fn log_scales_outside_the_stated_range_clamp_with_one_warning_in_ply_and_sog() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..8u64 {
            let mut r = Rng::new(seed);
            let n = 4 + seed as usize % 6;
            let mut s = random_splats(n, 0, 3.0, seed);
            let bad = pick(&mut r, n, 1 + seed as usize % 3);
            let mut want = s.log_scales.clone();
            for &i in &bad {
                let (v, c) = if r.next_f32() < 0.5 {
                    (LOG_SCALE_MAX + r.range(1.0, 80.0), LOG_SCALE_MAX)
                } else {
                    (LOG_SCALE_MIN - r.range(1.0, 60.0), LOG_SCALE_MIN)
                };
                s.log_scales[3 * i + 1] = v;
                want[3 * i + 1] = c;
            }
            let path = dir.path().join(format!("log{seed}.ply"));
            raw_ply(&path, &s, None);
            let (read, lines) = warnings(|| convert::read(&path));
            assert_eq!(read.unwrap().splats.log_scales, want);
            assert_one_clamp_warning(&lines, &path, "scale_*", bad.len());
        }
        // Compressed PLY: chunk 0's x log-scale bounds both 100, so its 256 splats' x
        // log-scales decode to 100.
        let s = random_splats(300, 0, 3.0, 4);
        let path = dir.path().join("chunks.compressed.ply");
        compressed_ply::write(&path, &s).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = text.find("end_header\n").unwrap() + "end_header\n".len();
        let chunk_props: Vec<&str> = text[..body]
            .split("element ")
            .find(|e| e.starts_with("chunk"))
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("property float "))
            .collect();
        for name in ["min_scale_x", "max_scale_x"] {
            let at = body + 4 * chunk_props.iter().position(|p| *p == name).unwrap();
            bytes[at..at + 4].copy_from_slice(&100f32.to_le_bytes());
        }
        std::fs::write(&path, bytes).unwrap();
        let (read, lines) = warnings(|| convert::read(&path));
        let read = read.unwrap().splats;
        assert!(read.log_scales.iter().all(|&l| l <= LOG_SCALE_MAX));
        assert_one_clamp_warning(&lines, &path, "packed_scale", 256);
        // SOG: a codebook of log-scale 100 puts every scale of every splat out of range.
        let s = random_splats(40, 0, 3.0, 3);
        let folder = dir.path().join("sog");
        sog::write(&folder.join("meta.json"), &s, &Default::default()).unwrap();
        let meta_path = folder.join("meta.json");
        let mut meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
        meta["scales"]["codebook"] = serde_json::json!(vec![100.0; 256]);
        std::fs::write(&meta_path, meta.to_string()).unwrap();
        let (read, lines) = warnings(|| convert::read(&meta_path));
        assert!(
            read.unwrap()
                .splats
                .log_scales
                .iter()
                .all(|&l| l == LOG_SCALE_MAX)
        );
        assert_one_clamp_warning(&lines, &meta_path, "scales", 120);
    }

    #[test]
    fn zero_rotations_refuse_the_file_naming_the_first_splat() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..6u64 {
            let mut r = Rng::new(seed);
            let n = 3 + seed as usize % 5;
            let s = random_splats(n, 0, 3.0, seed);
            let bad = pick(&mut r, n, 2);
            let mut zero = s.clone();
            for &i in &bad {
                zero.rotations[4 * i..4 * i + 4].fill(0.0);
            }
            let path = dir.path().join(format!("rot{seed}.ply"));
            raw_ply(&path, &zero, None);
            assert_refused(&path, "rot_*", bad[0]);
            let path = dir.path().join(format!("rot{seed}.glb"));
            let xyzw: Vec<f32> = zero
                .rotations
                .chunks_exact(4)
                .flat_map(|q| [q[1], q[2], q[3], q[0]])
                .collect();
            raw_glb(&path, &s, "KHR_gaussian_splatting:ROTATION", &xyzw);
            assert_refused(&path, "KHR_gaussian_splatting:ROTATION", bad[0]);
            let path = dir.path().join(format!("rot{seed}.splat"));
            let scales: Vec<f32> = s.log_scales.iter().map(|l| l.exp()).collect();
            let rot: Vec<[u8; 4]> = (0..n)
                .map(|i| {
                    if bad.contains(&i) {
                        [128; 4]
                    } else {
                        [255, 128, 128, 128]
                    }
                })
                .collect();
            raw_dot_splat(&path, &s.means, &scales, &rot);
            assert_refused(&path, "rotation", bad[0]);
        }
    }

    /// Writers whose bytes cannot hold a log-scale (SPZ: [−10, 5.94], compressed PLY: ±20)
    /// warn once per attribute, naming the output; the float formats (INRIA PLY) keep them.
    #[test]
    fn writers_warn_for_every_value_their_format_clamps_and_never_clamp_silently() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..6u64 {
            let mut r = Rng::new(seed);
            let n = 4 + seed as usize % 5;
            let mut s = random_splats(n, 1, 3.0, seed);
            let bad = pick(&mut r, n, 2);
            for &i in &bad {
                s.log_scales[3 * i] = 25.0 + r.range(0.0, 5.0);
            }
            let out = |name: &str| dir.path().join(format!("{seed}{name}"));
            for (path, attribute) in [
                (out(".spz"), "log_scales"),
                (out(".compressed.ply"), "log_scales"),
            ] {
                let (written, lines) =
                    warnings(|| match path.to_string_lossy().ends_with(".spz") {
                        true => spz::write(&path, &s, &Default::default()),
                        false => compressed_ply::write(&path, &s),
                    });
                written.unwrap();
                assert_one_clamp_warning(&lines, &path, attribute, 2);
            }
            let glb_path = out(".glb");
            let (written, lines) =
                warnings(|| glb::write(&glb_path, &s, &SplatGlbOptions::default()));
            written.unwrap();
            assert_one_clamp_warning(&lines, &glb_path, "log_scales", 2);
            // Lossless float PLY: nothing clamped, nothing said, values kept.
            let ply_path = out(".ply");
            let (written, lines) = warnings(|| ply::write(&ply_path, &s));
            written.unwrap();
            assert!(lines.is_empty(), "{lines:?}");
            // `.splat` stores exp(log-scale) in f32: e^25 fits; e^100 does not and is refused.
            s.log_scales[3 * bad[0]] = 100.0;
            assert!(dot_splat::write(&out(".splat"), &s).is_err());
        }
    }

    /// By hand (Mip-Splatting's `get_scaling_with_3D_filter` / `get_opacity_with_3D_filter`):
    /// s′ = √(s² + f²), α′ = α·√(Π s² / Π (s² + f²)).
    fn baked_by_hand(s: &GaussianSplats, filter: &[f32]) -> GaussianSplats {
        let mut out = s.clone();
        for (i, &f) in filter.iter().enumerate() {
            let f2 = f64::from(f) * f64::from(f);
            let mut ratio = 1.0;
            for a in 0..3 {
                let s2 = f64::from(s.log_scales[3 * i + a]).exp().powi(2);
                ratio *= s2 / (s2 + f2);
                out.log_scales[3 * i + a] = (s2 + f2).sqrt().ln() as f32;
            }
            let alpha = sigmoid(s.logit_opacities[i]) * ratio.sqrt();
            out.logit_opacities[i] = (alpha / (1.0 - alpha)).ln() as f32;
        }
        out
    }

    #[test]
    fn a_mip_splatting_ply_reads_as_its_filter_baked_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..6u64 {
            let mut r = Rng::new(seed);
            let n = 5 + seed as usize * 7;
            let s = random_splats(n, 0, 3.0, seed);
            // Mip-Splatting's filter: distance / focal · √0.2, of the order of the splats.
            let filter: Vec<f32> = (0..n).map(|_| r.range(1e-4, 0.05)).collect();
            let path = dir.path().join(format!("mip{seed}.ply"));
            raw_ply(&path, &s, Some(&filter));
            let read = convert::read(&path).unwrap().splats;
            let want = baked_by_hand(&s, &filter);
            for (field, got, want) in [
                ("log_scales", &read.log_scales, &want.log_scales),
                (
                    "logit_opacities",
                    &read.logit_opacities,
                    &want.logit_opacities,
                ),
            ] {
                for (j, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "{field}[{j}]: {g} vs {w}"
                    );
                }
            }
            assert_eq!(
                (read.means, read.rotations, read.sh_coeffs),
                (s.means, s.rotations, s.sh_coeffs)
            );
        }
    }

    /// Trial F17 and the re-trial's F1–F3, as a rule over generated files in binary and ASCII:
    /// a `filter_3D` that is NaN, ±Inf or negative at any vertex is refused naming
    /// `vertex[i].filter_3D` and the value as written (sign kept); a NaN scale or opacity beside
    /// a valid filter is named as that property, not as the filter.
    #[test]
    fn an_invalid_filter_3d_is_named_and_other_properties_keep_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let bad_values = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.5, -1e-3];
        for seed in 0..10u64 {
            let mut r = Rng::new(100 + seed);
            let n = 3 + seed as usize * 5;
            let s = random_splats(n, 0, 3.0, seed);
            let good: Vec<f32> = (0..n).map(|_| r.range(1e-4, 0.05)).collect();
            let at = pick(&mut r, n, 1)[0];
            let bad = bad_values[seed as usize % bad_values.len()];
            let mut filter = good.clone();
            filter[at] = bad;
            for ascii in [false, true] {
                let path = dir.path().join(format!("bad{seed}-{ascii}.ply"));
                raw_ply_as(&path, &s, Some(&filter), ascii);
                let e = convert::read(&path).unwrap_err().to_string();
                assert!(e.contains(&format!("vertex[{at}].filter_3D")), "{e}");
                let shown = bad.to_string();
                assert!(e.contains(&format!("found {shown}")), "{shown}: {e}");
            }
            // A NaN in scale_1 or in opacity, the filter valid: named as that property.
            for (field, named) in [("scale", "scale_*"), ("opacity", "opacity")] {
                let mut t = s.clone();
                match field {
                    "scale" => t.log_scales[3 * at + 1] = f32::NAN,
                    _ => t.logit_opacities[at] = f32::NAN,
                }
                let path = dir.path().join(format!("{field}{seed}.ply"));
                raw_ply(&path, &t, Some(&good));
                let e = convert::read(&path).unwrap_err().to_string();
                assert!(e.contains(&format!("vertex[{at}].{named}`")), "{e}");
                assert!(!e.contains("filter_3D"), "{e}");
            }
        }
    }
}
