//! The job plan: what a job is ([`JobKind`]) and with which inputs, outputs and parameters
//! it runs ([`JobPlan`]), resolved from a job file by `kiln_jobs::spec`. Its stages and their
//! order are [`crate::dag`]'s.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::stages::{decimate, eval, ingest, publish, reconstruct, tile, train};

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
    /// The shared stage cache (an object-store URL or folder, this job's namespace in it and the
    /// ledger vouching for its entries; see [`crate::stage_cache`]): finished stages are restored
    /// from it by key and stored in it. `None`: the work directory is the only cache.
    pub stage_cache: Option<crate::stage_cache::StageCache>,
    /// A queue attempt's fencing token and lease file: `publish` changes committed output only
    /// while it holds the lease ([`publish::Fence`]). `None` for local runs.
    pub fence: Option<publish::Fence>,
    /// The job file's `strict = true`: a stage that gives warnings fails instead
    /// ([`crate::warnings`]). Not part of any key: it does not change what a stage writes.
    pub strict: bool,
}

/// What a job turns into 3D Tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Photos + camera poses → trained splats → splat tileset.
    Capture,
    /// glTF/GLB mesh → LOD chain → mesh tileset.
    Mesh,
    /// Splats trained elsewhere (3DGS PLY, SPZ, splat GLB) → splat tileset.
    Splats,
}

impl JobKind {
    /// The kind's name as written in job files and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Capture => "capture",
            JobKind::Mesh => "mesh",
            JobKind::Splats => "splats",
        }
    }
}
