//! The stages of a job. Each stage is one type implementing [`crate::stage::Stage`] in its own
//! module (`<stage>/stage.rs`), over library functions from local input files to a local stage
//! directory; [`crate::run`] pulls inputs from object storage, meters the attempt, and commits.
//! [`summary`] reads their summaries back as types.

pub mod decimate;
pub mod eval;
pub mod ingest;
pub mod publish;
pub mod reconstruct;
pub mod summary;
pub mod tile;
pub mod train;
