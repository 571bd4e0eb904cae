//! kiln-pipeline: the DAG engine, object storage, metering, and the stages of a job:
//! `ingest`, `train` (3DGS trainer on burn), `decimate` (meshoptimizer), `tile` (3D Tiles 1.1),
//! `publish`.

pub mod bench;
pub mod bounds;
pub mod cache_ledger;
pub mod dag;
pub mod error;
pub mod file_tree;
pub mod gpu_monitor;
pub mod input_alias;
pub mod interrupt;
pub mod location;
pub mod meter;
pub mod plan;
pub mod progress;
pub mod run;
pub mod stage;
pub mod stage_cache;
pub mod stages;
pub mod storage;
pub mod synth;
pub mod warnings;

pub use error::{Error, Result};
