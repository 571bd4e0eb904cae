//! kiln-jobs: job specs (TOML), the job runner over the pipeline DAG, and the per-job ledger
//! (SQLite or PostgreSQL through sqlx), the durable queue and its workers, the price catalog and
//! cost estimates, and reports.

pub mod db;
pub mod error;
pub mod estimate;
pub mod job_page;
pub mod ledger;
pub mod prices;
pub mod queue;
pub mod regress;
pub mod report;
pub mod runner;
pub mod serve;
pub mod spec;
pub mod submit;
pub mod worker;

pub use error::{Error, Result};
