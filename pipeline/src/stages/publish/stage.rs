//! The `publish` stage's contract: the finished stages' outputs → the job's output URL, with
//! `manifest.json` last. Its output lives outside the work folder ([`Keep::Elsewhere`]): a job
//! whose publish key is already recorded in the output's manifest has nothing to write.
//!
//! What is published, from the stages the plan has: `reconstruct`'s COLMAP model, logs and
//! report under `reconstruct/`; the trained splats, metrics and renders (`train`); the LOD chain
//! under `lods/` (`decimate`); the tileset (`tile`); the delivered tileset's scores (`eval`, whose
//! `metrics.json` replaces the train stage's). A splats job's input is the user's own file and is
//! not published again.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{PublishFile, committed_files_present, publish_with_warnings, read_manifest};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Keep, Output, Stage, StageContext, file_len};
use crate::stages::reconstruct;

/// The `publish` stage.
#[derive(Debug, Clone, Copy)]
pub struct Publish;

/// The summary of [`Publish`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishSummary {
    /// Where the outputs went (the job's `output`).
    pub output: String,
    /// Files in the committed manifest.
    pub files: usize,
    /// Bytes uploaded (0 when the output already held this job's result).
    pub bytes: u64,
    /// The job whose earlier publish of the same key is reused, when nothing was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_by: Option<String>,
}

impl Stage for Publish {
    type Summary = PublishSummary;

    fn kind(&self) -> StageKind {
        StageKind::PUBLISH
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::IfPlanned(StageKind::RECONSTRUCT),
            Input::Stage(StageKind::INGEST),
            Input::IfPlanned(StageKind::TRAIN),
            Input::IfPlanned(StageKind::DECIMATE),
            Input::Stage(StageKind::TILE),
            Input::IfPlanned(StageKind::EVAL),
        ]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        serde_json::json!({ "output": plan.output })
    }

    fn keep(&self) -> Keep {
        Keep::Elsewhere
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        published_files(cx)
            .map(|files| files.iter().map(|f| file_len(&f.local)).sum())
            .unwrap_or(0)
    }

    fn run(&self, cx: &StageContext, _out: &Path) -> Result<Output<PublishSummary>> {
        let plan = &cx.plan;
        let files = published_files(cx)?;
        let handle = tokio::runtime::Handle::current();
        // Published already with this very key (same inputs, same output), every file still in
        // place: nothing to write.
        if let Some(m) = handle.block_on(read_manifest(&plan.output))
            && m.stage_key.as_deref() == Some(cx.key.as_str())
            && handle.block_on(committed_files_present(&plan.output, &m))
        {
            tracing::info!(output = %plan.output, "publish: the output already holds this job's result");
            return Ok(Output {
                summary: PublishSummary {
                    output: plan.output.clone(),
                    files: m.files.len(),
                    bytes: 0,
                    published_by: Some(m.job_id),
                },
                reused: true,
                bytes_written: 0,
            });
        }
        let r = handle.block_on(publish_with_warnings(
            &files,
            &plan.output,
            &plan.job_id,
            Some(&cx.key),
            &job_warnings(cx),
            plan.fence.as_ref(),
        ))?;
        Ok(Output {
            summary: PublishSummary {
                output: plan.output.clone(),
                files: r.manifest.files.len(),
                bytes: r.bytes_written,
                published_by: None,
            },
            reused: false,
            bytes_written: r.bytes_written,
        })
    }
}

/// What the stages finished before publish warned about, in plan order (from their folders'
/// markers, which hold their summaries).
fn job_warnings(cx: &StageContext) -> Vec<crate::warnings::StageWarning> {
    let mut finished = cx.finished.clone();
    finished.sort_by_key(|k| StageKind::BUILTIN.iter().position(|b| b == k));
    let summaries: Vec<(StageKind, serde_json::Value)> = finished
        .into_iter()
        .filter_map(|k| {
            let dir = crate::stage::stage_dir(&cx.plan, k);
            Some((k, crate::run::marker_summary(&dir)?))
        })
        .collect();
    crate::warnings::of_job(summaries.iter().map(|(k, s)| (k.name(), s)))
}

/// The files a job publishes, from its finished stage folders, sorted by their published path.
fn published_files(cx: &StageContext) -> Result<Vec<PublishFile>> {
    let mut files = Vec::new();
    let has = |k: StageKind| cx.has_input(k);
    if has(StageKind::RECONSTRUCT) {
        let dir = cx.stage_dir(StageKind::RECONSTRUCT)?;
        // Not its images: they are the input.
        for sub in ["sparse", "logs"] {
            add_tree(&mut files, &dir.join(sub), &format!("reconstruct/{sub}/"))?;
        }
    }
    if has(StageKind::TRAIN) {
        add_tree(&mut files, &cx.stage_dir(StageKind::TRAIN)?, "")?;
    }
    if has(StageKind::DECIMATE) {
        add_tree(&mut files, &cx.stage_dir(StageKind::DECIMATE)?, "lods/")?;
    }
    add_tree(&mut files, &cx.stage_dir(StageKind::TILE)?, "")?;
    if has(StageKind::EVAL) {
        add_tree(&mut files, &cx.stage_dir(StageKind::EVAL)?, "")?;
    }
    if has(StageKind::RECONSTRUCT) {
        files.push(PublishFile {
            local: cx
                .stage_dir(StageKind::RECONSTRUCT)?
                .join(reconstruct::REPORT_JSON),
            relative: format!("reconstruct/{}", reconstruct::REPORT_JSON),
        });
    }
    // The eval stage's metrics.json (the train stage's plus `delivery`), added last, replaces
    // the train stage's.
    if let Some(last) = files.iter().rposition(|f| f.relative == "metrics.json") {
        let keep = files[last].local.clone();
        files.retain(|f| f.relative != "metrics.json" || f.local == keep);
    }
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(files)
}

/// Every file under `dir` as published under `prefix`, hidden files (the stage marker) left
/// out: they are internal.
fn add_tree(files: &mut Vec<PublishFile>, dir: &Path, prefix: &str) -> Result<()> {
    for rel in crate::file_tree::files_under(dir)? {
        let rel_str = rel.to_string_lossy().replace('\\', "/");
        if rel_str.split('/').any(|part| part.starts_with('.')) {
            continue;
        }
        files.push(PublishFile {
            local: dir.join(&rel),
            relative: format!("{prefix}{rel_str}"),
        });
    }
    Ok(())
}
