//! The mesh `tile` stage's contract: the full-resolution level of the decimate chain → an HLOD
//! 3D Tiles 1.1 tileset, summarised with its levels, materials, textures and what a client of
//! each level sees ([`DeliveredSummary`]).

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use super::atlas::AtlasStats;
use super::texture::ImageFidelity;
use super::view::{DeliveredSummary, delivered_summary};
use super::{MESH_TILER_VERSION, MeshLevelStats, tile_mesh_lods};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext};
use crate::stages::decimate::read_lods;
use crate::stages::tile::{check_written_tileset, georef, tile_key_params};

/// The mesh `tile` stage.
#[derive(Debug, Clone, Copy)]
pub struct TileMesh;

/// The summary of [`TileMesh`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshTileSummary {
    /// Tiles in the tileset.
    pub tiles: usize,
    /// Levels, root = level 0.
    pub levels: u32,
    /// Bytes of the tile GLBs and the texture files they reference.
    pub content_bytes: u64,
    /// Bytes of the texture files (each written once).
    pub texture_bytes: u64,
    /// Per level, root first.
    pub mesh_levels: Vec<MeshLevelStats>,
    /// The source materials' names, in the mesh's order.
    pub materials: Vec<String>,
    /// Every level decoded from the tile GLBs, rendered and scored against `lod_0` (absent when
    /// it could not be rendered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<DeliveredSummary>,
    /// With `texture_atlas`: atlas counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub texture_atlases: Option<AtlasStats>,
    /// The worst image's encoding PSNR, dB: what `texture_format` cost before any viewer.
    /// Absent without textures; `null` when every file holds its pixels exactly.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub texture_psnr_db: Option<Option<f64>>,
    /// Per source image: what its encoding kept (absent without textures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub texture_fidelity: Vec<ImageFidelity>,
}

/// A field that is present, maybe `null` (absent fields take the `default`, `None`).
fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Option<f64>>, D::Error> {
    Option::<f64>::deserialize(d).map(Some)
}

impl Stage for TileMesh {
    type Summary = MeshTileSummary;

    fn kind(&self) -> StageKind {
        StageKind::TILE
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::Stage(StageKind::DECIMATE)]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        let v = serde_json::to_value(plan.mesh_tile).map(|mut v| {
            v["mesh_tiler"] = MESH_TILER_VERSION.into();
            v
        });
        tile_key_params(plan, v.unwrap_or(serde_json::Value::Null))
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        cx.stage_dir(StageKind::DECIMATE)
            .map_or(0, |d| crate::meter::dir_bytes(&d))
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<MeshTileSummary>> {
        let plan = &cx.plan;
        let dir = cx.stage_dir(StageKind::DECIMATE)?;
        let lods = read_lods(&dir)?;
        let mesh = tile_mesh_lods(&lods, &dir, &plan.mesh_tile, out)?;
        if let Some(g) = &plan.georef {
            georef::apply_georef(&mesh.report.tileset_path, g)?;
        }
        check_written_tileset(&mesh.report.tileset_path)?;
        let delivered = lods
            .first()
            .and_then(|lod0| delivered_summary(&mesh.report.tileset_path, &dir.join(&lod0.file)));
        // The worst image first: what `texture_format` cost before any viewer.
        let texture_psnr_db = (!mesh.texture_fidelity.is_empty()).then(|| {
            mesh.texture_fidelity
                .iter()
                .filter_map(|f| f.psnr_db)
                .reduce(f64::min)
        });
        Ok(Output::new(MeshTileSummary {
            tiles: mesh.report.tiles,
            levels: mesh.report.levels,
            content_bytes: mesh.report.content_bytes,
            texture_bytes: mesh.texture_bytes,
            mesh_levels: mesh.levels,
            materials: mesh.materials,
            delivered,
            texture_atlases: mesh.texture_atlases,
            texture_psnr_db,
            texture_fidelity: mesh.texture_fidelity,
        }))
    }
}
