//! The engine: run one stage of a job plan, whatever the stage, with caching and metering.
//!
//! For each stage ([`crate::stage::Stage`]): fetch the job's input (first stages only) → key →
//! cache lookup → run → commit → meter. The key is BLAKE3 over the stage's name, its key
//! parameters, the keys of the stages it reads (the fetched input's content hash for a first
//! stage, which is why a first stage fetches before it knows whether it is cached) and the Kiln
//! version. A stage kept in the work folder
//! ([`Keep::WorkDir`]) writes into `WORK/<stage>.partial/`, which is renamed to `WORK/<stage>/`
//! when it succeeds, with a `.kiln-stage.json` marker holding its key and summary: a rerun whose
//! key matches the marker (or an entry of the shared stage cache) reuses the output, and a failed
//! stage leaves the finished ones intact, so the job resumes where it stopped. A stage with a
//! checkpoint ([`crate::stage::Stage::checkpoint`]) also resumes mid-way; with a shared cache its
//! checkpoint travels to whichever worker runs it next. Entries and checkpoints from the shared
//! cache are used only when they match the cache ledger's record (see [`crate::stage_cache`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dag::{self, StageKind, StageNode};
use crate::meter::{self, Meter, StageUsage};
use crate::plan::JobPlan;
use crate::stage::{AnyStage, Keep, Output, StageContext};
use crate::stage_cache::MARKER;
use crate::{Error, Result};

/// Result of one stage attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageOutcome {
    pub kind: StageKind,
    /// Content key (hex BLAKE3).
    pub key: String,
    /// True when the output was reused from an earlier run.
    pub cache_hit: bool,
    pub usage: StageUsage,
    /// The stage's typed summary as JSON (keys sorted), plus [`STORED_BYTES`] for stages kept in
    /// the work folder. Read it back as its type with `stages::summary::StageSummary`.
    pub summary: serde_json::Value,
    /// What the key is made of (for `kiln why`); `None` from outcomes recorded before it existed.
    #[serde(default)]
    pub recipe: Option<dag::KeyRecipe>,
}

/// Key of a computed stage's summary (ledger `summary`) holding the size of its output folder,
/// bytes: the one copy storage is charged on (`bytes_written` also counts the stage-cache upload).
pub const STORED_BYTES: &str = "stored_bytes";

/// The [`STORED_BYTES`] a stage summary records, if any.
#[must_use]
pub fn stored_bytes(summary: &serde_json::Value) -> Option<u64> {
    summary.get(STORED_BYTES)?.as_u64()
}

/// The marker of a finished stage folder: its key and summary.
#[derive(Serialize, Deserialize)]
struct Marker {
    key: String,
    summary: serde_json::Value,
}

/// The key recorded in the marker of the finished stage folder `dir`, if it has one.
#[must_use]
pub fn marker_key(dir: &Path) -> Option<String> {
    read_marker(dir).map(|m| m.key)
}

/// The summary recorded in the marker of the finished stage folder `dir`, if it has one.
#[must_use]
pub fn marker_summary(dir: &Path) -> Option<serde_json::Value> {
    read_marker(dir).map(|m| m.summary)
}

