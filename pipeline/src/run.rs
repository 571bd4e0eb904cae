//! Run one stage of a job plan in its work directory, with caching and metering.
//!
//! Each stage writes into `WORK/<stage>.partial/`, which is renamed to `WORK/<stage>/` when the stage
//! succeeds, with a `.kiln-stage.json` marker holding its content key. A rerun whose key matches the
//! marker reuses the output (a cache hit); a failed stage leaves the finished stages intact, so the
//! job resumes where it stopped. The train stage also resumes mid-way, from `WORK/train.ckpt`
//! (written every `checkpoint_every` steps and on SIGINT/SIGTERM) when its key matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dag::{self, Dag, JobKind, StageKind, StageNode};
use crate::meter::{self, Meter, StageUsage};
use crate::stages::{decimate, eval, ingest, publish, reconstruct, tile, train};
use crate::{Error, Result};

/// Everything needed to run a job: resolved inputs, outputs and per-stage parameters.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// Unique id of this run (ledger key).
    pub job_id: String,
    /// Human name from the job file.
    pub name: String,
    pub kind: JobKind,
    /// Input URL or path (capture folder / transforms.json / mesh file).
    pub input: String,
    /// Output URL or path (a folder / prefix).
    pub output: String,
    /// Local work directory holding stage outputs between stages and across runs.
    pub work_dir: PathBuf,
    /// Capture jobs: structure-from-motion when the input has no camera poses.
    pub reconstruct: reconstruct::ReconstructParams,
    pub ingest: ingest::IngestParams,
    pub train: train::TrainParams,
    pub decimate: decimate::DecimateParams,
    pub tile: tile::splat::SplatTileParams,
    /// Mesh jobs' tiler parameters (the `[mesh_tile]` table).
    pub mesh_tile: tile::mesh::MeshTileParams,
    /// What the `eval` stage of splat jobs measures (the `[eval]` table).
    pub eval: eval::EvalParams,
    /// Where the tileset sits on Earth; `None` leaves the root in the content's local metres.
    pub georef: Option<tile::georef::Georef>,
    /// The rasterizer's device for `train` (`--device`): `auto` uses `cuda:0` when it opens, else
    /// the CPU. Not part of any stage key: the devices agree to float rounding.
    pub device: kiln_kernels::device::DeviceRequest,
    /// The shared stage cache (an object-store URL or folder; see [`crate::stage_cache`]):
    /// finished stages are restored from it by key and stored in it. `None`: the work directory
    /// is the only cache.
    pub stage_cache: Option<String>,
    /// A queue attempt's fencing token and lease file: `publish` changes committed output only
    /// while it holds the lease ([`publish::Fence`]). `None` for local runs.
    pub fence: Option<publish::Fence>,
}

/// Result of one stage attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageOutcome {
    pub kind: StageKind,
    /// Content key (hex BLAKE3).
    pub key: String,
    /// True when the output was reused from an earlier run.
    pub cache_hit: bool,
    pub usage: StageUsage,
    /// Stage-specific figures (PSNR, splat count, triangles per LOD, tiles, …).
    pub summary: serde_json::Value,
    /// What the key is made of (for `kiln why`); `None` from outcomes recorded before it existed.
    #[serde(default)]
    pub recipe: Option<dag::KeyRecipe>,
}

use crate::stage_cache::MARKER;

/// Key of a computed stage's summary (ledger `summary`) holding the size of its output folder,
/// bytes: the one copy storage is charged on (`bytes_written` also counts the stage-cache upload).
pub const STORED_BYTES: &str = "stored_bytes";

#[derive(Serialize, Deserialize)]
struct Marker {
    key: String,
    summary: serde_json::Value,
}

fn stage_dir(plan: &JobPlan, kind: StageKind) -> PathBuf {
    plan.work_dir.join(kind.name())
}

