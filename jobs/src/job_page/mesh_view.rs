//! The LOD files of a mesh job's output, for the job page; the renders and the scores of what a
//! client loads live in [`kiln_pipeline::stages::tile::mesh::view`] (the tile stage records the
//! scores too).

use std::path::{Path, PathBuf};

pub use kiln_pipeline::stages::tile::mesh::view::*;

use super::PageError;
use crate::report::JobReport;
use kiln_pipeline::stages::summary::StageSummary;

/// One LOD file to render and what the decimator said about it.
#[derive(Debug, Clone, PartialEq)]
pub struct LodEntry {
    /// File name, e.g. `lod_1.glb`.
    pub file: String,
    /// Local path of the GLB.
    pub path: PathBuf,
    /// Target ratio of the source triangle count, when known.
    pub ratio: Option<f64>,
    /// Simplification error in metres, when known.
    pub error_m: Option<f64>,
}

/// One entry of `lods/lods.json` (the decimate stage's index; see
/// `kiln_pipeline::stages::decimate::LodLevel`), as far as the page uses it.
#[derive(serde::Deserialize)]
struct ListedLod {
    file: String,
    ratio: Option<f64>,
    error_m: Option<f64>,
}

/// The LODs of a mesh job's output, in order. Sources, first found wins:
/// `output_dir/lods/lods.json` (written by the decimate stage), the decimate stage's `lods`
/// summary in the ledger, or every `lods/*.glb` sorted by name (without ratios and errors).
/// Listed files that are not in `lods/` are left out.
///
/// # Errors
/// [`PageError::Io`] / [`PageError::Invalid`] when `lods.json` or the folder cannot be read.
pub fn list_lods(output_dir: &Path, report: &JobReport) -> Result<Vec<LodEntry>, PageError> {
    let dir = output_dir.join("lods");
    let index = dir.join("lods.json");
    let listed: Option<Vec<ListedLod>> = if index.is_file() {
        let bytes = std::fs::read(&index).map_err(|source| PageError::Io {
            path: index.clone(),
            source,
        })?;
        Some(
            serde_json::from_slice(&bytes).map_err(|e| PageError::Invalid {
                path: index.clone(),
                field: "(document)".into(),
                expected: "a JSON array of {file, ratio, triangles, error_m}".into(),
                found: e.to_string(),
            })?,
        )
    } else {
        report
            .stages
            .iter()
            .rev()
            .filter(|s| s.stage == "decimate")
            .find_map(|s| {
                let summary = StageSummary::parse_logged(&s.stage, s.summary.as_ref()?)?;
                Some(
                    summary
                        .decimate()?
                        .lods
                        .iter()
                        .map(|l| ListedLod {
                            file: l.file.clone(),
                            ratio: Some(f64::from(l.ratio)),
                            error_m: Some(l.error_m),
                        })
                        .collect(),
                )
            })
    };
    if let Some(items) = listed {
        return Ok(items
            .into_iter()
            .filter_map(|it| {
                let path = dir.join(&it.file);
                path.is_file().then_some(LodEntry {
                    path,
                    ratio: it.ratio,
                    error_m: it.error_m,
                    file: it.file,
                })
            })
            .collect());
    }
    Ok(super::list_files(&dir, "glb")?
        .into_iter()
        .map(|path| LodEntry {
            file: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path,
            ratio: None,
            error_m: None,
        })
        .collect())
}

impl From<ViewError> for PageError {
    fn from(e: ViewError) -> Self {
        match e {
            ViewError::Io { path, source } => PageError::Io { path, source },
            ViewError::Invalid {
                path,
                field,
                expected,
                found,
            } => PageError::Invalid {
                path,
                field,
                expected,
                found,
            },
            ViewError::Gltf { path, source } => PageError::Gltf { path, source },
        }
    }
}