/// Run `node` of `plan`. `done` holds the outcomes of the stages already run in this job.
///
/// # Errors
/// Any stage error (names the file/field), [`Error::Io`] for work-directory failures,
/// [`Error::Interrupted`] when a stop was requested before it started.
pub async fn run_stage(
    plan: &JobPlan,
    node: &StageNode,
    done: &HashMap<StageKind, StageOutcome>,
) -> Result<StageOutcome> {
    let stage = &node.stage;
    refuse_when_stopping(node.kind)?;
    let mut meter = Meter::start("cpu", 0);
    let fetched = fetch_first_stage_input(plan, node).await?;
    let mut bytes_read = fetched.as_ref().map_or(0, |f| f.bytes);
    let (key, recipe) = key_and_recipe(plan, node, done, fetched.as_ref())?;

    if stage.keep() == Keep::WorkDir
        && let Some((summary, restored)) = finished_earlier(plan, node.kind, &key).await?
    {
        refuse_warnings_when_strict(plan, node.kind, &summary)?;
        return Ok(StageOutcome {
            kind: node.kind,
            key,
            cache_hit: true,
            usage: meter.finish(bytes_read + restored, 0),
            summary,
            recipe: Some(recipe),
        });
    }

    let partial = fresh_partial_dir(plan, node.kind)?;
    let renderer = hold_device(plan, stage.as_ref(), &mut meter)?;
    let cx = StageContext {
        plan: plan.clone(),
        key: key.clone(),
        renderer,
        fetched_input: fetched.as_ref().map(|f| f.local.clone()),
        inputs: node.deps.clone(),
        finished: done.keys().copied().collect(),
    };
    bytes_read += stage.bytes_read(&cx);
    let warnings = crate::warnings::Collector::begin(node.kind).stop_on_warning(plan.strict);
    let result = run_with_checkpoint(plan, stage, cx, &partial, warnings.scope()).await;
    let warnings = warnings.finish();
    let mut output = stopped_by_strict(plan, node.kind, result, &warnings)?;
    crate::warnings::record_in(&mut output.summary, &warnings);
    refuse_warnings_when_strict(plan, node.kind, &output.summary)?;
    let (summary, written) = match stage.keep() {
        Keep::WorkDir => {
            commit_work_dir(plan, stage.as_ref(), &key, output.summary, &partial).await?
        }
        Keep::Elsewhere => {
            let _ = std::fs::remove_dir_all(&partial);
            (output.summary, output.bytes_written)
        }
    };
    Ok(StageOutcome {
        kind: node.kind,
        key,
        cache_hit: output.reused,
        usage: meter.finish(bytes_read, written),
        summary,
        recipe: Some(recipe),
    })
}

/// [`Error::Interrupted`] when SIGINT/SIGTERM asked the job to stop before `kind` started.
fn refuse_when_stopping(kind: StageKind) -> Result<()> {
    if !crate::interrupt::stop_requested() {
        return Ok(());
    }
    Err(Error::Interrupted {
        stage: kind.name(),
        at: "before it started".into(),
        resume: "the stages finished so far are kept: run the same job again to go on".into(),
    })
}

/// A stage's result, where work that stopped early because it warned under `strict = true`
/// ([`crate::warnings::strict_stage_warned`]) fails with the strict refusal listing its
/// warnings, not as interrupted.
fn stopped_by_strict<T>(
    plan: &JobPlan,
    kind: StageKind,
    result: Result<T>,
    warnings: &[String],
) -> Result<T> {
    match result {
        Err(Error::Interrupted { .. })
            if plan.strict && !warnings.is_empty() && !crate::interrupt::stop_requested() =>
        {
            Err(crate::warnings::strict_refusal(kind, warnings))
        }
        other => other,
    }
}

/// Under the job file's `strict = true`, a stage whose summary records warnings fails (before
/// it is committed, so a rerun without `strict` computes it again).
fn refuse_warnings_when_strict(
    plan: &JobPlan,
    kind: StageKind,
    summary: &serde_json::Value,
) -> Result<()> {
    let warnings = crate::warnings::of_summary(summary);
    if plan.strict && !warnings.is_empty() {
        return Err(crate::warnings::strict_refusal(kind, &warnings));
    }
    Ok(())
}

/// The job input as fetched for a first stage: where it lies, its content key and its size.
struct FetchedInput {
    local: PathBuf,
    key: String,
    bytes: u64,
}

/// A first stage (no inputs) reads the job's input: fetch it into `WORK/input/` (with the files
/// it names beside it when the stage asks) and hash it. `None` for other stages.
async fn fetch_first_stage_input(plan: &JobPlan, node: &StageNode) -> Result<Option<FetchedInput>> {
    if !node.deps.is_empty() {
        return Ok(None);
    }
    let dest = plan.work_dir.join("input");
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
    }
    let staged = staged_input(plan)?;
    // The folder the input is staged in reads as the user's own folder, in messages about the
    // files beside the input too (an OBJ's MTL, a glTF's images, a capture's photos).
    let user = user_folder(&staged.stage, &dest);
    crate::input_alias::register(&dest, &user);
    if crate::location::Location::parse(&staged.stage)
        .is_ok_and(|l| matches!(l, crate::location::Location::Local(_)))
    {
        // Absolute paths that the input's files write into the user's own folder read the copy.
        kiln_formats::confined::register_original(&dest, Path::new(&user));
    }
    let fetched = crate::storage::fetch(&staged.stage, &dest, node.stage.fetch_siblings())
        .await
        .map_err(Error::in_user_terms)?;
    crate::input_alias::register(&fetched.local, &staged.stage);
    let local = match staged.entry.is_empty() {
        true => fetched.local,
        false => fetched.local.join(&staged.entry),
    };
    let key = tokio::task::spawn_blocking(move || dag::hash_tree(&dest))
        .await
        .map_err(join_err)??;
    Ok(Some(FetchedInput {
        local,
        key,
        bytes: fetched.bytes,
    }))
}

