//! Stage summaries read back as their types: what the ledger, the job page, `kiln report`,
//! `kiln run`'s printout, `kiln regress` and the API read instead of JSON paths, so that a
//! renamed field fails to compile rather than showing nothing.
//!
//! A summary is stored as JSON (the ledger's `summary` column, the work folder's stage marker,
//! a queue worker's outcome file), with the engine's `stored_bytes` beside the stage's own
//! fields. [`StageSummary::parse`] reads one by its stage's name; the shapes written before the
//! summaries were typed are the same JSON, so old ledger rows parse too (tested below on rows
//! recorded by earlier versions).

use serde::{Deserialize, Serialize};

use crate::dag::StageKind;
use crate::stages::decimate::DecimateSummary;
use crate::stages::eval::EvalSummary;
use crate::stages::ingest::{CaptureIngestSummary, IngestedMesh, IngestedSplats};
use crate::stages::publish::PublishSummary;
use crate::stages::reconstruct::ReconstructSummary;
use crate::stages::tile::mesh::MeshTileSummary;
use crate::stages::tile::splat::SplatTileSummary;
use crate::stages::train::TrainReport;

/// The summary of one stage of a built-in kind.
#[derive(Debug, Clone, PartialEq)]
pub enum StageSummary {
    Reconstruct(ReconstructSummary),
    Ingest(IngestSummary),
    Train(Box<TrainReport>),
    Decimate(DecimateSummary),
    Tile(TileSummary),
    Eval(EvalSummary),
    Publish(PublishSummary),
}

/// An `ingest` summary: one shape per job kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IngestSummary {
    Capture(CaptureIngestSummary),
    Mesh(IngestedMesh),
    Splats(IngestedSplats),
}

/// A `tile` summary: the mesh tiler's or the splat tiler's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TileSummary {
    Mesh(Box<MeshTileSummary>),
    Splats(SplatTileSummary),
}

impl TileSummary {
    /// Tiles in the tileset.
    #[must_use]
    pub fn tiles(&self) -> usize {
        match self {
            TileSummary::Mesh(m) => m.tiles,
            TileSummary::Splats(s) => s.tiles,
        }
    }

    /// Levels, root = level 0.
    #[must_use]
    pub fn levels(&self) -> u32 {
        match self {
            TileSummary::Mesh(m) => m.levels,
            TileSummary::Splats(s) => s.levels,
        }
    }

    /// Content bytes (GLBs, and the mesh tiler's texture files).
    #[must_use]
    pub fn content_bytes(&self) -> u64 {
        match self {
            TileSummary::Mesh(m) => m.content_bytes,
            TileSummary::Splats(s) => s.content_bytes,
        }
    }
}

/// Why a summary could not be read as its stage's type.
#[derive(Debug, thiserror::Error)]
#[error("the {stage} summary does not have the shape this Kiln writes: {source}")]
pub struct SummaryError {
    pub stage: String,
    #[source]
    pub source: serde_json::Error,
}

impl StageSummary {
    /// The summary `json` of the stage named `stage`; `Ok(None)` for a stage Kiln does not plan
    /// (a test's own stage).
    ///
    /// # Errors
    /// [`SummaryError`] when the JSON does not have that stage's shape.
    pub fn parse(stage: &str, json: &serde_json::Value) -> Result<Option<Self>, SummaryError> {
        let Some(kind) = StageKind::builtin(stage) else {
            return Ok(None);
        };
        let err = |source| SummaryError {
            stage: stage.to_string(),
            source,
        };
        let v = json.clone();
        let typed = match kind {
            StageKind::RECONSTRUCT => {
                StageSummary::Reconstruct(serde_json::from_value(v).map_err(err)?)
            }
            StageKind::INGEST => StageSummary::Ingest(serde_json::from_value(v).map_err(err)?),
            StageKind::TRAIN => {
                StageSummary::Train(Box::new(serde_json::from_value(v).map_err(err)?))
            }
            StageKind::DECIMATE => StageSummary::Decimate(serde_json::from_value(v).map_err(err)?),
            StageKind::TILE => StageSummary::Tile(serde_json::from_value(v).map_err(err)?),
            StageKind::EVAL => StageSummary::Eval(serde_json::from_value(v).map_err(err)?),
            StageKind::PUBLISH => StageSummary::Publish(serde_json::from_value(v).map_err(err)?),
            _ => return Ok(None),
        };
        Ok(Some(typed))
    }

    /// The summary of a finished stage outcome; `None` when it is not a built-in stage's or does
    /// not parse (logged).
    #[must_use]
    pub fn of(outcome: &crate::run::StageOutcome) -> Option<Self> {
        Self::parse_logged(outcome.kind.name(), &outcome.summary)
    }

