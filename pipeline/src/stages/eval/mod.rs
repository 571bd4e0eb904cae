//! `eval`: measure what a user of the delivered splats sees. Renders a tileset (each cut a 3D Tiles
//! client would show) or a splat file from a capture's held-out cameras (or an orbit), with Kiln's
//! own rasterizer, and scores each render against the photos and against the full trained splats.
//!
//! Outputs in the stage folder (`fidelity/` of a job's output):
//! - `fidelity.json`: [`EvalReport`] — per cut (τ and splat budgets) and per view: PSNR/SSIM
//!   against the photos and against the full splats, splats rendered, bytes fetched; the publish
//!   loss (full splats − full-detail tiles, dB) and the splats per level;
//! - `strips/<view>.png`: one row per view: photo (when there is one) | full splats | τ = 0 |
//!   τ = 1 | … | τ = 120 (the same order as `fidelity.json` `strip_columns`);
//! - `psnr_bytes.svg`: mean PSNR against bytes fetched, one point per τ.
//!
//! Metrics are computed like the train stage's held-out metrics ([`crate::stages::train::eval`]):
//! both images quantised to 8 bits, PSNR = 10·log10(1/MSE), SSIM with an 11×11 Gaussian window
//! (σ = 1.5), over the pixels the capture's masks keep. A PSNR between identical images is
//! reported as [`PSNR_CAP_DB`].
//!
//! Sources: the cut rules in [`cut`]; the measure (PSNR and SSIM of τ cuts against ground truth
//! and against the full model, with bytes) follows Kerbl et al. 2024, "A Hierarchical 3D Gaussian
//! Representation for Real-Time Rendering of Very Large Datasets", §7 (granularity τ), as
//! summarised in shared/research/splat-delivery.md §5.

pub mod cut;
pub mod report;
mod stage;
pub mod tileset;
pub mod views;

pub use stage::{CutSummary, Eval, EvalSummary};

use std::path::Path;

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{RenderOptions, Renderer};
use serde::{Deserialize, Serialize};

pub use report::{CutReport, CutScores, EvalReport, LevelSummary, ViewSummary};
pub use tileset::LoadedTileset;
pub use views::{EvalView, SceneSphere, orbit_views, scene_sphere};

use crate::bounds::{Bound, Bounded};
use crate::stages::train::eval::{psnr_weighted, quantise_u8, render_host, ssim_weighted};
use crate::{Error, Result};

/// PSNR reported for identical images (dB): the 8-bit images agree exactly.
pub const PSNR_CAP_DB: f64 = 100.0;

/// File name of the report inside the stage folder.
pub const FIDELITY_JSON: &str = "fidelity.json";

/// What to measure. Serialised into the eval stage's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalParams {
    /// Maximum screen-space errors (pixels) of the cuts scored; default 0, 1, 4, 16, 32, 64, 120
    /// (0 = every visible leaf; 16 = CesiumJS's default).
    pub taus_px: Vec<f64>,
    /// Splat budgets of the budget cuts; default 0.5 M, 1 M, 2.5 M (Spark's mobile to desktop).
    pub budgets: Vec<usize>,
    /// Orbit distances as multiples of the scene radius (views without photos); default 1, 2, 4.
    pub orbit_radii: Vec<f64>,
    /// Orbit cameras per distance; default 8.
    pub orbit_views: usize,
    /// Orbit image side, pixels; default 512.
    pub orbit_size_px: u32,
}

impl Default for EvalParams {
    fn default() -> Self {
        Self {
            taus_px: vec![0.0, 1.0, 4.0, 16.0, 32.0, 64.0, 120.0],
            budgets: vec![500_000, 1_000_000, 2_500_000],
            orbit_radii: vec![1.0, 2.0, 4.0],
            orbit_views: 8,
            orbit_size_px: 512,
        }
    }
}

impl Bounded for EvalParams {
    const TABLE: &'static str = "eval";
    const BOUNDS: &'static [Bound] = &[
        Bound::list("taus_px", 0.0, 10_000.0, 32, "screen-space error in pixels"),
        Bound::list("budgets", 1.0, 1e9, 16, "splats"),
        Bound::list(
            "orbit_radii",
            0.01,
            100.0,
            16,
            "multiples of the scene radius",
        ),
        Bound::scalar("orbit_views", 1.0, 360.0, "cameras per orbit ring"),
        Bound::scalar("orbit_size_px", 16.0, 4096.0, "pixels"),
    ];
}

