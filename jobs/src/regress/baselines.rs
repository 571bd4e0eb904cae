//! `datasets/baselines.toml`: the sample scenes `kiln regress` runs and, per scene and mode (full
//! or `--quick`), the expected value and tolerance of each metric.
//!
//! ```toml
//! [[scene]]
//! name = "fox"
//! job = "jobs/fox.toml"              # relative to the baselines file
//! [scene.quick.set]                  # job-file overrides for --quick (dotted keys)
//! "train.steps" = 400
//! [scene.quick.metrics]
//! psnr_db = { baseline = 21.3, tolerance = 0.5, better = "higher" }
//! splats = { baseline = 12000, tolerance_rel = 0.15 }
//! wall_s = { baseline = 60.0, info = true }
//! ```
//!
//! Rewriting (`--update-baselines`) goes through `toml_edit`, so comments and layout survive and
//! only the `baseline` numbers (and new metrics) change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

/// The parsed baselines file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baselines {
    /// The scenes, in file order (the order `kiln regress` runs them).
    #[serde(rename = "scene", default)]
    pub scenes: Vec<Scene>,
}

/// One sample scene.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    /// Scene name (`--scenes` selects by it; names JUnit test cases).
    pub name: String,
    /// The job file, relative to the baselines file's directory.
    pub job: PathBuf,
    /// The full run: the job as written, plus `set` overrides.
    #[serde(default)]
    pub full: Mode,
    /// The `--quick` run: smaller images / fewer steps through `set` overrides.
    #[serde(default)]
    pub quick: Mode,
}

/// One way of running a scene: job-file overrides and the metrics' baselines.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mode {
    /// Job-file overrides, dotted key → TOML value (e.g. `"train.steps" = 400`).
    #[serde(default)]
    pub set: BTreeMap<String, toml::Value>,
    /// Metric name → expectation (names as [`super::measure`] produces them).
    #[serde(default)]
    pub metrics: BTreeMap<String, Expectation>,
}

/// Which direction of change is a regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Quality-like (PSNR, SSIM): only a drop beyond the tolerance fails.
    Higher,
    /// Error-like (geometric error, bytes): only a rise beyond the tolerance fails.
    Lower,
    /// Counts (splats, triangles, tiles): a change either way beyond the tolerance fails.
    #[default]
    Equal,
}

/// The expected value of one metric.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// The recorded value (metric's own unit: dB, metres, bytes, count, seconds).
    pub baseline: f64,
    /// Allowed absolute deviation in the metric's unit.
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// Allowed deviation as a fraction of |baseline| (used when larger than `tolerance`).
    #[serde(default)]
    pub tolerance_rel: Option<f64>,
    #[serde(default)]
    pub better: Better,
    /// Reported, never a failure (wall time varies with the machine).
    #[serde(default)]
    pub info: bool,
}

impl Expectation {
    /// The allowed deviation: max(`tolerance`, `tolerance_rel`·|baseline|), 0 when neither is set.
    #[must_use]
    pub fn allowed(&self) -> f64 {
        let abs = self.tolerance.unwrap_or(0.0);
        let rel = self.tolerance_rel.unwrap_or(0.0) * self.baseline.abs();
        abs.max(rel)
    }
}