    /// [`StageSummary::parse`], a summary that does not parse logged as a warning and read as
    /// `None` (readers show what they can of a ledger written by another version).
    #[must_use]
    pub fn parse_logged(stage: &str, json: &serde_json::Value) -> Option<Self> {
        match Self::parse(stage, json) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "stage summary not read");
                None
            }
        }
    }

    /// The summary as JSON, as its stage records it (without the engine's `stored_bytes`).
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let v = match self {
            StageSummary::Reconstruct(s) => serde_json::to_value(s),
            StageSummary::Ingest(s) => serde_json::to_value(s),
            StageSummary::Train(s) => serde_json::to_value(s),
            StageSummary::Decimate(s) => serde_json::to_value(s),
            StageSummary::Tile(s) => serde_json::to_value(s),
            StageSummary::Eval(s) => serde_json::to_value(s),
            StageSummary::Publish(s) => serde_json::to_value(s),
        };
        v.unwrap_or(serde_json::Value::Null)
    }

    /// The train summary, if this is one.
    #[must_use]
    pub fn train(&self) -> Option<&TrainReport> {
        match self {
            StageSummary::Train(t) => Some(t),
            _ => None,
        }
    }

    /// The eval summary, if this is one.
    #[must_use]
    pub fn eval(&self) -> Option<&EvalSummary> {
        match self {
            StageSummary::Eval(e) => Some(e),
            _ => None,
        }
    }

    /// The ingest summary, if this is one.
    #[must_use]
    pub fn ingest(&self) -> Option<&IngestSummary> {
        match self {
            StageSummary::Ingest(i) => Some(i),
            _ => None,
        }
    }

    /// The decimate summary, if this is one.
    #[must_use]
    pub fn decimate(&self) -> Option<&DecimateSummary> {
        match self {
            StageSummary::Decimate(d) => Some(d),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ledger rows recorded before the summaries were typed: one per job kind, stage and set of
    /// fields (see the fixture's `about`).
    fn legacy_rows() -> Vec<serde_json::Value> {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/ledger_summaries_a4f2db7.json"
        ))
        .unwrap();
        doc["rows"].as_array().unwrap().clone()
    }

    #[test]
    fn every_legacy_ledger_row_reads_as_its_type_and_writes_back_unchanged() {
        let rows = legacy_rows();
        let mut stages = std::collections::BTreeSet::new();
        for row in &rows {
            let stage = row["stage"].as_str().unwrap();
            let mut json = row["summary"].clone();
            let typed = StageSummary::parse(stage, &json)
                .unwrap_or_else(|e| panic!("{} {stage}: {e}", row["job"]))
                .unwrap();
            json.as_object_mut()
                .unwrap()
                .remove(crate::run::STORED_BYTES);
            assert_eq!(typed.to_json(), json, "{} {stage}", row["job"]);
            stages.insert((
                row["job_kind"].as_str().unwrap().to_string(),
                stage.to_string(),
            ));
        }
        // Every stage of every job kind's plan is covered.
        for kind in [
            crate::dag::JobKind::Capture,
            crate::dag::JobKind::Mesh,
            crate::dag::JobKind::Splats,
        ] {
            let mut dag = crate::dag::Dag::for_job(kind);
            if kind == crate::dag::JobKind::Capture {
                dag = dag.with_reconstruct();
            }
            for node in dag.nodes {
                assert!(
                    stages.contains(&(kind.name().to_string(), node.kind.name().to_string())),
                    "no legacy row of {} {}",
                    kind.name(),
                    node.kind
                );
            }
        }
    }

    #[test]
    fn a_summary_of_another_shape_is_an_error_naming_the_stage() {
        let e = StageSummary::parse("train", &serde_json::json!({"psnr_db": "high"})).unwrap_err();
        assert!(e.to_string().contains("train summary"), "{e}");
        assert_eq!(
            StageSummary::parse("toy", &serde_json::json!({})).unwrap(),
            None
        );
    }

    #[test]
    fn ingest_and_tile_summaries_are_told_apart_by_their_fields() {
        for row in legacy_rows() {
            let typed = StageSummary::parse(row["stage"].as_str().unwrap(), &row["summary"])
                .unwrap()
                .unwrap();
            match (row["job_kind"].as_str().unwrap(), &typed) {
                ("capture", StageSummary::Ingest(i)) => {
                    assert!(matches!(i, IngestSummary::Capture(_)))
                }
                ("mesh", StageSummary::Ingest(i)) => assert!(matches!(i, IngestSummary::Mesh(_))),
                ("splats", StageSummary::Ingest(i)) => {
                    assert!(matches!(i, IngestSummary::Splats(_)))
                }
                ("mesh", StageSummary::Tile(t)) => assert!(matches!(t, TileSummary::Mesh(_))),
                (_, StageSummary::Tile(t)) => assert!(matches!(t, TileSummary::Splats(_))),
                _ => {}
            }
        }
    }
}
