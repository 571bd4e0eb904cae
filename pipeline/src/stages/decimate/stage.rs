//! The `decimate` stage's contract: the ingested mesh → the LOD chain (`lod_<i>.glb`,
//! `lods.json`), summarised as its levels.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{DECIMATOR_VERSION, LodLevel, decimate};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};
use crate::stages::ingest::MESH_GLB;

/// The `decimate` stage.
#[derive(Debug, Clone, Copy)]
pub struct Decimate;

/// The summary of [`Decimate`]: the chain's levels, full resolution first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecimateSummary {
    pub lods: Vec<LodLevel>,
}

impl Stage for Decimate {
    type Summary = DecimateSummary;

    fn kind(&self) -> StageKind {
        StageKind::DECIMATE
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::Stage(StageKind::INGEST)]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        serde_json::to_value(&plan.decimate)
            .map(|mut v| {
                v["decimator"] = DECIMATOR_VERSION.into();
                v
            })
            .unwrap_or(serde_json::Value::Null)
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        cx.stage_dir(StageKind::INGEST)
            .map_or(0, |d| crate::meter::dir_bytes(&d))
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<DecimateSummary>> {
        let mesh = kiln_formats::mesh::read_gltf(&cx.stage_dir(StageKind::INGEST)?.join(MESH_GLB))?;
        let lods = decimate(&mesh, &cx.plan.decimate, out)?;
        Ok(Output::new(DecimateSummary { lods }))
    }
}