impl EvalParams {
    /// Check the fields against their bounds ([`Bounded::BOUNDS`]).
    ///
    /// # Errors
    /// [`Error::Param`] naming the field, the accepted range and the value found.
    pub fn validate(&self) -> Result<()> {
        self.check_bounds()
    }
}

/// What is being evaluated.
#[derive(Debug)]
pub enum Delivered {
    /// A tileset: every τ and budget cut is scored.
    Tileset(LoadedTileset),
    /// One splat file (in the capture frame): scored as a single cut labelled `file`.
    Splats {
        label: String,
        splats: GaussianSplats,
        bytes: u64,
    },
}

/// Render and score `delivered` from `views`.
///
/// - `reference`: the full trained splats in the capture frame (`splats.ply`), the "full" column
///   and the second baseline of every score; `None` scores against the photos only.
/// - `views`: held-out photos or orbit cameras (at least one).
/// - `options`: render options (background, antialiasing) the splats were trained with.
/// - `out_dir`: receives `fidelity.json`, `strips/` and `psnr_bytes.svg` (created if missing).
///
/// # Errors
/// [`Error::Param`] for no views or bad params; render errors ([`Error::Kernel`]); tile content
/// that cannot be read; [`Error::Io`] when an output cannot be written.
pub fn evaluate(
    renderer: &Renderer,
    delivered: &Delivered,
    reference: Option<&GaussianSplats>,
    views: &[EvalView],
    params: &EvalParams,
    options: &RenderOptions,
    out_dir: &Path,
) -> Result<EvalReport> {
    params.validate()?;
    if views.is_empty() {
        return Err(Error::Param {
            stage: "eval",
            field: "views".into(),
            expected: "at least one camera (held-out photos or an orbit)".into(),
            found: "none".into(),
        });
    }
    let specs = cut_specs(delivered, params);
    let mut columns: Vec<Vec<CutScores>> = vec![Vec::new(); specs.len()];
    let mut reference_scores = Vec::new();
    let strips_dir = out_dir.join("strips");
    for view in views {
        let scored = score_view(renderer, delivered, reference, view, &specs, options)?;
        report::write_strip(&strips_dir, view, &scored.strip)?;
        reference_scores.extend(scored.reference);
        for (col, s) in columns.iter_mut().zip(scored.cuts) {
            col.push(s);
        }
        tracing::debug!(view = %view.name, "eval: view scored");
    }
    let report = report::assemble(
        delivered,
        reference.is_some(),
        views,
        &specs,
        columns,
        reference_scores,
    )?;
    report::write_all(&report, out_dir)?;
    Ok(report)
}

/// The figures of `report` a job records (ledger summary, `metrics.json` `delivery`, `kiln
/// regress`): publish loss, the full splats' PSNR, total bytes, splats per level, and per τ cut
/// the mean PSNR/SSIM against the photos (when there are photos) and against the full splats,
/// splats and bytes — keyed `tau<τ>` (e.g. `tau16`).
#[must_use]
pub fn delivery_summary(report: &EvalReport) -> EvalSummary {
    let cuts = report
        .cuts
        .iter()
        .map(|c| {
            let key = match (c.tau_px, c.budget_splats) {
                (Some(t), _) => format!("tau{t}"),
                (None, Some(b)) => format!("budget{b}"),
                _ => "file".to_string(),
            };
            let m = &c.mean;
            let cut = CutSummary {
                psnr_db: m.psnr_db,
                ssim: m.ssim,
                psnr_vs_full_db: m.psnr_vs_full_db,
                ssim_vs_full: m.ssim_vs_full,
                splats: m.splats,
                bytes: m.bytes,
            };
            (key, cut)
        })
        .collect();
    EvalSummary {
        publish_loss_db: report.publish_loss_db,
        reference_psnr_db: report.reference_psnr_db,
        total_bytes: report.total_bytes,
        level_splats: report.levels.iter().map(|l| l.splats).collect(),
        views: report.views.len(),
        view_kind: report.views.first().map(|v| v.kind.clone()),
        cuts,
    }
}

