//! kiln-jobs: job specs (TOML), the job runner over the pipeline DAG, and the per-job ledger
//! (embedded SQLite through sqlx) with its reports.

pub mod api;
pub mod cache_ledger;
pub mod costing;
pub mod db;
pub mod error;
pub mod gpu_slot;
pub mod job_page;
pub mod ledger;
pub mod limits;
pub mod queue;
pub mod regress;
pub mod report;
pub mod runner;
pub mod serve;
pub mod spec;
pub mod submit;
pub mod why;
pub mod worker;

pub use error::{Error, Result};
pub mod estimate;
pub mod estimate_error;
pub mod prices;
