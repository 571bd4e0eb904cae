//! The `train` stage's contract: the ingested capture → trained splats (`splats.ply`,
//! `metrics.json`, renders), summarised by the [`TrainReport`]. It holds the rasterizer device
//! and resumes from its checkpoint (`WORK/train.ckpt`), which travels through the shared cache.

use std::path::{Path, PathBuf};

use super::checkpoint::Checkpointer;
use super::{InitPoints, MaskMode, TrainParams, TrainReport, TrainView, train_checkpointed};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};
use crate::stages::ingest::{self, IngestedCapture};

/// The `train` stage.
#[derive(Debug, Clone, Copy)]
pub struct Train;

impl Stage for Train {
    type Summary = TrainReport;

    fn kind(&self) -> StageKind {
        StageKind::TRAIN
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::Stage(StageKind::INGEST)]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        serde_json::to_value(&plan.train).unwrap_or(serde_json::Value::Null)
    }

    fn uses_rasterizer(&self, _plan: &JobPlan) -> bool {
        true
    }

    fn needs_gpu_slot(&self) -> bool {
        true
    }

    /// `WORK/train.ckpt`, beside (not inside) `train.partial/`, which each attempt rebuilds from
    /// scratch.
    fn checkpoint(&self, plan: &JobPlan) -> Option<PathBuf> {
        Some(plan.work_dir.join(super::checkpoint::FILE_NAME))
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        cx.stage_dir(StageKind::INGEST)
            .map_or(0, |d| crate::meter::dir_bytes(&d))
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<TrainReport>> {
        let plan = &cx.plan;
        let ingest_dir = cx.stage_dir(StageKind::INGEST)?;
        let cap = ingest::load_ingested(&ingest_dir)?;
        let views = train_views(&ingest_dir, &cap, &plan.train);
        let bar = crate::progress::steps_bar(plan.train.steps as u64, "train");
        let progress = |step: usize, _total: usize, loss: f64| {
            bar.set_position(step as u64);
            if step.is_multiple_of(10) {
                bar.set_message(format!("loss {loss:.4}"));
            }
        };
        let checkpointer = Checkpointer {
            path: Stage::checkpoint(self, plan).expect("train has a checkpoint"),
            key: cx.key.clone(),
            every: plan.train.checkpoint_every,
            // A stop request, or a warning under `strict = true`: the job fails at once then.
            stop: || crate::interrupt::stop_requested() || crate::warnings::strict_stage_warned(),
        };
        let result = train_checkpointed(
            &cx.renderer,
            views,
            init_points(&cap),
            &plan.train,
            out,
            &progress,
            Some(&checkpointer),
        );
        bar.finish_and_clear();
        let (_splats, report) = result?;
        Ok(Output::new(report))
    }
}

/// The capture's structure-from-motion points (with their colours) as the trainer's start, when
/// it has some.
fn init_points(cap: &IngestedCapture) -> Option<InitPoints> {
    cap.points.as_ref().map(|p| InitPoints {
        positions: p
            .positions
            .iter()
            .map(|q| [q[0] as f32, q[1] as f32, q[2] as f32])
            .collect(),
        colors: p
            .colors
            .iter()
            .map(|c| {
                [
                    c[0] as f32 / 255.0,
                    c[1] as f32 / 255.0,
                    c[2] as f32 / 255.0,
                ]
            })
            .collect(),
    })
}

/// The ingested frames (`ingest_dir`, its `capture.json` read as `cap`) as training views,
/// decoded on demand (images over `params.background`, masks used as `params.mask_mode` says):
/// the trainer's bounded cache decides how many are held at once (`train.image_cache_mb`).
pub fn train_views(
    ingest_dir: &Path,
    cap: &IngestedCapture,
    params: &TrainParams,
) -> Vec<TrainView> {
    let ignore_outside_mask = params.mask_mode == MaskMode::Ignore;
    let background = params.background;
    cap.frames
        .iter()
        .map(|f| {
            let w2c = f.world_to_camera.map(|r| r.map(|v| v as f32));
            let camera = kiln_kernels::Camera {
                width: f.width,
                height: f.height,
                fx: f.fx as f32,
                fy: f.fy as f32,
                cx: f.cx as f32,
                cy: f.cy as f32,
                world_to_camera: w2c,
            };
            let (dir, frame) = (ingest_dir.to_path_buf(), f.clone());
            let load = move || ingest::load_frame(&dir, &frame, background, ignore_outside_mask);
            TrainView::on_demand(f.name.clone(), camera, std::sync::Arc::new(load))
                .with_split(f.split)
        })
        .collect()
}
