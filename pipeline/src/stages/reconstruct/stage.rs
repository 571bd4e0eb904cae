//! The `reconstruct` stage's contract: photos or a video without poses (the fetched job input)
//! → a COLMAP model that passed the quality gate, summarised by its quality figures.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{InputShape, Matcher, reconstruct};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};

/// The `reconstruct` stage.
#[derive(Debug, Clone, Copy)]
pub struct Reconstruct;

/// The summary of [`Reconstruct`]: the chosen model's quality (see
/// [`super::ReconstructQuality`]) and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconstructSummary {
    /// `photos` or `video`.
    pub input: InputShape,
    /// Images given to COLMAP.
    pub images: usize,
    /// Images registered in the chosen model.
    pub registered: usize,
    /// `registered / images`.
    pub registered_fraction: f64,
    /// 3D points in the chosen model.
    pub points: usize,
    /// Mean reprojection error, pixels.
    pub mean_reprojection_error_px: f64,
    /// Models COLMAP's mapper produced.
    pub models: usize,
    pub matcher: Matcher,
    /// First line of `colmap help`.
    pub colmap_version: String,
}

impl Stage for Reconstruct {
    type Summary = ReconstructSummary;

    fn kind(&self) -> StageKind {
        StageKind::RECONSTRUCT
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        serde_json::to_value(&plan.reconstruct).unwrap_or(serde_json::Value::Null)
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<ReconstructSummary>> {
        let input = cx.fetched_input()?;
        let bar = crate::progress::steps_bar(0, "sfm");
        let mut progress = |step: &str, done: usize, total: usize| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(step.to_string());
        };
        let report = reconstruct(input, &cx.plan.reconstruct, out, &mut progress);
        bar.finish_and_clear();
        let report = report?;
        let q = &report.quality;
        tracing::info!(
            registered = q.registered,
            images = q.images,
            points = q.points,
            reprojection_px = format_args!("{:.3}", q.mean_reprojection_error_px),
            "reconstruct: COLMAP model passed the quality gate"
        );
        Ok(Output::new(ReconstructSummary {
            input: report.input,
            images: q.images,
            registered: q.registered,
            registered_fraction: q.registered_fraction,
            points: q.points,
            mean_reprojection_error_px: q.mean_reprojection_error_px,
            models: q.models,
            matcher: report.matcher,
            colmap_version: report.colmap_version.clone(),
        }))
    }
}
