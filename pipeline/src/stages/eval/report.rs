//! `fidelity.json`, the per-view strips and the PSNR-versus-bytes plot of [`super::evaluate`].

use std::path::Path;

use kiln_formats::atomic_write::write_atomic;
use serde::{Deserialize, Serialize};

use super::{CutSpec, Delivered, EvalView};
use crate::{Error, Result};

/// Scores of one cut, for one view or averaged over views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutScores {
    /// The view (per-view rows); `None` for the mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<String>,
    /// PSNR against the photo, dB (`None` without photos).
    pub psnr_db: Option<f64>,
    /// SSIM against the photo.
    pub ssim: Option<f64>,
    /// PSNR against the full trained splats' render, dB (`None` without them). The mean over
    /// views is the PSNR of the views' mean squared error (identical views, capped at
    /// [`super::PSNR_CAP_DB`] each, would otherwise dominate a mean of decibels).
    pub psnr_vs_full_db: Option<f64>,
    /// SSIM against the full trained splats' render.
    pub ssim_vs_full: Option<f64>,
    /// Splats rendered.
    pub splats: f64,
    /// Bytes of tile content a client fetches for this cut (shown tiles and their ancestors).
    pub bytes: f64,
}

/// One column of the report: a cut and its scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutReport {
    /// `τ=16`, `budget=1000000` or the file's label.
    pub label: String,
    /// Maximum screen-space error of a τ cut, pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau_px: Option<f64>,
    /// Splat budget of a budget cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_splats: Option<usize>,
    /// Mean over the views (PSNR averaged in dB, as the train stage does).
    pub mean: CutScores,
    /// Per view, in the order of [`EvalReport::views`].
    pub views: Vec<CutScores>,
}

/// A view of the evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewSummary {
    pub name: String,
    /// `held-out` or `orbit`.
    pub kind: String,
    pub width: u32,
    pub height: u32,
}

/// Tiles and splats at one depth of a tileset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelSummary {
    /// Depth below the root (root = 0).
    pub depth: u32,
    pub tiles: usize,
    pub splats: usize,
    /// Content bytes of the level's tiles.
    pub bytes: u64,
    /// Largest geometricError at this depth, metres.
    pub max_geometric_error_m: f64,
}

/// Contents of `fidelity.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// What was evaluated (the tileset or file path).
    pub source: String,
    /// Whether a full-splats reference was rendered (`psnr_vs_full_db` columns, the strip's
    /// second image).
    pub has_reference: bool,
    pub views: Vec<ViewSummary>,
    /// The full splats against the photos: mean PSNR (dB) and SSIM over views with photos.
    pub reference_psnr_db: Option<f64>,
    pub reference_ssim: Option<f64>,
    /// Per cut.
    pub cuts: Vec<CutReport>,
    /// Full splats − full-detail delivery (τ = 0, or the file) against the photos, dB: what
    /// packaging costs before any level of detail. `None` without photos (the τ = 0 cut's
    /// `psnr_vs_full_db` then says how close the delivery is to the full splats).
    pub publish_loss_db: Option<f64>,
    /// Content bytes of the whole tileset or file.
    pub total_bytes: u64,
    /// Tiles and splats per depth (tilesets).
    pub levels: Vec<LevelSummary>,
    /// Column labels of each `strips/<view>.png`, left to right.
    pub strip_columns: Vec<String>,
}

impl EvalReport {
    /// The τ cut with this τ, if it was scored.
    #[must_use]
    pub fn tau(&self, tau_px: f64) -> Option<&CutReport> {
        self.cuts.iter().find(|c| c.tau_px == Some(tau_px))
    }

