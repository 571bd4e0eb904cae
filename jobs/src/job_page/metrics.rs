//! Reading a capture job's `metrics.json` (written by the train stage,
//! `kiln_pipeline::stages::train::eval::Metrics`) leniently: every field is optional, so files
//! from older trainers (no `psnr_curve` / `splat_count_curve`) and non-finite values (serde_json
//! writes ±∞ and NaN as `null`) still render.

use std::path::Path;

use serde::Deserialize;

use super::PageError;

/// One held-out view's metrics.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ViewEntry {
    /// View name as the trainer saw it (its PNG is `eval/<file_stem(name)>.png`).
    pub name: String,
    /// PSNR in dB (8-bit images); `None` when infinite (identical images) or absent.
    #[serde(default)]
    pub psnr_db: Option<f64>,
    /// Mean SSIM; `None` when absent.
    #[serde(default)]
    pub ssim: Option<f64>,
}

/// `(step, value)` samples; a `null` value (non-finite when written) is kept as `None`.
pub type Curve = Vec<(f64, Option<f64>)>;

/// The parts of `metrics.json` the page shows. Absent fields are `None` / empty.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CaptureMetrics {
    /// Mean held-out PSNR, dB.
    #[serde(default)]
    pub psnr_db: Option<f64>,
    /// Mean held-out SSIM.
    #[serde(default)]
    pub ssim: Option<f64>,
    /// Final splat count.
    #[serde(default)]
    pub splats: Option<u64>,
    /// Optimizer steps run.
    #[serde(default)]
    pub steps: Option<u64>,
    /// Wall-clock seconds of the train stage.
    #[serde(default)]
    pub wall_s: Option<f64>,
    /// Training steps per second.
    #[serde(default)]
    pub steps_per_s: Option<f64>,
    /// Peak resident memory of the training process, bytes; `None` in older files.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// Per held-out view metrics.
    #[serde(default)]
    pub views: Vec<ViewEntry>,
    /// `(step, loss)`.
    #[serde(default)]
    pub loss_curve: Curve,
    /// `(step, held-out PSNR dB)`; `None` in files from trainers before issue 7.
    #[serde(default)]
    pub psnr_curve: Option<Curve>,
    /// `(step, splats)`; `None` in files from trainers before issue 7.
    #[serde(default)]
    pub splat_count_curve: Option<Curve>,
}

impl CaptureMetrics {
    /// Read and parse `path`.
    ///
    /// # Errors
    /// [`PageError::Io`] when it cannot be read; [`PageError::Invalid`] when it is not JSON of
    /// the expected shape (the message gives serde's line and column).
    pub fn read(path: &Path) -> Result<CaptureMetrics, PageError> {
        let bytes = std::fs::read(path).map_err(|source| PageError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| PageError::Invalid {
            path: path.to_path_buf(),
            field: "(document)".into(),
            expected: "train-stage metrics JSON".into(),
            found: e.to_string(),
        })
    }

    /// The view whose PNG stem is `stem`, matching names the way the trainer made file names
    /// (`kiln_pipeline::stages::train::eval::file_stem`).
    pub fn view_for_stem(&self, stem: &str) -> Option<&ViewEntry> {
        self.views
            .iter()
            .find(|v| kiln_pipeline::stages::train::eval::file_stem(&v.name) == stem)
    }
}

/// The finite samples of `curve`, in order.
pub fn finite_points(curve: &[(f64, Option<f64>)]) -> Vec<(f64, f64)> {
    curve
        .iter()
        .filter_map(|&(x, y)| y.map(|y| (x, y)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_metrics_without_curves_parse_and_nulls_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.json");
        std::fs::write(
            &p,
            r#"{"psnr_db": null, "views": [{"name": "x.png", "psnr_db": null, "ssim": 1.0}],
                "loss_curve": [[1, 0.5], [2, null]], "unknown": 3}"#,
        )
        .unwrap();
        let m = CaptureMetrics::read(&p).unwrap();
        assert_eq!(m.psnr_curve, None);
        assert_eq!(finite_points(&m.loss_curve), vec![(1.0, 0.5)]);
        assert_eq!(m.view_for_stem("x").map(|v| v.ssim), Some(Some(1.0)));
    }

    #[test]
    fn malformed_metrics_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.json");
        std::fs::write(&p, b"{\"views\": 3}").unwrap();
        let e = CaptureMetrics::read(&p).unwrap_err().to_string();
        assert!(
            e.contains("metrics.json") && e.contains("line 1 column"),
            "{e}"
        );
    }
}
