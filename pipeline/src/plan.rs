//! The job plan: what a job runs (its DAG of stages, [`crate::dag`]) and with which inputs,
//! outputs and parameters ([`JobPlan`]), resolved from a job file by `kiln_jobs::spec`.

use std::path::PathBuf;

use crate::Result;
use crate::dag::{Dag, JobKind};
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
    /// The shared stage cache (an object-store URL or folder; see [`crate::stage_cache`]):
    /// finished stages are restored from it by key and stored in it. `None`: the work directory
    /// is the only cache.
    pub stage_cache: Option<String>,
    /// A queue attempt's fencing token and lease file: `publish` changes committed output only
    /// while it holds the lease ([`publish::Fence`]). `None` for local runs.
    pub fence: Option<publish::Fence>,
}

/// The DAG of `plan`'s job, and why it has a `reconstruct` stage when it has one.
///
/// Capture jobs look at the input's file names (without downloading anything): images or a video
/// without camera poses add `reconstruct` (see [`reconstruct::classify`] and
/// [`reconstruct::decide`]).
///
/// # Errors
/// [`crate::Error::Input`] when a capture input holds neither poses, photos nor one video (or nothing);
/// [`crate::Error::Param`] on `reconstruct.mode` when it contradicts the input; [`crate::Error::Storage`] when
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