fn params_json(plan: &JobPlan, kind: StageKind) -> serde_json::Value {
    let v = match kind {
        StageKind::Reconstruct => serde_json::to_value(&plan.reconstruct),
        StageKind::Ingest => serde_json::to_value(&plan.ingest),
        StageKind::Train => serde_json::to_value(&plan.train),
        StageKind::Decimate => serde_json::to_value(&plan.decimate).map(|mut v| {
            v["decimator"] = decimate::DECIMATOR_VERSION.into();
            v
        }),
        StageKind::Tile if plan.kind == JobKind::Mesh => {
            serde_json::to_value(plan.mesh_tile).map(|mut v| {
                v["mesh_tiler"] = tile::mesh::MESH_TILER_VERSION.into();
                v
            })
        }
        StageKind::Tile => serde_json::to_value(plan.tile).map(|mut v| {
            // The tiler's algorithm is part of what its output depends on.
            v["tiler"] = tile::splat::TILER_VERSION.into();
            v
        }),
        StageKind::Eval => serde_json::to_value(&plan.eval).map(|mut v| {
            // How the views are rendered (the train stage's background and antialiasing).
            v["render"] = serde_json::json!({
                "background": plan.train.background,
                "antialiased": plan.tile.antialiased,
                "eval_every": plan.train.eval_every,
            });
            v
        }),
        StageKind::Publish => Ok(serde_json::json!({ "output": plan.output })),
    };
    let v = v.unwrap_or(serde_json::Value::Null);
    match plan.georef {
        Some(g) if kind == StageKind::Tile => serde_json::json!({ "tiler": v, "georef": g }),
        _ => v,
    }
}

/// The DAG of `plan`'s job, and why it has a `reconstruct` stage when it has one.
///
/// Capture jobs look at the input's file names (without downloading anything): images or a video
/// without camera poses add `reconstruct` (see [`reconstruct::classify`] and
/// [`reconstruct::decide`]).
///
/// # Errors
/// [`Error::Input`] when a capture input holds neither poses, photos nor one video (or nothing);
/// [`Error::Param`] on `reconstruct.mode` when it contradicts the input; [`Error::Storage`] when
/// the input cannot be listed.
pub async fn job_dag(plan: &JobPlan) -> Result<(Dag, Option<String>)> {
    let dag = Dag::for_job(plan.kind);
    if plan.kind != JobKind::Capture {
        return Ok((dag, None));
    }
    let names = crate::storage::list_names(&plan.input).await?;
    let shape = reconstruct::classify(&names);
    if shape == reconstruct::InputShape::Unknown {
        return Err(reconstruct::unusable_input_error(&plan.input, &names));
    }
    match reconstruct::decide(plan.reconstruct.mode, shape)? {
        Some(reason) => Ok((dag.with_reconstruct(), Some(reason))),
        None => Ok((dag, None)),
    }
}

