//! Turning a job file into a queue submission: parse and check it, pin its input and output to
//! absolute locations (workers run elsewhere and later), and list its DAG's stages — the same for
//! `kiln submit` and the HTTP API.

use std::path::Path;

use crate::queue::NewJob;
use crate::spec::JobSpec;
use crate::{Error, Result};

/// Submission settings besides the job file.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitOptions {
    pub team: String,
    /// Higher runs first.
    pub priority: i64,
    /// Failed or lost attempts per stage before dead-lettering (≥ 1).
    pub max_attempts: i64,
    /// Replaces the job file's `output`.
    pub output: Option<String>,
    /// Spending cap in USD.
    pub budget_usd: Option<f64>,
}

/// Check `text` (a job file; `path` names it in messages) and build the queue entry. Relative
/// local paths are taken from `base` (the submitter's directory); a `dataset://` URL is checked
/// here (it must name something inside the dataset) but stored as a URL, so each worker resolves
/// it on its own disk and the queue never holds this machine's layout. The input is listed (not
/// downloaded) to choose the DAG.
///
/// # Errors
/// [`Error::Spec`] / [`Error::Field`] for a bad job file or unreachable input; [`Error::Plan`]
/// when the input does not fit the job (nothing queued).
pub async fn prepare(text: &str, path: &Path, base: &Path, opts: &SubmitOptions) -> Result<NewJob> {
    crate::limits::check_submission(
        text,
        path,
        opts.priority,
        opts.max_attempts,
        opts.budget_usd,
    )?;
    let mut spec = JobSpec::from_toml(text, path)?;
    if let Some(o) = &opts.output {
        spec.output = o.clone();
    }
    spec.output = pinned(&spec.output, base, path, "output")?;
    spec.input = pinned(&spec.input, base, path, "input")?;
    let id = crate::runner::new_job_id(&spec.name);
    let plan = spec.plan(&id, &std::env::temp_dir(), path, &|l| Ok(l.to_string()))?;
    let (dag, _) = kiln_pipeline::dag::job_dag(&plan)
        .await
        .map_err(|source| Error::Plan {
            job_id: id.clone(),
            source: Box::new(source),
        })?;
    let order = dag.topo_order().map_err(|source| Error::Plan {
        job_id: id.clone(),
        source: Box::new(source),
    })?;
    Ok(NewJob {
        id,
        team: opts.team.clone(),
        name: spec.name.clone(),
        kind: spec.kind.name().to_string(),
        input: spec.input,
        output: spec.output,
        // As written: workers take input and output from the queue's columns.
        spec: text.to_string(),
        priority: opts.priority,
        max_attempts: opts.max_attempts,
        budget_usd: opts.budget_usd,
        stages: order
            .iter()
            .map(|n| (n.kind.name().to_string(), n.stage.needs_gpu_slot()))
            .collect(),
    })
}

/// `location` in the form a queue stores: local paths made absolute from `base`, URLs in their
/// canonical form; a `dataset://` URL must resolve on this machine (to plan the DAG) but is kept as
/// a URL.
fn pinned(location: &str, base: &Path, spec_path: &Path, field: &str) -> Result<String> {
    use kiln_pipeline::location::Location;
    let refused = |e: kiln_pipeline::location::LocationError| Error::Field {
        path: spec_path.into(),
        field: field.into(),
        expected: "a reachable URL, path or dataset://NAME/PATH".into(),
        found: e.to_string(),
    };
    let parsed = Location::parse(location).map_err(refused)?;
    match &parsed {
        Location::Local(p) => Ok(base.join(p).to_string_lossy().into_owned()),
        Location::Dataset(_) => {
            parsed.clone().resolve_dataset().map_err(refused)?;
            Ok(parsed.to_url())
        }
        Location::S3 { .. } | Location::Memory(_) => Ok(parsed.to_url()),
    }
}

/// The longest accepted idempotency key.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Check an idempotency key: 1 to [`MAX_IDEMPOTENCY_KEY_LEN`] printable ASCII characters.
///
/// # Errors
/// [`Error::Submit`] saying what a key may hold.
pub fn check_idempotency_key(key: &str) -> Result<()> {
    if key.is_empty()
        || key.len() > MAX_IDEMPOTENCY_KEY_LEN
        || !key.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(Error::Submit {
            message: format!(
                "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_LEN} printable ASCII characters without spaces (a UUID, a run id), found {} characters",
                key.chars().count()
            ),
        });
    }
    Ok(())
}