/// File name of the viewer cameras beside a published tileset.
pub const CAMERAS_JSON: &str = "cameras.json";

/// The cameras of `views` for a 3D Tiles viewer (`cameras.json` beside `tileset.json`): each
/// camera's centre, viewing direction and up direction in the tileset's world frame (what the
/// root's `transform` maps to: ECEF metres when georeferenced), its image size, pinhole
/// intrinsics (pixels) and fields of view (radians), so a viewer can open exactly where the
/// photo was taken. `frame` places the capture in the tileset ([`TilesetFrame`]).
///
/// [`TilesetFrame`]: crate::stages::tile::frame::TilesetFrame
#[must_use]
pub fn viewer_cameras(
    views: &[EvalView],
    frame: &crate::stages::tile::frame::TilesetFrame,
) -> serde_json::Value {
    use kiln_formats::tiles::transform;
    let to_world = match &frame.georef {
        Some(g) => transform::mul(g, &frame.tileset_from_capture()),
        None => frame.tileset_from_capture(),
    };
    let cameras: Vec<serde_json::Value> = views
        .iter()
        .map(|v| {
            let c = &v.camera;
            let w = c.world_to_camera.map(|r| r.map(f64::from));
            let centre: [f64; 3] =
                std::array::from_fn(|a| -(0..3).map(|k| w[k][a] * w[k][3]).sum::<f64>());
            let forward = [w[2][0], w[2][1], w[2][2]];
            let up = [-w[1][0], -w[1][1], -w[1][2]];
            let (wpx, hpx) = (f64::from(c.width), f64::from(c.height));
            serde_json::json!({
                "name": v.name,
                "kind": v.kind,
                "width": c.width,
                "height": c.height,
                "fx": c.fx, "fy": c.fy, "cx": c.cx, "cy": c.cy,
                "fovx_rad": 2.0 * (wpx / (2.0 * f64::from(c.fx))).atan(),
                "fovy_rad": 2.0 * (hpx / (2.0 * f64::from(c.fy))).atan(),
                "position": transform::apply(&to_world, centre),
                "direction": transform::apply_vector(&to_world, forward),
                "up": transform::apply_vector(&to_world, up),
            })
        })
        .collect();
    serde_json::json!({
        "frame": "tileset world (the root transform's target; ECEF when georeferenced)",
        "cameras": cameras,
    })
}

/// One column of the evaluation: a τ cut, a budget cut, or the whole file.
#[derive(Debug, Clone, PartialEq)]
pub enum CutSpec {
    Tau(f64),
    Budget(usize),
    File,
}

impl CutSpec {
    /// The column label: `τ=16`, `budget=1000000`, or the file label.
    #[must_use]
    pub fn label(&self, delivered: &Delivered) -> String {
        match (self, delivered) {
            (CutSpec::Tau(t), _) => format!("τ={t}"),
            (CutSpec::Budget(b), _) => format!("budget={b}"),
            (CutSpec::File, Delivered::Splats { label, .. }) => label.clone(),
            (CutSpec::File, _) => "file".into(),
        }
    }
}

fn cut_specs(delivered: &Delivered, params: &EvalParams) -> Vec<CutSpec> {
    match delivered {
        Delivered::Tileset(_) => params
            .taus_px
            .iter()
            .map(|&t| CutSpec::Tau(t))
            .chain(params.budgets.iter().map(|&b| CutSpec::Budget(b)))
            .collect(),
        Delivered::Splats { .. } => vec![CutSpec::File],
    }
}

/// The scores of one view: per cut, the full splats against the photo, and the strip images.
struct ScoredView {
    cuts: Vec<CutScores>,
    reference: Option<(String, f64, f64)>,
    strip: Vec<Vec<u8>>,
}

/// An 8-bit render and its pixels as [0, 1] floats.
struct Render8 {
    bytes: Vec<u8>,
    floats: Vec<f32>,
}

impl Render8 {
    fn new(image: &[f32]) -> Self {
        let bytes = quantise_u8(image);
        let floats = bytes.iter().map(|&b| f32::from(b) / 255.0).collect();
        Self { bytes, floats }
    }
}