impl Baselines {
    /// Read and validate a baselines file.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Spec`] for TOML errors and unknown keys (with line/column);
    /// [`Error::Field`] for duplicate scene names, negative tolerances or non-finite baselines.
    pub fn from_file(path: &Path) -> Result<Baselines> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parse a baselines file's text; `path` names it in errors.
    ///
    /// # Errors
    /// As [`Baselines::from_file`].
    pub fn from_toml(text: &str, path: &Path) -> Result<Baselines> {
        let b: Baselines = toml::from_str(text).map_err(|e| Error::Baselines {
            path: path.into(),
            message: e.to_string(),
        })?;
        let field = |field: String, expected: &str, found: String| Error::Field {
            path: path.into(),
            field,
            expected: expected.into(),
            found,
        };
        let mut seen = std::collections::BTreeSet::new();
        for s in &b.scenes {
            if !seen.insert(s.name.as_str()) {
                return Err(field(
                    "scene.name".into(),
                    "unique scene names",
                    format!("`{}` twice", s.name),
                ));
            }
            for (mode_name, mode) in [("full", &s.full), ("quick", &s.quick)] {
                for (metric, e) in &mode.metrics {
                    let at = format!("scene `{}`.{mode_name}.metrics.{metric}", s.name);
                    if !super::measure::is_known_metric(metric) {
                        return Err(field(
                            at,
                            "a metric name: psnr_db, ssim, splats, steps_per_s, tiles, \
                             tile_levels, tile_bytes, wall_s, lod<i>.triangles or lod<i>.error_m",
                            format!("`{metric}`"),
                        ));
                    }
                    if !e.baseline.is_finite() {
                        return Err(field(at, "a finite baseline", e.baseline.to_string()));
                    }
                    for t in [e.tolerance, e.tolerance_rel].into_iter().flatten() {
                        if !(t >= 0.0 && t.is_finite()) {
                            return Err(field(at, "a tolerance >= 0", t.to_string()));
                        }
                    }
                }
            }
        }
        Ok(b)
    }
}

/// Default expectation for a metric first seen by `--update-baselines`, from its name: quality
/// metrics may drop a little, geometric error may rise a little, wall time is information, counts
/// and bytes must stay within a few percent.
#[must_use]
pub fn default_expectation(metric: &str, value: f64) -> Expectation {
    let (tolerance, tolerance_rel, better, info) = if metric == "publish_loss_db" {
        // What packaging costs: only a rise fails, by more than 0.2 dB.
        (Some(0.2), None, Better::Lower, false)
    } else if metric.ends_with("_db") {
        (Some(0.5), None, Better::Higher, false)
    } else if metric.ends_with("ssim") || metric.ends_with("ssim_vs_full") {
        (Some(0.02), None, Better::Higher, false)
    } else if metric.ends_with("wall_s") || metric.ends_with("steps_per_s") {
        (None, None, Better::Equal, true)
    } else if metric.ends_with("error_m") {
        (Some(1e-6), Some(0.05), Better::Lower, false)
    } else if metric == "splats" || metric.ends_with(".splats") || metric.ends_with("bytes") {
        (None, Some(0.15), Better::Equal, false)
    } else {
        (None, Some(0.02), Better::Equal, false)
    };
    Expectation {
        baseline: value,
        tolerance,
        tolerance_rel,
        better,
        info,
    }
}

/// Rewrite the baselines text with new measured values for `(scene, mode, metric)` triples:
/// existing entries get a new `baseline` (tolerances kept); unknown metrics get an entry from
/// [`default_expectation`]. Comments and layout are preserved.
///
/// # Errors
/// [`Error::Spec`] when the text is not TOML or a scene named in `values` is missing.
pub fn update_text(
    text: &str,
    path: &Path,
    mode: &str,
    values: &BTreeMap<String, BTreeMap<String, f64>>,
) -> Result<String> {
    use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};
    let spec_err = |message: String| Error::Spec {
        path: path.into(),
        message,
    };
    let mut doc: DocumentMut = text.parse().map_err(|e| spec_err(format!("{e}")))?;
    let scenes = doc
        .get_mut("scene")
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| spec_err("no [[scene]] tables".into()))?;
    for (scene_name, metrics) in values {
        let scene = scenes
            .iter_mut()
            .find(|t| t.get("name").and_then(Item::as_str) == Some(scene_name))
            .ok_or_else(|| spec_err(format!("scene `{scene_name}` is not in the file")))?;
        let mode_table = scene
            .entry(mode)
            .or_insert_with(|| {
                // Implicit: only `[scene.<mode>.metrics]` is written, no empty header above it.
                let mut t = Table::new();
                t.set_implicit(true);
                Item::Table(t)
            })
            .as_table_mut()
            .ok_or_else(|| spec_err(format!("scene `{scene_name}`.{mode} is not a table")))?;
        let metric_table = mode_table
            .entry("metrics")
            .or_insert_with(|| Item::Table(Table::new()))
            .as_table_like_mut()
            .ok_or_else(|| spec_err(format!("scene `{scene_name}`.{mode}.metrics")))?;
        for (metric, &value) in metrics {
            let rounded = round_sig(value, 6);
            match metric_table.get_mut(metric) {
                Some(item) => {
                    let t = item.as_table_like_mut().ok_or_else(|| {
                        spec_err(format!(
                            "scene `{scene_name}`.{mode}.metrics.{metric} is not a table"
                        ))
                    })?;
                    t.insert("baseline", toml_edit::value(rounded));
                }
                None => {
                    let e = default_expectation(metric, rounded);
                    let mut t = InlineTable::new();
                    t.insert("baseline", Value::from(rounded));
                    if let Some(v) = e.tolerance {
                        t.insert("tolerance", Value::from(v));
                    }
                    if let Some(v) = e.tolerance_rel {
                        t.insert("tolerance_rel", Value::from(v));
                    }
                    match (e.info, e.better) {
                        (true, _) => {
                            t.insert("info", Value::from(true));
                        }
                        (false, Better::Higher) => {
                            t.insert("better", Value::from("higher"));
                        }
                        (false, Better::Lower) => {
                            t.insert("better", Value::from("lower"));
                        }
                        (false, Better::Equal) => {}
                    }
                    metric_table.insert(metric, Item::Value(Value::InlineTable(t)));
                }
            }
        }
    }
    Ok(doc.to_string())
}