    /// Read a `fidelity.json`.
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::Input`] naming the file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Input {
            path: path.to_path_buf(),
            field: "fidelity.json".into(),
            problem: format!("not a Kiln fidelity report: {e}"),
        })
    }
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

fn mean_scores(views: &[CutScores]) -> CutScores {
    let opt = |f: fn(&CutScores) -> Option<f64>| {
        if views.iter().all(|v| f(v).is_some()) {
            mean(views.iter().filter_map(f))
        } else {
            None
        }
    };
    CutScores {
        view: None,
        psnr_db: opt(|v| v.psnr_db),
        ssim: opt(|v| v.ssim),
        psnr_vs_full_db: if views.iter().all(|v| v.psnr_vs_full_db.is_some()) {
            mean(
                views
                    .iter()
                    .filter_map(|v| v.psnr_vs_full_db)
                    .map(|db| 10f64.powf(-db / 10.0)),
            )
            .map(|mse| (-10.0 * mse.log10()).min(super::PSNR_CAP_DB))
        } else {
            None
        },
        ssim_vs_full: opt(|v| v.ssim_vs_full),
        splats: mean(views.iter().map(|v| v.splats)).unwrap_or(0.0),
        bytes: mean(views.iter().map(|v| v.bytes)).unwrap_or(0.0),
    }
}

/// Put the per-view columns together into the report.
pub(super) fn assemble(
    delivered: &Delivered,
    has_reference: bool,
    views: &[EvalView],
    specs: &[CutSpec],
    columns: Vec<Vec<CutScores>>,
    reference_scores: Vec<(String, f64, f64)>,
) -> Result<EvalReport> {
    let cuts: Vec<CutReport> = specs
        .iter()
        .zip(columns)
        .map(|(spec, views)| CutReport {
            label: spec.label(delivered),
            tau_px: match spec {
                CutSpec::Tau(t) => Some(*t),
                _ => None,
            },
            budget_splats: match spec {
                CutSpec::Budget(b) => Some(*b),
                _ => None,
            },
            mean: mean_scores(&views),
            views,
        })
        .collect();
    let reference_psnr_db = mean(reference_scores.iter().map(|r| r.1));
    let reference_ssim = mean(reference_scores.iter().map(|r| r.2));
    let full_detail = cuts
        .iter()
        .find(|c| c.tau_px == Some(0.0) || c.tau_px.is_none() && c.budget_splats.is_none());
    let publish_loss_db = full_detail.and_then(|c| match (reference_psnr_db, c.mean.psnr_db) {
        (Some(r), Some(p)) => Some(r - p),
        _ => None,
    });
    let (total_bytes, levels) = match delivered {
        Delivered::Tileset(ts) => (ts.total_bytes(), level_summaries(ts)?),
        Delivered::Splats { bytes, .. } => (*bytes, Vec::new()),
    };
    let mut strip_columns = Vec::new();
    if views.iter().any(|v| v.photo.is_some()) {
        strip_columns.push("photo".to_string());
    }
    if has_reference {
        strip_columns.push("full splats".to_string());
    }
    strip_columns.extend(
        specs
            .iter()
            .filter(|s| matches!(s, CutSpec::Tau(_) | CutSpec::File))
            .map(|s| s.label(delivered)),
    );
    Ok(EvalReport {
        source: match delivered {
            Delivered::Tileset(ts) => ts.path.display().to_string(),
            Delivered::Splats { label, .. } => label.clone(),
        },
        has_reference,
        views: views
            .iter()
            .map(|v| ViewSummary {
                name: v.name.clone(),
                kind: v.kind.to_string(),
                width: v.camera.width,
                height: v.camera.height,
            })
            .collect(),
        reference_psnr_db,
        reference_ssim,
        cuts,
        publish_loss_db,
        total_bytes,
        levels,
        strip_columns,
    })
}

fn level_summaries(ts: &super::LoadedTileset) -> Result<Vec<LevelSummary>> {
    let depth = ts.tiles.iter().map(|t| t.depth).max().unwrap_or(0);
    let mut out: Vec<LevelSummary> = (0..=depth)
        .map(|d| LevelSummary {
            depth: d,
            tiles: 0,
            splats: 0,
            bytes: 0,
            max_geometric_error_m: 0.0,
        })
        .collect();
    for (i, t) in ts.tiles.iter().enumerate() {
        let l = &mut out[t.depth as usize];
        l.tiles += 1;
        l.splats += ts.splat_count(i)?;
        l.bytes += t.content_bytes;
        l.max_geometric_error_m = l.max_geometric_error_m.max(t.geometric_error);
    }
    Ok(out)
}

/// Write `strips/<view>.png`: the images side by side (each `[H, W, 3]` 8-bit), 2-pixel white
/// gaps between them.
pub(super) fn write_strip(dir: &Path, view: &EvalView, images: &[Vec<u8>]) -> Result<()> {
    const GAP: u32 = 2;
    let (w, h) = (view.camera.width, view.camera.height);
    let n = images.len() as u32;
    let mut strip =
        image::RgbImage::from_pixel(n * w + n.saturating_sub(1) * GAP, h, image::Rgb([255; 3]));
    for (k, img) in images.iter().enumerate() {
        let x0 = k as u32 * (w + GAP);
        for y in 0..h {
            for x in 0..w {
                let i = 3 * (y * w + x) as usize;
                strip.put_pixel(x0 + x, y, image::Rgb([img[i], img[i + 1], img[i + 2]]));
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(format!(
        "{}.png",
        crate::stages::train::eval::file_stem(&view.name)
    ));
    let mut png = Vec::new();
    strip
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    write_atomic(&path, &png)?;
    Ok(())
}

/// Write `fidelity.json` and `psnr_bytes.svg` into `dir`.
pub(super) fn write_all(report: &EvalReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(super::FIDELITY_JSON);
    let json = serde_json::to_vec_pretty(report)
        .map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    write_atomic(&path, &json)?;
    write_atomic(
        &dir.join("psnr_bytes.svg"),
        psnr_bytes_svg(report).as_bytes(),
    )?;
    Ok(())
}

/// Mean PSNR (against the photos, else against the full splats) over mean bytes fetched, one
/// labelled point per τ cut, with the full splats' PSNR as a dashed line (800 × 360 SVG).
#[must_use]
pub fn psnr_bytes_svg(report: &EvalReport) -> String {
    let (w, h, pad) = (800.0f64, 360.0f64, 56.0f64);
    let against_photos =
        report.reference_psnr_db.is_some() || report.cuts.iter().any(|c| c.mean.psnr_db.is_some());
    let y_of = |s: &CutScores| {
        if against_photos {
            s.psnr_db
        } else {
            s.psnr_vs_full_db
        }
    };
    let pts: Vec<(f64, f64, String)> = report
        .cuts
        .iter()
        .filter(|c| c.budget_splats.is_none())
        .filter_map(|c| y_of(&c.mean).map(|y| (c.mean.bytes, y, c.label.clone())))
        .collect();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let mut ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
    if against_photos {
        ys.extend(report.reference_psnr_db);
    }
    if pts.is_empty() {
        svg.push_str("<text x=\"20\" y=\"30\">no cuts scored</text>\n</svg>\n");
        return svg;
    }
    let x_max = pts.iter().map(|p| p.0).fold(1.0, f64::max);
    let y_lo = ys.iter().copied().fold(f64::INFINITY, f64::min).floor() - 1.0;
    let y_hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil() + 1.0;
    let px = |x: f64| pad + x / x_max * (w - 2.0 * pad);
    let py = |y: f64| h - pad - (y - y_lo) / (y_hi - y_lo) * (h - 2.0 * pad);
    svg.push_str(&format!(
        "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{0}\" stroke=\"black\"/>\n\
         <text x=\"{2}\" y=\"{3}\" text-anchor=\"middle\">bytes fetched (MB, mean over views)</text>\n\
         <text x=\"14\" y=\"{4}\" transform=\"rotate(-90 14 {4})\" text-anchor=\"middle\">PSNR (dB) vs {5}</text>\n\
         <text x=\"{pad}\" y=\"{6}\">{x_max_mb:.2} MB at the right edge; {y_lo} to {y_hi} dB</text>\n",
        h - pad,
        w - pad,
        w / 2.0,
        h - 18.0,
        h / 2.0,
        if against_photos { "photos" } else { "full splats" },
        pad - 20.0,
        x_max_mb = x_max / 1e6,
    ));
    // Ticks: five on the bytes axis, whole decibels (every 1, 2 or 5) on the PSNR axis.
    for k in 0..=4 {
        let x = x_max * f64::from(k) / 4.0;
        svg.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"black\"/>\
             <text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\">{4:.2}</text>\n",
            px(x),
            h - pad,
            h - pad + 5.0,
            h - pad + 17.0,
            x / 1e6
        ));
    }
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|s| (y_hi - y_lo) / s <= 10.0)
        .unwrap_or(20.0);
    let mut y = (y_lo / step).ceil() * step;
    while y <= y_hi {
        svg.push_str(&format!(
            "<line x1=\"{0}\" y1=\"{1:.1}\" x2=\"{2}\" y2=\"{1:.1}\" stroke=\"black\"/>\
             <text x=\"{3}\" y=\"{4:.1}\" text-anchor=\"end\">{y}</text>\n",
            pad - 5.0,
            py(y),
            pad,
            pad - 8.0,
            py(y) + 4.0
        ));
        y += step;
    }
    if let (true, Some(r)) = (against_photos, report.reference_psnr_db) {
        svg.push_str(&format!(
            "<line x1=\"{pad}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"gray\" stroke-dasharray=\"6 4\"/>\n\
             <text x=\"{2}\" y=\"{3:.1}\" fill=\"gray\">full splats {r:.2} dB</text>\n",
            py(r),
            w - pad,
            pad + 4.0,
            py(r) - 4.0
        ));
    }
    let mut sorted = pts.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let poly: Vec<String> = sorted
        .iter()
        .map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1)))
        .collect();
    svg.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"1.5\" points=\"{}\"/>\n",
        poly.join(" ")
    ));
    // Cuts that select the same tiles land on the same point: one label for them all.
    let mut merged: Vec<(f64, f64, String)> = Vec::new();
    for (x, y, label) in &pts {
        match merged
            .iter_mut()
            .find(|m| (m.0 - x).abs() < 0.5 && (m.1 - y).abs() < 1e-3)
        {
            Some(m) => {
                m.2.push('/');
                m.2.push_str(label.trim_start_matches("τ="));
            }
            None => merged.push((*x, *y, label.clone())),
        }
    }
    for (k, (x, y, label)) in merged.iter().enumerate() {
        // Labels alternate above and below their points, and end at the point near the right
        // edge, so neighbours do not print on top of each other.
        let dy = if k % 2 == 0 { -8.0 } else { 16.0 };
        let (dx, anchor) = if px(*x) > w - 2.0 * pad - 100.0 {
            (-6.0, "end")
        } else {
            (6.0, "start")
        };
        svg.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"steelblue\"><title>{label}: {y:.2} dB, {:.0} bytes</title></circle>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label} {y:.2}</text>\n",
            px(*x),
            py(*y),
            x,
            px(*x) + dx,
            py(*y) + dy
        ));
    }
    svg.push_str("</svg>\n");
    svg
}
