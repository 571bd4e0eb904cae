//! The stages of a job. Each stage is a library function from local input files to a local stage
//! directory; [`crate::run`] pulls inputs from object storage, meters the attempt, and publishes.

pub mod decimate;
pub mod eval;
pub mod ingest;
pub mod publish;
pub mod reconstruct;
pub mod tile;
pub mod train;