/// `v` rounded to `digits` significant digits (keeps the file readable; far below tolerances).
fn round_sig(v: f64, digits: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(digits - 1 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# comment kept
[[scene]]
name = "avocado"
job = "jobs/avocado.toml"

[scene.quick.metrics]
# the LOD-1 count
"lod1.triangles" = { baseline = 341, tolerance_rel = 0.02 }
psnr_db = { baseline = 20.0, tolerance = 0.5, better = "higher" }
"#;

    #[test]
    fn parses_scenes_modes_and_expectations() {
        let b = Baselines::from_toml(SAMPLE, Path::new("b.toml")).unwrap();
        assert_eq!(b.scenes.len(), 1);
        let e = &b.scenes[0].quick.metrics["lod1.triangles"];
        assert_eq!(e.baseline, 341.0);
        assert_eq!(e.better, Better::Equal);
        // 2 % of 341 = 6.82 triangles.
        assert!((e.allowed() - 6.82).abs() < 1e-9);
        assert_eq!(b.scenes[0].quick.metrics["psnr_db"].better, Better::Higher);
    }

    #[test]
    fn unknown_keys_and_duplicates_are_errors_naming_the_file() {
        let bad = SAMPLE.replace("tolerance_rel", "tolerence_rel");
        let err = Baselines::from_toml(&bad, Path::new("b.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("b.toml") && err.contains("tolerence_rel"),
            "{err}"
        );
        let dup = format!("{SAMPLE}\n[[scene]]\nname = \"avocado\"\njob = \"x.toml\"\n");
        let err = Baselines::from_toml(&dup, Path::new("b.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("avocado") && err.contains("twice"), "{err}");
    }

    #[test]
    fn update_keeps_comments_and_tolerances_and_adds_new_metrics() {
        let mut values = BTreeMap::new();
        values.insert(
            "avocado".to_string(),
            BTreeMap::from([
                ("lod1.triangles".to_string(), 342.0),
                ("tiles".to_string(), 5.0),
            ]),
        );
        let out = update_text(SAMPLE, Path::new("b.toml"), "quick", &values).unwrap();
        assert!(out.contains("# comment kept") && out.contains("# the LOD-1 count"));
        let b = Baselines::from_toml(&out, Path::new("b.toml")).unwrap();
        let m = &b.scenes[0].quick.metrics;
        assert_eq!(m["lod1.triangles"].baseline, 342.0);
        assert_eq!(m["lod1.triangles"].tolerance_rel, Some(0.02));
        assert_eq!(m["tiles"].baseline, 5.0);
        assert_eq!(m["psnr_db"].baseline, 20.0);
    }

    #[test]
    fn rounding_keeps_six_significant_digits() {
        assert_eq!(round_sig(28.416110526, 6), 28.4161);
        assert_eq!(round_sig(0.000123456789, 6), 0.000123457);
        assert_eq!(round_sig(215579.0, 6), 215579.0);
    }
}