/// The user's folder that `dest` (the work folder's `input/`) stands for: the staged location
/// itself when it is a folder, else the folder holding it (`/data/m.obj` → `/data`).
fn user_folder(stage: &str, dest: &Path) -> String {
    let local = crate::location::Location::parse(stage)
        .ok()
        .and_then(|l| match l {
            crate::location::Location::Local(p) => Some(p),
            _ => None,
        });
    match local {
        Some(p) if p.is_dir() => p.display().to_string(),
        Some(p) => p
            .parent()
            .map_or_else(|| dest.display().to_string(), |d| d.display().to_string()),
        None if stage.ends_with('/') => stage.trim_end_matches('/').to_string(),
        None => stage
            .rsplit_once('/')
            .map_or(stage, |(folder, _)| folder)
            .to_string(),
    }
}

/// What a job fetches for its first stage: for a capture job the capture folder around the file
/// the input names ([`crate::location::capture_input`], issue 44 rule 1), else the input itself.
///
/// # Errors
/// Those of [`crate::location::capture_input`]: a local capture path that does not exist.
pub fn staged_input(plan: &JobPlan) -> Result<crate::location::CaptureInput> {
    match plan.kind {
        crate::dag::JobKind::Capture => crate::location::capture_input(&plan.input),
        crate::dag::JobKind::Splats => Ok(unbundled_sog_input(&plan.input)),
        _ => Ok(crate::location::CaptureInput {
            stage: plan.input.clone(),
            entry: String::new(),
        }),
    }
}

/// A splats input naming an unbundled SOG's `meta.json` stages its folder (the WebP images beside
/// it are part of the file), with `meta.json` as the entry; other inputs are staged as given.
fn unbundled_sog_input(input: &str) -> crate::location::CaptureInput {
    let trimmed = input.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((folder, "meta.json")) if !folder.is_empty() && !folder.ends_with(':') => {
            crate::location::CaptureInput {
                stage: folder.to_string(),
                entry: "meta.json".into(),
            }
        }
        _ => crate::location::CaptureInput {
            stage: input.to_string(),
            entry: String::new(),
        },
    }
}

/// The stage's content key and what it is made of: its key parameters and the keys of its
/// inputs (the fetched input's hash for a first stage).
fn key_and_recipe(
    plan: &JobPlan,
    node: &StageNode,
    done: &HashMap<StageKind, StageOutcome>,
    fetched: Option<&FetchedInput>,
) -> Result<(String, dag::KeyRecipe)> {
    let inputs: Vec<(String, String)> = match fetched {
        Some(f) => vec![("input".to_string(), f.key.clone())],
        None => node
            .deps
            .iter()
            .map(|d| {
                let outcome = done.get(d).ok_or_else(|| Error::Param {
                    stage: "dag",
                    field: d.name().into(),
                    expected: "dependency run before".into(),
                    found: "not run".into(),
                })?;
                Ok((d.name().to_string(), outcome.key.clone()))
            })
            .collect::<Result<_>>()?,
    };
    let params = node.stage.key_params(plan);
    let keys: Vec<String> = inputs.iter().map(|(_, k)| k.clone()).collect();
    let key = dag::stage_key(node.kind, &params, &keys);
    Ok((key, dag::KeyRecipe::new(node.kind, &params, inputs)))
}

