//! The `eval` stage's contract: the tileset's cuts rendered from the capture's held-out photos
//! (trained splats; scored against the photos and `splats.ply`) or from an orbit (ingested
//! splats; scored against the input splats), written to `fidelity/` and summarised (publish loss,
//! τ cuts) for the ledger and `kiln regress`. A capture's `metrics.json` is written again beside
//! it with a `delivery` section.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    CAMERAS_JSON, Delivered, EvalView, LoadedTileset, delivery_summary, evaluate, orbit_views,
    scene_sphere, viewer_cameras,
};
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};
use crate::stages::tile::splat::SplatSource;
use crate::stages::{ingest, train};
use crate::{Error, Result};

/// The `eval` stage.
#[derive(Debug, Clone, Copy)]
pub struct Eval {
    /// Where the full splats come from: a capture's trained splats (scored from the held-out
    /// photos) or a splats job's input (scored from an orbit).
    pub source: SplatSource,
}

impl Eval {
    /// A capture job's.
    pub const TRAINED: Eval = Eval {
        source: SplatSource::Trained,
    };
    /// A splats job's.
    pub const INGESTED: Eval = Eval {
        source: SplatSource::Ingested,
    };
}

/// The summary of [`Eval`] (also `metrics.json`'s `delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    /// Full splats − full-detail tiles against the photos, dB (`None` without photos).
    pub publish_loss_db: Option<f64>,
    /// The full splats against the photos, dB.
    pub reference_psnr_db: Option<f64>,
    /// Content bytes of the whole tileset.
    pub total_bytes: u64,
    /// Splats per depth, root first.
    pub level_splats: Vec<usize>,
    /// Views scored.
    pub views: usize,
    /// `held-out` or `orbit` (of the first view).
    pub view_kind: Option<String>,
    /// Per cut, keyed `tau<τ>` (`tau16`), `budget<splats>` or `file`.
    pub cuts: BTreeMap<String, CutSummary>,
}

impl EvalSummary {
    /// The τ cut scored at `tau_px` pixels, if it was.
    #[must_use]
    pub fn tau(&self, tau_px: u32) -> Option<&CutSummary> {
        self.cuts.get(&format!("tau{tau_px}"))
    }
}

/// The mean scores of one cut over the views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutSummary {
    /// Against the photos, dB.
    pub psnr_db: Option<f64>,
    pub ssim: Option<f64>,
    /// Against the full splats' render, dB.
    pub psnr_vs_full_db: Option<f64>,
    pub ssim_vs_full: Option<f64>,
    /// Splats rendered.
    pub splats: f64,
    /// Bytes of tile content fetched.
    pub bytes: f64,
}

impl Stage for Eval {
    type Summary = EvalSummary;

    fn kind(&self) -> StageKind {
        StageKind::EVAL
    }

    /// The photos (ingest), the full splats (train, for captures) and the tileset.
    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::Stage(StageKind::INGEST),
            Input::IfPlanned(StageKind::TRAIN),
            Input::Stage(StageKind::TILE),
        ]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        serde_json::to_value(&plan.eval)
            .map(|mut v| {
                // How the views are rendered (the train stage's background and antialiasing).
                v["render"] = serde_json::json!({
                    "background": plan.train.background,
                    "antialiased": plan.tile.antialiased,
                    "eval_every": plan.train.eval_every,
                });
                v
            })
            .unwrap_or(serde_json::Value::Null)
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        cx.stage_dir(StageKind::TILE)
            .map_or(0, |d| crate::meter::dir_bytes(&d))
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<EvalSummary>> {
        let plan = &cx.plan;
        let ts = LoadedTileset::open(&cx.stage_dir(StageKind::TILE)?.join("tileset.json"))?;
        let (reference, views) = self.reference_and_views(cx)?;
        write_viewer_cameras(&views, &ts, out)?;
        let options = kiln_kernels::RenderOptions {
            background: plan.train.background,
            antialiased: plan.tile.antialiased,
            absgrad: false,
        };
        let report = evaluate(
            &kiln_kernels::Renderer::Cpu,
            &Delivered::Tileset(ts),
            Some(&reference),
            &views,
            &plan.eval,
            &options,
            &out.join("fidelity"),
        )?;
        let summary = delivery_summary(&report);
        if self.source == SplatSource::Trained {
            write_metrics_with_delivery(&cx.stage_dir(StageKind::TRAIN)?, &summary, out)?;
        }
        tracing::info!(
            publish_loss_db = report.publish_loss_db,
            views = report.views.len(),
            "eval: delivered tileset scored"
        );
        Ok(Output::new(summary))
    }
}

impl Eval {
    /// The full splats and the views to score from: a capture's trained splats and held-out
    /// photos, or a splats job's input splats (in the tileset's capture frame: relative to the
    /// origin the tile stage used) and an orbit around them.
    fn reference_and_views(
        &self,
        cx: &StageContext,
    ) -> Result<(kiln_formats::splats::GaussianSplats, Vec<EvalView>)> {
        let plan = &cx.plan;
        let ply = self.source.ply(cx)?;
        match self.source {
            SplatSource::Trained => {
                // The trainer writes `float` x/y/z, which always read at origin 0.
                let reference = kiln_formats::splats::ply::read(&ply)?.splats;
                let ingest_dir = cx.stage_dir(StageKind::INGEST)?;
                let cap = ingest::load_ingested(&ingest_dir)?;
                let views = train::held_out_views(
                    train::train_views(&ingest_dir, &cap, &plan.train),
                    plan.train.eval_every,
                )
                .into_iter()
                .map(EvalView::photo)
                .collect();
                Ok((reference, views))
            }
            SplatSource::Ingested => {
                let reference = kiln_formats::splats::ply::read(&ply)?.splats;
                let views = orbit_views(
                    &scene_sphere(&reference),
                    [0.0, 1.0, 0.0],
                    &plan.eval.orbit_radii,
                    plan.eval.orbit_views,
                    plan.eval.orbit_size_px,
                );
                Ok((reference, views))
            }
        }
    }
}

/// `cameras.json`: where the viewer opens — the held-out photos, or the orbit at twice the
/// radius (all views when there are neither).
fn write_viewer_cameras(views: &[EvalView], ts: &LoadedTileset, out: &Path) -> Result<()> {
    let viewer_views: Vec<EvalView> = views
        .iter()
        .filter(|v| v.kind == "held-out" || v.name.starts_with("orbit-2x"))
        .cloned()
        .collect();
    let cameras = viewer_cameras(
        if viewer_views.is_empty() {
            views
        } else {
            &viewer_views
        },
        &ts.frame,
    );
    let path = out.join(CAMERAS_JSON);
    let json = serde_json::to_vec_pretty(&cameras)
        .map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(&path, &json)?;
    Ok(())
}

/// The train stage's `metrics.json` (from `train_dir`) with `delivery` added, written to `out`
/// (publish takes it over the train stage's).
fn write_metrics_with_delivery(train_dir: &Path, summary: &EvalSummary, out: &Path) -> Result<()> {
    let mut metrics: serde_json::Value = std::fs::read(train_dir.join("metrics.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    let path = out.join("metrics.json");
    metrics["delivery"] =
        serde_json::to_value(summary).map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    let json = serde_json::to_vec_pretty(&metrics)
        .map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(&path, &json)?;
    Ok(())
}
