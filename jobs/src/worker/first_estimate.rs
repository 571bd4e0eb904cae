//! The estimate of a queued job, recorded when a worker claims the job's first stage.
//!
//! Why then and not at `kiln submit`: the ledger's job row is created by the worker that claims
//! the job's first stage (`Ledger::ensure_job`), a submitter (`kiln submit`, the HTTP API) may not
//! reach the ledger at all, and a worker reads the input where the stage will (an absolute path on
//! a shared disk, or a `dataset://` URL resolved on the worker's own disk), so the size it measures
//! is the size the stages will read. At that moment no attempt of the job exists yet, so the
//! ledger history the estimate learns from holds only other jobs, as for `kiln run`. An S3 input
//! is not fetched until its first stage runs: its size is unknown here, as in `kiln plan`, and
//! per-byte stages are estimated from 0 bytes (docs/cost.md, "Estimates checked").

use std::path::{Path, PathBuf};

use kiln_pipeline::location::Location;

use crate::ledger::Ledger;
use crate::queue::Claimed;
use crate::spec::JobSpec;

/// Record job `c`'s estimate unless the ledger has one or already holds an attempt of the job
/// (a later claim: the estimate would learn from the job's own stages). Best effort: failures
/// are logged and the stage runs anyway.
pub(super) async fn record_on_first_claim(
    ledger: &Ledger,
    c: &Claimed,
    catalog: &crate::prices::PriceCatalog,
) {
    let first = matches!(ledger.estimate(&c.job.id).await, Ok(None))
        && ledger
            .stages(&c.job.id)
            .await
            .is_ok_and(|rows| rows.is_empty());
    if !first {
        return;
    }
    let spec = match JobSpec::from_toml(&c.job.spec, Path::new("job.toml")) {
        Ok(s) => s,
        Err(e) => return tracing::warn!(job = %c.job.id, "estimate not recorded: {e}"),
    };
    let mut stages = c.stages.clone();
    stages.sort_by_key(|s| s.position);
    let shape = crate::estimate::job_shape(
        &c.job.kind,
        stages.into_iter().map(|s| s.stage).collect(),
        &local_input(&c.job.input),
        spec.train.steps,
        spec.ingest.max_side,
    );
    crate::runner::record_estimate(ledger, &c.job.id, &shape, catalog).await;
}

/// The local path a queued `input` names on this machine: a path or `file://` URL as stored, a
/// `dataset://` URL resolved on this worker's disk; an empty path (size unknown, 0 bytes) for an
/// S3 input or one that does not resolve.
pub(crate) fn local_input(input: &str) -> PathBuf {
    match Location::parse(input).and_then(Location::resolve_dataset) {
        Ok(Location::Local(p)) => p,
        _ => PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_and_file_inputs_are_read_where_they_are_and_s3_ones_are_unknown() {
        assert_eq!(local_input("/data/fox"), PathBuf::from("/data/fox"));
        assert_eq!(local_input("file:///data/fox"), PathBuf::from("/data/fox"));
        assert_eq!(local_input("s3://bucket/fox"), PathBuf::new());
    }
}