/// A finished output of this very key, in the work folder or in the shared stage cache
/// (restored into the work folder): its summary and the bytes restored.
async fn finished_earlier(
    plan: &JobPlan,
    kind: StageKind,
    key: &str,
) -> Result<Option<(serde_json::Value, u64)>> {
    let final_dir = crate::stage::stage_dir(plan, kind);
    if let Some(m) = read_marker(&final_dir).filter(|m| m.key == key) {
        tracing::info!(stage = %kind, key = &key[..12], "cache hit: reusing earlier output");
        // An earlier attempt may have finished here but failed to reach the shared cache.
        if let Some(cache) = &plan.stage_cache {
            use crate::stage_cache::Upload;
            crate::stage_cache::store(cache, kind.name(), key, &final_dir, Upload::UnlessRecorded)
                .await?;
        }
        return Ok(Some((m.summary, 0)));
    }
    if let Some(cache) = &plan.stage_cache
        && let Some(bytes) =
            crate::stage_cache::restore(cache, kind.name(), key, &final_dir).await?
        && let Some(m) = read_marker(&final_dir).filter(|m| m.key == key)
    {
        return Ok(Some((m.summary, bytes)));
    }
    Ok(None)
}

/// `WORK/<stage>.partial/`, empty.
fn fresh_partial_dir(plan: &JobPlan, kind: StageKind) -> Result<PathBuf> {
    let partial = plan.work_dir.join(format!("{}.partial", kind.name()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| Error::io(&partial, e))?;
    }
    std::fs::create_dir_all(&partial).map_err(|e| Error::io(&partial, e))?;
    Ok(partial)
}

/// The rasterizer a stage renders with: the job's device when the stage uses one (metered as
/// held, with the GPU's index, name and memory), else the CPU.
///
/// # Errors
/// [`Error`] from the device when an explicit `cuda` cannot be opened.
fn hold_device(
    plan: &JobPlan,
    stage: &dyn AnyStage,
    meter: &mut Meter,
) -> Result<kiln_kernels::Renderer> {
    use kiln_kernels::device::{Device, DeviceRequest};
    if !stage.uses_rasterizer(plan) {
        return Ok(kiln_kernels::Renderer::Cpu);
    }
    let r = kiln_kernels::device::renderer_for(plan.device)?;
    let gpu = match plan.device {
        _ if !matches!(r, kiln_kernels::Renderer::Gpu(_)) => None,
        DeviceRequest::Exact(Device::Cuda(n)) => Some(n as u32),
        _ => Some(0),
    };
    meter.hold(
        &r.device_label(),
        u32::from(gpu.is_some()),
        gpu.map(|n| (n, r.device_name(), r.device_memory_bytes().unwrap_or(0))),
    );
    tracing::info!(device = %r.device_label(), name = %r.device_name(), stage = %stage.kind(), "rasterizer device");
    Ok(r)
}

/// Run the stage on a blocking thread into `out`, inside `scope` (its warnings are collected
/// there); with a shared stage cache, its checkpoint travels meanwhile. Errors about a fetched
/// input name the user's path or URL, not the work folder's copy.
async fn run_with_checkpoint(
    plan: &JobPlan,
    stage: &Arc<dyn AnyStage>,
    cx: StageContext,
    out: &Path,
    scope: crate::warnings::Scope,
) -> Result<Output<serde_json::Value>> {
    let kind = stage.kind();
    let uploader = match (&plan.stage_cache, stage.checkpoint(plan)) {
        (Some(cache), Some(local)) => {
            Some(travelling_checkpoint(cache, kind, &cx.key, local).await?)
        }
        _ => None,
    };
    let fetched = cx.fetched_input.clone();
    let (stage2, out2) = (Arc::clone(stage), out.to_path_buf());
    let result = tokio::task::spawn_blocking(move || scope.run(|| stage2.run_json(&cx, &out2)))
        .await
        .map_err(join_err)
        .and_then(|r| r)
        .map_err(|e| match &fetched {
            Some(copy) => e.naming_user_input(copy, &plan.input).in_user_terms(),
            None => e.in_user_terms(),
        });
    if let Some(u) = uploader {
        u.finish(result.is_ok()).await;
    }
    result
}