/// Run `kiln check`'s tileset checker (structure, geometricError, content inside every bounding
/// volume, declared extensions, SPZ headers) on a tileset the tile stage just wrote, so that a
/// tiler bug fails the stage instead of being published. Tile budgets are not checked here
/// (leaves at the tilers' depth limits may exceed them by design); warnings are logged.
///
/// # Errors
/// [`Error::Input`] listing every error finding, on `tileset.json`.
fn check_written_tileset(tileset: &Path) -> Result<()> {
    use kiln_formats::tiles::check::{CheckOptions, Severity, check_tileset};
    let report = check_tileset(
        tileset,
        &CheckOptions {
            max_splats_per_tile: u64::MAX,
            max_triangles_per_tile: u64::MAX,
        },
    );
    let mut errors = Vec::new();
    for f in &report.findings {
        match f.severity {
            Severity::Error => errors.push(f.to_string()),
            Severity::Warning => tracing::warn!(finding = %f, "tileset check"),
            _ => {}
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(Error::Input {
        path: tileset.to_path_buf(),
        field: "tileset".into(),
        problem: format!(
            "the tileset just written fails `kiln check` (a Kiln bug; please report it):\n{}",
            errors.join("\n")
        ),
    })
}

/// Run `node` of `plan`. `done` holds the outcomes of the stages already run in this job.
///
/// # Errors
/// Any stage error (names the file/field), [`Error::Io`] for work-directory failures.
pub async fn run_stage(
    plan: &JobPlan,
    node: &StageNode,
    done: &HashMap<StageKind, StageOutcome>,
) -> Result<StageOutcome> {
    let kind = node.kind;
    if crate::interrupt::stop_requested() {
        return Err(Error::Interrupted {
            stage: kind.name(),
            at: "before it started".into(),
            resume: "the stages finished so far are kept: run the same job again to go on".into(),
        });
    }
    let mut meter = Meter::start("cpu", 0);
    let mut bytes_read = 0u64;
    let mut fetched_input: Option<PathBuf> = None;
    // The first stage of the DAG fetches the input; later stages key on their dependencies.
    let input_keys: Vec<String> = if node.deps.is_empty() {
        let dest = plan.work_dir.join("input");
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
        }
        let with_siblings = plan.kind == JobKind::Mesh;
        let fetched = crate::storage::fetch(&plan.input, &dest, with_siblings).await?;
        bytes_read += fetched.bytes;
        crate::input_alias::register(&fetched.local, &plan.input);
        fetched_input = Some(fetched.local.clone());
        let d = dest.clone();
        vec![
            tokio::task::spawn_blocking(move || dag::hash_tree(&d))
                .await
                .map_err(join_err)??,
        ]
    } else {
        node.deps
            .iter()
            .map(|d| {
                done.get(d)
                    .map(|o| o.key.clone())
                    .ok_or_else(|| Error::Param {
                        stage: "dag",
                        field: d.name().into(),
                        expected: "dependency run before".into(),
                        found: "not run".into(),
                    })
            })
            .collect::<Result<_>>()?
    };
    let params = params_json(plan, kind);
    let key = dag::stage_key(kind, &params, &input_keys);
    let recipe = Some(dag::KeyRecipe::new(
        kind,
        &params,
        if node.deps.is_empty() {
            vec![("input".to_string(), input_keys[0].clone())]
        } else {
            node.deps
                .iter()
                .map(|d| d.name().to_string())
                .zip(input_keys.iter().cloned())
                .collect()
        },
    ));
    let final_dir = stage_dir(plan, kind);

    if kind != StageKind::Publish
        && let Some(m) = read_marker(&final_dir)
    {
        {
            if m.key == key {
                tracing::info!(stage = %kind, key = &key[..12], "cache hit: reusing earlier output");
                // An earlier attempt may have finished here but failed to reach the shared cache.
                if let Some(cache) = &plan.stage_cache {
                    crate::stage_cache::store(cache, kind, &key, &final_dir).await?;
                }
                return Ok(StageOutcome {
                    kind,
                    key,
                    cache_hit: true,
                    usage: meter.finish(bytes_read, 0),
                    summary: m.summary,
                    recipe,
                });
            }
        }
    }

    if kind != StageKind::Publish
        && let Some(cache) = &plan.stage_cache
        && let Some(bytes) = crate::stage_cache::restore(cache, kind, &key, &final_dir).await?
        && let Some(m) = read_marker(&final_dir).filter(|m| m.key == key)
    {
        return Ok(StageOutcome {
            kind,
            key,
            cache_hit: true,
            usage: meter.finish(bytes_read + bytes, 0),
            summary: m.summary,
            recipe,
        });
    }

    let partial = plan.work_dir.join(format!("{}.partial", kind.name()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| Error::io(&partial, e))?;
    }
    std::fs::create_dir_all(&partial).map_err(|e| Error::io(&partial, e))?;

    let (summary, extra_written) = match kind {
        StageKind::Publish => {
            let files = publish_files(plan, node.deps.contains(&StageKind::Reconstruct))?;
            bytes_read += files.iter().map(|f| file_len(&f.local)).sum::<u64>();
            // Published already with this very key (same inputs, same output): nothing to write.
            if let Some(m) = publish::read_manifest(&plan.output).await
                && m.stage_key.as_deref() == Some(key.as_str())
            {
                tracing::info!(output = %plan.output, "publish: the output already holds this job's result");
                let _ = std::fs::remove_dir_all(&partial);
                return Ok(StageOutcome {
                    kind,
                    key,
                    cache_hit: true,
                    usage: meter.finish(bytes_read, 0),
                    summary: serde_json::json!({
                        "output": plan.output,
                        "files": m.files.len(),
                        "bytes": 0,
                        "published_by": m.job_id,
                    }),
                    recipe,
                });
            }
            let r = publish::publish_keyed(
                &files,
                &plan.output,
                &plan.job_id,
                Some(&key),
                plan.fence.as_ref(),
            )
            .await?;
            let summary = serde_json::json!({
                "output": plan.output,
                "files": r.manifest.files.len(),
                "bytes": r.bytes_written,
            });
            (summary, r.bytes_written)
        }
        _ => {
            bytes_read += match kind {
                StageKind::Reconstruct => 0,
                StageKind::Ingest if node.deps.contains(&StageKind::Reconstruct) => {
                    meter::dir_bytes(&stage_dir(plan, StageKind::Reconstruct))
                }
                StageKind::Ingest => 0,
                StageKind::Train => meter::dir_bytes(&stage_dir(plan, StageKind::Ingest)),
                StageKind::Decimate => meter::dir_bytes(&stage_dir(plan, StageKind::Ingest)),
                StageKind::Tile => match plan.kind {
                    JobKind::Capture => {
                        file_len(&stage_dir(plan, StageKind::Train).join("splats.ply"))
                    }
                    JobKind::Mesh => meter::dir_bytes(&stage_dir(plan, StageKind::Decimate)),
                    JobKind::Splats => {
                        file_len(&stage_dir(plan, StageKind::Ingest).join(ingest::SPLATS_PLY))
                    }
                },
                StageKind::Eval => meter::dir_bytes(&stage_dir(plan, StageKind::Tile)),
                StageKind::Publish => 0,
            };
            let renderer = if kind == StageKind::Train
                || (kind == StageKind::Tile
                    && plan.kind == JobKind::Capture
                    && plan.tile.refine_steps > 0)
            {
                let r = kiln_kernels::device::renderer_for(plan.device)?;
                let gpu = match plan.device {
                    _ if !matches!(r, kiln_kernels::Renderer::Gpu(_)) => None,
                    kiln_kernels::device::DeviceRequest::Exact(
                        kiln_kernels::device::Device::Cuda(n),
                    ) => Some(n as u32),
                    _ => Some(0),
                };
                meter.hold(
                    &r.device_label(),
                    u32::from(gpu.is_some()),
                    gpu.map(|n| (n, r.device_name(), r.device_memory_bytes().unwrap_or(0))),
                );
                tracing::info!(device = %r.device_label(), name = %r.device_name(), stage = %kind, "rasterizer device");
                r
            } else {
                kiln_kernels::Renderer::Cpu
            };
            let plan2 = plan.clone();
            let out = partial.clone();
            let input = fetched_input.clone();
            let from_reconstruct = node.deps.contains(&StageKind::Reconstruct);
            let key2 = key.clone();
            let uploader = match (&plan.stage_cache, kind) {
                (Some(cache), StageKind::Train) => {
                    Some(travelling_checkpoint(plan, cache, &key).await?)
                }
                _ => None,
            };
            let summary = tokio::task::spawn_blocking(move || {
                run_local(
                    &plan2,
                    kind,
                    input.as_deref(),
                    from_reconstruct,
                    &renderer,
                    &out,
                    &key2,
                )
            })
            .await
            .map_err(join_err)
            .and_then(|r| r)
            .map_err(|e| match &fetched_input {
                // Errors about the input name the user's path or URL, not the work-dir copy.
                Some(copy) => e.naming_user_input(copy, &plan.input),
                None => e,
            });
            if let Some(u) = uploader {
                u.finish(summary.is_ok()).await;
            }
            (summary?, 0)
        }
    };

    if kind != StageKind::Publish {
        let marker = Marker {
            key: key.clone(),
            summary: summary.clone(),
        };
        let json = serde_json::to_vec_pretty(&marker).expect("marker serialises");
        kiln_formats::atomic_write::write_atomic(&partial.join(MARKER), &json)?;
        if final_dir.exists() {
            std::fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
        }
        std::fs::rename(&partial, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
        if kind == StageKind::Train {
            // The finished stage supersedes its checkpoint.
            let _ = std::fs::remove_file(checkpoint_path(plan));
        }
    } else {
        let _ = std::fs::remove_dir_all(&partial);
    }
    let mut summary = summary;
    let written = if kind == StageKind::Publish {
        extra_written
    } else {
        let uploaded = match &plan.stage_cache {
            Some(cache) => crate::stage_cache::store(cache, kind, &key, &final_dir).await?,
            None => 0,
        };
        // `bytes_written` counts every byte written (the work folder and the cache upload); the
        // size of the output itself is recorded apart, so storage is charged on one copy.
        let stored = meter::dir_bytes(&final_dir);
        if let Some(o) = summary.as_object_mut() {
            o.insert(STORED_BYTES.into(), stored.into());
        }
        stored + uploaded
    };
    Ok(StageOutcome {
        kind,
        key,
        cache_hit: false,
        usage: meter.finish(bytes_read, written),
        summary,
        recipe,
    })
}

/// With a shared stage cache, the train stage's checkpoint travels: one stored by a worker that
/// died is fetched first (when this machine has none), and each new one is uploaded while the
/// stage runs, so the stage resumes on any worker from its last checkpoint.
async fn travelling_checkpoint(
    plan: &JobPlan,
    cache: &str,
    key: &str,
) -> Result<crate::stage_cache::CheckpointUploader> {
    let local = checkpoint_path(plan);
    crate::stage_cache::restore_checkpoint(cache, StageKind::Train, key, &local).await?;
    crate::stage_cache::CheckpointUploader::spawn(
        cache,
        StageKind::Train,
        key,
        local,
        std::time::Duration::from_secs(2),
    )
}

/// The train stage's checkpoint: `WORK/train.ckpt`, beside (not inside) `train.partial/`, which
/// each attempt rebuilds from scratch.
pub fn checkpoint_path(plan: &JobPlan) -> PathBuf {
    plan.work_dir.join(train::checkpoint::FILE_NAME)
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::io("<stage task>", std::io::Error::other(e.to_string()))
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn read_marker(dir: &Path) -> Option<Marker> {
    let bytes = std::fs::read(dir.join(MARKER)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Run a compute stage synchronously into `out` (the `.partial` directory). `from_reconstruct`:
/// the capture comes from the `reconstruct` stage's output rather than the fetched input.
fn run_local(
    plan: &JobPlan,
    kind: StageKind,
    fetched: Option<&Path>,
    from_reconstruct: bool,
    renderer: &kiln_kernels::Renderer,
    out: &Path,
    key: &str,
) -> Result<serde_json::Value> {
    match kind {
        StageKind::Reconstruct => {
            let input = match fetched {
                Some(p) => p.to_path_buf(),
                None => plan.work_dir.join("input"),
            };
            let bar = crate::progress::steps_bar(0, "sfm");
            let mut progress = |step: &str, done: usize, total: usize| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message(step.to_string());
            };
            let report = reconstruct::reconstruct(&input, &plan.reconstruct, out, &mut progress);
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
            Ok(serde_json::json!({
                "input": report.input,
                "images": q.images,
                "registered": q.registered,
                "registered_fraction": q.registered_fraction,
                "points": q.points,
                "mean_reprojection_error_px": q.mean_reprojection_error_px,
                "models": q.models,
                "matcher": report.matcher,
                "colmap_version": report.colmap_version,
            }))
        }
        StageKind::Ingest => {
            let fetched_dir = plan.work_dir.join("input");
            let input = match fetched {
                _ if from_reconstruct => stage_dir(plan, StageKind::Reconstruct),
                Some(p) if p.is_file() => p.to_path_buf(),
                _ => find_input(&fetched_dir, plan.kind)?,
            };
            match plan.kind {
                JobKind::Capture => {
                    let c = ingest::ingest_capture(&input, &plan.ingest, out)?;
                    Ok(serde_json::json!({
                        "frames": c.frames.len(),
                        "skipped": c.skipped.len(),
                        "points": c.points.as_ref().map(|p| p.positions.len()).unwrap_or(0),
                        "width": c.frames.first().map(|f| f.width),
                        "height": c.frames.first().map(|f| f.height),
                    }))
                }
                JobKind::Mesh => {
                    let up_axis = plan.ingest.up_axis()?;
                    Ok(
                        serde_json::to_value(ingest::ingest_mesh(&input, up_axis, out)?)
                            .unwrap_or_default(),
                    )
                }
                JobKind::Splats => {
                    let up_axis = plan.ingest.up_axis()?;
                    Ok(
                        serde_json::to_value(ingest::ingest_splats(&input, up_axis, out)?)
                            .unwrap_or_default(),
                    )
                }
            }
        }
        StageKind::Train => {
            let ingest_dir = stage_dir(plan, StageKind::Ingest);
            let cap = ingest::load_ingested(&ingest_dir)?;
            let views = train_views(&ingest_dir, &cap, &plan.train);
            let init = cap.points.as_ref().map(|p| train::InitPoints {
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
            });
            let bar = crate::progress::steps_bar(plan.train.steps as u64, "train");
            let progress = |step: usize, _total: usize, loss: f64| {
                bar.set_position(step as u64);
                if step.is_multiple_of(10) {
                    bar.set_message(format!("loss {loss:.4}"));
                }
            };
            let policy = train::CheckpointPolicy {
                path: checkpoint_path(plan),
                key: key.to_string(),
                stop: crate::interrupt::stop_requested,
            };
            let result = train::train_checkpointed(
                renderer,
                views,
                init,
                &plan.train,
                out,
                &progress,
                Some(&policy),
            );
            bar.finish_and_clear();
            let (_splats, report) = result?;
            Ok(serde_json::to_value(&report).unwrap_or_default())
        }
        StageKind::Decimate => {
            let mesh = kiln_formats::mesh::read_gltf(
                &stage_dir(plan, StageKind::Ingest).join(ingest::MESH_GLB),
            )?;
            let lods = decimate::decimate(&mesh, &plan.decimate, out)?;
            Ok(serde_json::json!({ "lods": lods }))
        }
        StageKind::Tile => {
            let tiles_out = out.to_path_buf();
            let refinements;
            let report = match plan.kind {
                JobKind::Capture | JobKind::Splats => {
                    let ply = if plan.kind == JobKind::Capture {
                        stage_dir(plan, StageKind::Train).join("splats.ply")
                    } else {
                        stage_dir(plan, StageKind::Ingest).join(ingest::SPLATS_PLY)
                    };
                    // Survey-sized positions come as f32 means around an f64 origin, which the
                    // frame's translation (and so the root transform) carries.
                    let placed = kiln_formats::splats::ply::read_ply_placed(&ply)?;
                    let mut splats = placed.splats;
                    let frame = content_frame(plan)?.placed_at(placed.origin_m);
                    let r = frame.rotation();
                    if r != [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]] {
                        kiln_formats::splats::convert::rotate_splats(&mut splats, r)?;
                    }
                    let views = refine_views(plan)?;
                    let extent = f64::from(train::init::scene_extent(
                        &views.iter().map(|v| v.camera).collect::<Vec<_>>(),
                    ));
                    let refiner = tile::splat::refine::LevelRefiner {
                        renderer,
                        views: &views,
                        params: &plan.train,
                        steps: plan.tile.refine_steps,
                        content_from_capture: frame.rotation(),
                        scene_extent: extent,
                    };
                    let (report, refined) = tile::splat::tile_splats_refined(
                        &splats,
                        &plan.tile,
                        &frame,
                        (!views.is_empty()).then_some(&refiner),
                        &tiles_out,
                    )?;
                    refinements = refined;
                    if let Some(g) = &plan.georef {
                        tile::georef::apply_georef(&report.tileset_path, g)?;
                    }
                    check_written_tileset(&report.tileset_path)?;
                    report
                }
                JobKind::Mesh => {
                    let dir = stage_dir(plan, StageKind::Decimate);
                    let lods = decimate::read_lods(&dir)?;
                    let params = plan.mesh_tile;
                    let mesh = tile::mesh::tile_mesh_lods(&lods, &dir, &params, &tiles_out)?;
                    if let Some(g) = &plan.georef {
                        tile::georef::apply_georef(&mesh.report.tileset_path, g)?;
                    }
                    check_written_tileset(&mesh.report.tileset_path)?;
                    let delivered = lods.first().and_then(|lod0| {
                        tile::mesh::view::delivered_summary(
                            &mesh.report.tileset_path,
                            &dir.join(&lod0.file),
                        )
                    });
                    let mut summary = serde_json::json!({
                        "tiles": mesh.report.tiles,
                        "levels": mesh.report.levels,
                        "content_bytes": mesh.report.content_bytes,
                        "texture_bytes": mesh.texture_bytes,
                        "mesh_levels": mesh.levels,
                        "materials": mesh.materials,
                    });
                    if let Some(delivered) = delivered {
                        summary["delivered"] = delivered;
                    }
                    if let Some(atlases) = &mesh.texture_atlases {
                        summary["texture_atlases"] =
                            serde_json::to_value(atlases).unwrap_or_default();
                    }
                    if !mesh.texture_fidelity.is_empty() {
                        // The worst image first: what `texture_format` cost before any viewer.
                        let worst = mesh
                            .texture_fidelity
                            .iter()
                            .filter_map(|f| f.psnr_db)
                            .reduce(f64::min);
                        summary["texture_psnr_db"] = serde_json::json!(worst);
                        summary["texture_fidelity"] =
                            serde_json::to_value(&mesh.texture_fidelity).unwrap_or_default();
                    }
                    return Ok(summary);
                }
            };
            let mut summary = serde_json::json!({
                "tiles": report.tiles,
                "levels": report.levels,
                "content_bytes": report.content_bytes,
            });
            if !refinements.is_empty() {
                summary["refined_levels"] = serde_json::to_value(&refinements).unwrap_or_default();
            }
            Ok(summary)
        }
        StageKind::Eval => run_eval(plan, out),
        StageKind::Publish => unreachable!("publish runs async in run_stage"),
    }
}

/// The `eval` stage: the tileset's cuts rendered from the capture's held-out photos (capture
/// jobs; against `splats.ply` too) or from an orbit (splats jobs; against the input splats),
/// written to `out/fidelity/` and summarised (publish loss, τ cuts) for the ledger and `kiln
/// regress`. A capture's `metrics.json` is written again beside it with a `delivery` section.
fn run_eval(plan: &JobPlan, out: &Path) -> Result<serde_json::Value> {
    let tileset = stage_dir(plan, StageKind::Tile).join("tileset.json");
    let ts = eval::LoadedTileset::open(&tileset)?;
    let ingest_dir = stage_dir(plan, StageKind::Ingest);
    let (reference, views) = match plan.kind {
        JobKind::Capture => {
            let train_dir = stage_dir(plan, StageKind::Train);
            let reference = kiln_formats::splats::ply::read_ply(&train_dir.join("splats.ply"))?;
            let cap = ingest::load_ingested(&ingest_dir)?;
            let views = train::held_out_views(
                train_views(&ingest_dir, &cap, &plan.train),
                plan.train.eval_every,
            )
            .into_iter()
            .map(eval::EvalView::photo)
            .collect();
            (reference, views)
        }
        _ => {
            // In the tileset's capture frame: relative to the origin the tile stage used.
            let reference =
                kiln_formats::splats::ply::read_ply_placed(&ingest_dir.join(ingest::SPLATS_PLY))?
                    .splats;
            let views = eval::orbit_views(
                &eval::scene_sphere(&reference),
                [0.0, 1.0, 0.0],
                &plan.eval.orbit_radii,
                plan.eval.orbit_views,
                plan.eval.orbit_size_px,
            );
            (reference, views)
        }
    };
    let options = kiln_kernels::RenderOptions {
        background: plan.train.background,
        antialiased: plan.tile.antialiased,
        absgrad: false,
    };
    // The viewer opens at these: the held-out photos, or the orbit at twice the radius.
    let viewer_views: Vec<eval::EvalView> = views
        .iter()
        .filter(|v| v.kind == "held-out" || v.name.starts_with("orbit-2x"))
        .cloned()
        .collect();
    let cameras = eval::viewer_cameras(
        if viewer_views.is_empty() {
            &views
        } else {
            &viewer_views
        },
        &ts.frame,
    );
    let cameras_path = out.join(eval::CAMERAS_JSON);
    let json = serde_json::to_vec_pretty(&cameras)
        .map_err(|e| Error::io(&cameras_path, std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(&cameras_path, &json)?;
    let report = eval::evaluate(
        &kiln_kernels::Renderer::Cpu,
        &eval::Delivered::Tileset(ts),
        Some(&reference),
        &views,
        &plan.eval,
        &options,
        &out.join("fidelity"),
    )?;
    let summary = eval::delivery_summary(&report);
    if plan.kind == JobKind::Capture {
        let train_metrics = stage_dir(plan, StageKind::Train).join("metrics.json");
        let mut metrics: serde_json::Value = std::fs::read(&train_metrics)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| serde_json::json!({}));
        metrics["delivery"] = summary.clone();
        let json = serde_json::to_vec_pretty(&metrics)
            .map_err(|e| Error::io(out.join("metrics.json"), std::io::Error::other(e)))?;
        kiln_formats::atomic_write::write_atomic(&out.join("metrics.json"), &json)?;
    }
    tracing::info!(
        publish_loss_db = report.publish_loss_db,
        views = report.views.len(),
        "eval: delivered tileset scored"
    );
    Ok(summary)
}

/// The photos parent levels are refined against: a capture job's training views (never the
/// held-out ones); none for splats jobs or with `refine_steps = 0`.
fn refine_views(plan: &JobPlan) -> Result<Vec<train::TrainView>> {
    if plan.kind != JobKind::Capture || plan.tile.refine_steps == 0 {
        return Ok(Vec::new());
    }
    let ingest_dir = stage_dir(plan, StageKind::Ingest);
    let cap = ingest::load_ingested(&ingest_dir)?;
    Ok(train::training_views(
        train_views(&ingest_dir, &cap, &plan.train),
        plan.train.eval_every,
    ))
}

/// How a splat tileset stands: capture jobs are turned upright (the train stage's estimated up
/// axis, `frame.json`, becomes glTF +Y); splats jobs were rotated at ingest (`[ingest] up_axis`).
fn content_frame(plan: &JobPlan) -> Result<tile::frame::TilesetFrame> {
    match plan.kind {
        JobKind::Capture => {
            let info = train::read_frame_info(&stage_dir(plan, StageKind::Train))?;
            Ok(tile::frame::TilesetFrame::upright(&info))
        }
        _ => Ok(tile::frame::TilesetFrame::default()),
    }
}

/// The capture folder, or the one mesh / splat file inside the fetched input folder.
fn find_input(dir: &Path, kind: JobKind) -> Result<PathBuf> {
    let (accepted, what): (&[&str], &str) = match kind {
        JobKind::Capture => return Ok(dir.to_path_buf()),
        // Several mesh files (one per block or part, in subfolders too) are one asset: the
        // ingest stage reads the folder; one file is read alone.
        JobKind::Mesh => {
            let mut files = kiln_formats::mesh::mesh_files_in(dir)?;
            return Ok(if files.len() == 1 {
                files.remove(0)
            } else {
                dir.to_path_buf()
            });
        }
        JobKind::Splats => (&["ply", "spz", "glb"], ".ply, .spz or .glb"),
    };
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| accepted.contains(&e.to_ascii_lowercase().as_str()))
        })
        .collect();
    candidates.sort();
    match candidates.len() {
        1 => Ok(candidates.remove(0)),
        0 => Err(Error::Input {
            path: dir.to_path_buf(),
            field: "input".into(),
            problem: format!(
                "no {what} file in the {} input; point `input` at one",
                kind.name()
            ),
        }),
        _ => Err(Error::Input {
            path: dir.to_path_buf(),
            field: "input".into(),
            problem: format!(
                "{} {what} files found ({}); point `input` at exactly one file",
                candidates.len(),
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// The ingested frames as training views, decoded on demand (images over `params.background`,
/// masks used as `params.mask_mode` says): the trainer's bounded cache decides how many are held
/// at once (`train.image_cache_mb`).
pub fn train_views(
    ingest_dir: &Path,
    cap: &ingest::IngestedCapture,
    params: &train::TrainParams,
) -> Vec<train::TrainView> {
    let ignore_outside_mask = params.mask_mode == train::MaskMode::Ignore;
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
            train::TrainView::on_demand(f.name.clone(), camera, std::sync::Arc::new(load))
                .with_split(f.split)
        })
        .collect()
}

/// The files a job publishes, from its finished stage directories; `with_reconstruct` adds the
/// COLMAP model, report and logs of the `reconstruct` stage (not its images: they are the input).
fn publish_files(plan: &JobPlan, with_reconstruct: bool) -> Result<Vec<publish::PublishFile>> {
    let mut files = Vec::new();
    // Hidden files (the stage marker) are internal and never published.
    let mut add_tree = |dir: &Path, prefix: &str| -> Result<()> {
        for rel in crate::file_tree::files_under(dir)? {
            let rel_str = rel.to_string_lossy().replace('\\', "/");
            if rel_str.split('/').any(|part| part.starts_with('.')) {
                continue;
            }
            files.push(publish::PublishFile {
                local: dir.join(&rel),
                relative: format!("{prefix}{rel_str}"),
            });
        }
        Ok(())
    };
    if with_reconstruct {
        let dir = stage_dir(plan, StageKind::Reconstruct);
        for sub in ["sparse", "logs"] {
            add_tree(&dir.join(sub), &format!("reconstruct/{sub}/"))?;
        }
    }
    match plan.kind {
        JobKind::Capture => add_tree(&stage_dir(plan, StageKind::Train), "")?,
        JobKind::Mesh => add_tree(&stage_dir(plan, StageKind::Decimate), "lods/")?,
        // The input splats are the user's own file: only the tileset is new.
        JobKind::Splats => {}
    }
    add_tree(&stage_dir(plan, StageKind::Tile), "")?;
    if plan.kind != JobKind::Mesh {
        add_tree(&stage_dir(plan, StageKind::Eval), "")?;
    }
    if with_reconstruct {
        files.push(publish::PublishFile {
            local: stage_dir(plan, StageKind::Reconstruct).join(reconstruct::REPORT_JSON),
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
