//! The `ingest` stage's contract, one type per input kind: [`IngestCapture`] (photos and poses,
//! from the job's input or from `reconstruct`'s model), [`IngestMesh`] and [`IngestSplats`]. Each
//! is a first stage (the engine fetches the job input for it) unless it reads `reconstruct`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{IngestedMesh, IngestedSplats, ingest_capture, ingest_mesh, ingest_splats};
use crate::dag::{JobKind, StageKind};
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};
use crate::{Error, Result};

/// Ingest a capture: frames decoded, downscaled and undistorted into `capture.json` +
/// `images/`.
#[derive(Debug, Clone, Copy)]
pub struct IngestCapture;

/// Ingest a mesh (glTF/GLB, OBJ + MTL, PLY, or a folder of them) into one `mesh.glb`.
#[derive(Debug, Clone, Copy)]
pub struct IngestMesh;

/// Ingest splats trained elsewhere into one INRIA-layout `splats.ply`.
#[derive(Debug, Clone, Copy)]
pub struct IngestSplats;

/// The summary of [`IngestCapture`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureIngestSummary {
    /// Frames kept.
    pub frames: usize,
    /// Frames listed but skipped (missing images, non-finite poses).
    pub skipped: usize,
    /// Structure-from-motion points the capture carried (0 when none).
    pub points: usize,
    /// The first frame's size after downscaling, pixels (`None` without frames).
    pub width: Option<u32>,
    pub height: Option<u32>,
}

fn ingest_params(plan: &JobPlan) -> serde_json::Value {
    serde_json::to_value(&plan.ingest).unwrap_or(serde_json::Value::Null)
}

impl Stage for IngestCapture {
    type Summary = CaptureIngestSummary;

    fn kind(&self) -> StageKind {
        StageKind::INGEST
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::IfPlanned(StageKind::RECONSTRUCT)]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        ingest_params(plan)
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        // The fetched input is counted by the engine; a reconstructed capture is read from the
        // reconstruct stage's folder.
        match cx.has_input(StageKind::RECONSTRUCT) {
            true => cx
                .stage_dir(StageKind::RECONSTRUCT)
                .map_or(0, |d| crate::meter::dir_bytes(&d)),
            false => 0,
        }
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<CaptureIngestSummary>> {
        let input = if cx.has_input(StageKind::RECONSTRUCT) {
            cx.stage_dir(StageKind::RECONSTRUCT)?
        } else {
            fetched_input_file(cx, JobKind::Capture)?
        };
        let c = ingest_capture(&input, &cx.plan.ingest, out)?;
        Ok(Output::new(CaptureIngestSummary {
            frames: c.frames.len(),
            skipped: c.skipped.len(),
            points: c.points.as_ref().map(|p| p.positions.len()).unwrap_or(0),
            width: c.frames.first().map(|f| f.width),
            height: c.frames.first().map(|f| f.height),
        }))
    }
}

impl Stage for IngestMesh {
    type Summary = IngestedMesh;

    fn kind(&self) -> StageKind {
        StageKind::INGEST
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        let mut params = ingest_params(plan);
        // 2: degenerate and duplicate triangles removed by default (`[ingest] repair`).
        if let Some(o) = params.as_object_mut() {
            o.insert("mesh_ingest_version".into(), 2.into());
        }
        params
    }

    /// A `.gltf` names its buffers and images, an OBJ its MTL and textures: fetch them too.
    fn fetch_siblings(&self) -> bool {
        true
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<IngestedMesh>> {
        let input = fetched_input_file(cx, JobKind::Mesh)?;
        Ok(Output::new(ingest_mesh(&input, &cx.plan.ingest, out)?))
    }
}

impl Stage for IngestSplats {
    type Summary = IngestedSplats;

    fn kind(&self) -> StageKind {
        StageKind::INGEST
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        ingest_params(plan)
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<IngestedSplats>> {
        let input = fetched_input_file(cx, JobKind::Splats)?;
        let up_axis = cx.plan.ingest.up_axis()?;
        let ingested = ingest_splats(&input, up_axis, out)?;
        warn_if_antialiasing_dropped(&input, cx.plan.tile.antialiased)?;
        Ok(Output::new(ingested))
    }
}

/// Issue 44, rule 6: an input marked antialiased (SPZ flag, Mip-Splatting `filter_3D`) whose
/// job does not set `[tile] antialiased = true` would lose the flag in its tiles; say so, naming
/// the input and the setting that keeps it. The tiles' SPZ can hold the flag, but the tile
/// stage's key is fixed by the plan, so the job file decides.
fn warn_if_antialiasing_dropped(input: &Path, tile_antialiased: bool) -> Result<()> {
    use kiln_formats::splats::convert::antialiasing_of_read;
    use kiln_formats::splats::spz::SpzAntialiasing;
    if !tile_antialiased && antialiasing_of_read(input)? == SpzAntialiasing::Antialiased {
        tracing::warn!(
            "{}: the splats are marked antialiased (SPZ flag `antialiased`, or a Mip-Splatting \
             `filter_3D`), but the job's tiles are not: set `[tile] antialiased = true` in the \
             job file to keep the flag in every tile",
            input.display()
        );
    }
    Ok(())
}

/// What ingest reads from the fetched input: the input itself when it is one file, else the
/// capture folder, or the one mesh / splat file (or the folder of mesh files) inside it.
fn fetched_input_file(cx: &StageContext, kind: JobKind) -> Result<PathBuf> {
    let fetched = cx.fetched_input()?;
    if fetched.is_file() {
        return Ok(fetched.to_path_buf());
    }
    find_input(&cx.plan.work_dir.join("input"), kind)
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
        // An unbundled SOG is a folder: its meta.json names it.
        JobKind::Splats if dir.join("meta.json").is_file() => return Ok(dir.join("meta.json")),
        JobKind::Splats => (
            &["ply", "spz", "glb", "splat", "sog"],
            ".ply, .spz, .glb, .splat or .sog (or an unbundled SOG's meta.json)",
        ),
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