/// With a shared stage cache, a stage's checkpoint travels: one stored by a worker that died is
/// fetched first (when this machine has none), and each new one is uploaded while the stage
/// runs, so the stage resumes on any worker from its last checkpoint.
async fn travelling_checkpoint(
    cache: &crate::stage_cache::StageCache,
    kind: StageKind,
    key: &str,
    local: PathBuf,
) -> Result<crate::stage_cache::CheckpointUploader> {
    crate::stage_cache::restore_checkpoint(cache, kind.name(), key, &local).await?;
    crate::stage_cache::CheckpointUploader::spawn(
        cache,
        kind.name(),
        key,
        local,
        std::time::Duration::from_secs(2),
    )
}

/// Commit a finished stage: write its marker into `partial`, rename it to `WORK/<stage>/`
/// (replacing an older output), drop its checkpoint, store it in the shared cache and record
/// the output's size in the summary ([`STORED_BYTES`]). Returns the summary and the bytes
/// written (the output and the cache upload).
async fn commit_work_dir(
    plan: &JobPlan,
    stage: &dyn AnyStage,
    key: &str,
    summary: serde_json::Value,
    partial: &Path,
) -> Result<(serde_json::Value, u64)> {
    let kind = stage.kind();
    let final_dir = crate::stage::stage_dir(plan, kind);
    let marker = Marker {
        key: key.to_string(),
        summary,
    };
    let json = serde_json::to_vec_pretty(&marker).expect("marker serialises");
    kiln_formats::atomic_write::write_atomic(&partial.join(MARKER), &json)?;
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
    }
    std::fs::rename(partial, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
    if let Some(checkpoint) = stage.checkpoint(plan) {
        // The finished stage supersedes its checkpoint.
        let _ = std::fs::remove_file(checkpoint);
    }
    let uploaded = match &plan.stage_cache {
        // Computed because the entry was missing or not trusted: replace whatever is there.
        Some(cache) => {
            use crate::stage_cache::Upload;
            crate::stage_cache::store(cache, kind.name(), key, &final_dir, Upload::Always).await?
        }
        None => 0,
    };
    // `bytes_written` counts every byte written (the work folder and the cache upload); the
    // size of the output itself is recorded apart, so storage is charged on one copy.
    let stored = meter::dir_bytes(&final_dir);
    let mut summary = marker.summary;
    if let Some(o) = summary.as_object_mut() {
        o.insert(STORED_BYTES.into(), stored.into());
    }
    Ok((summary, stored + uploaded))
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::io("<stage task>", std::io::Error::other(e.to_string()))
}

fn read_marker(dir: &Path) -> Option<Marker> {
    let bytes = std::fs::read(dir.join(MARKER)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The work folder's `input/` reads as the user's folder: the input itself when it is a
    /// folder, the one holding it when it is a file, the prefix of a remote key.
    #[test]
    fn the_staged_folder_stands_for_the_users_folder() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("m.obj");
        std::fs::write(&file, "").unwrap();
        let dest = Path::new("/work/job/input");
        let folder = d.path().display().to_string();
        assert_eq!(user_folder(&folder, dest), folder);
        assert_eq!(user_folder(&file.display().to_string(), dest), folder);
        assert_eq!(
            user_folder("s3://team/scans/m.obj", dest),
            "s3://team/scans"
        );
        assert_eq!(user_folder("s3://team/scans/", dest), "s3://team/scans");
    }

    /// An unbundled SOG named by its meta.json stages the folder around it, locally and
    /// remotely; other splat inputs are staged as given.
    #[test]
    fn an_unbundled_sog_named_by_its_meta_json_stages_its_folder() {
        let got = unbundled_sog_input("/data/scene/meta.json");
        assert_eq!(
            (got.stage.as_str(), got.entry.as_str()),
            ("/data/scene", "meta.json")
        );
        let got = unbundled_sog_input("s3://team/scene/meta.json");
        assert_eq!(
            (got.stage.as_str(), got.entry.as_str()),
            ("s3://team/scene", "meta.json")
        );
        let got = unbundled_sog_input("/data/scene.ply");
        assert_eq!(
            (got.stage.as_str(), got.entry.as_str()),
            ("/data/scene.ply", "")
        );
    }
}