fn score_view(
    renderer: &Renderer,
    delivered: &Delivered,
    reference: Option<&GaussianSplats>,
    view: &EvalView,
    specs: &[CutSpec],
    options: &RenderOptions,
) -> Result<ScoredView> {
    let (w, h) = (view.camera.width as usize, view.camera.height as usize);
    let render = |s: &GaussianSplats| -> Result<Render8> {
        if s.is_empty() {
            let bg: Vec<f32> = (0..w * h).flat_map(|_| options.background).collect();
            return Ok(Render8::new(&bg));
        }
        Ok(Render8::new(&render_host(
            renderer,
            s,
            s.sh_degree,
            &view.camera,
            options,
        )?))
    };
    let photo = match &view.photo {
        Some(v) => {
            let px = v.load()?;
            Some((Render8::new(&px.image), px.loss_weights.clone()))
        }
        None => None,
    };
    let weights = photo.as_ref().and_then(|p| p.1.as_deref());
    let score = |a: &Render8, b: &Render8| -> (f64, f64) {
        let psnr = psnr_weighted(&a.floats, &b.floats, weights).min(PSNR_CAP_DB);
        (psnr, ssim_weighted(&a.floats, &b.floats, weights, h, w))
    };
    let full = reference.map(render).transpose()?;
    let mut strip = Vec::new();
    if let Some((p, _)) = &photo {
        strip.push(p.bytes.clone());
    }
    let reference_score = match (&full, &photo) {
        (Some(f), Some((p, _))) => {
            let (psnr, ssim) = score(f, p);
            Some((view.name.clone(), psnr, ssim))
        }
        _ => None,
    };
    if let Some(f) = &full {
        strip.push(f.bytes.clone());
    }
    let frustum = cut::ViewFrustum::of(&view.camera);
    // Cuts with the same tiles render the same image: render each distinct one once.
    let mut rendered: Vec<(Vec<usize>, std::rc::Rc<Render8>)> = Vec::new();
    let mut cuts = Vec::with_capacity(specs.len());
    for spec in specs {
        let (image, splats, bytes) = match (spec, delivered) {
            (CutSpec::File, Delivered::Splats { splats, bytes, .. }) => {
                (std::rc::Rc::new(render(splats)?), splats.len(), *bytes)
            }
            (CutSpec::File, Delivered::Tileset(_)) => unreachable!("file cuts are for files"),
            (_, Delivered::Splats { .. }) => unreachable!("τ cuts are for tilesets"),
            (spec, Delivered::Tileset(ts)) => {
                let c = match spec {
                    CutSpec::Tau(t) => cut::sse_cut(ts, &frustum, *t),
                    CutSpec::Budget(b) => cut::budget_cut(ts, &frustum, *b)?,
                    CutSpec::File => unreachable!(),
                };
                let bytes = c.fetched.iter().map(|&i| ts.tiles[i].content_bytes).sum();
                let mut splats = 0;
                for &i in &c.shown {
                    splats += ts.splat_count(i)?;
                }
                // The cut's splats are gathered (copied) only when it is not rendered yet.
                let image = match rendered.iter().find(|(k, _)| *k == c.shown) {
                    Some((_, img)) => std::rc::Rc::clone(img),
                    None => {
                        let img = std::rc::Rc::new(render(&ts.gather(&c.shown)?)?);
                        rendered.push((c.shown.clone(), std::rc::Rc::clone(&img)));
                        img
                    }
                };
                (image, splats, bytes)
            }
        };
        let vs_photo = photo.as_ref().map(|(p, _)| score(&image, p));
        let vs_full = full.as_ref().map(|f| score(&image, f));
        if matches!(spec, CutSpec::Tau(_) | CutSpec::File) {
            strip.push(image.bytes.clone());
        }
        cuts.push(CutScores {
            view: Some(view.name.clone()),
            psnr_db: vs_photo.map(|s| s.0),
            ssim: vs_photo.map(|s| s.1),
            psnr_vs_full_db: vs_full.map(|s| s.0),
            ssim_vs_full: vs_full.map(|s| s.1),
            splats: splats as f64,
            bytes: bytes as f64,
        });
    }
    Ok(ScoredView {
        cuts,
        reference: reference_score,
        strip,
    })
}

#[cfg(test)]
mod tests;
