//! The public error type of kiln-jobs.

use std::path::PathBuf;

/// Result alias for kiln-jobs.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors from job files, the ledger and job runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The job file cannot be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The job file is not valid TOML or has a bad field.
    // TOML parse errors end in a newline; trimmed so the hint stays on the message's last line.
    #[error("{path}: {}; see datasets/jobs/*.toml for working examples", .message.trim_end())]
    Spec { path: PathBuf, message: String },
    /// The `kiln regress` baselines file (or a scene's job in it) is invalid.
    #[error("{path}: {}; see datasets/baselines.toml for the format", .message.trim_end())]
    Baselines { path: PathBuf, message: String },
    /// A field is missing or out of range.
    #[error("{path}: field `{field}`: expected {expected}, found {found}")]
    Field {
        path: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
    /// The ledger database failed.
    #[error("ledger {path}: {source}")]
    Ledger {
        path: String,
        #[source]
        source: sqlx::Error,
    },
    /// No job with this id is in the ledger.
    #[error(
        "job `{job_id}` is not in the ledger {path}; `kiln report --list` shows the recorded jobs"
    )]
    NoSuchJob { job_id: String, path: String },
    /// The job could not be planned (its input does not fit the job file); nothing ran.
    #[error("job `{job_id}` cannot start (nothing was run)")]
    Plan {
        job_id: String,
        #[source]
        source: Box<kiln_pipeline::Error>,
    },
    /// A stage failed; the job keeps what finished and can be resumed by running it again.
    /// `hint` says what to do: resume as is, or fix the input first when the input or the job
    /// file is at fault (rerunning unchanged cannot help then).
    #[error("job `{job_id}`, stage `{stage}` failed ({hint})")]
    Stage {
        job_id: String,
        stage: String,
        hint: &'static str,
        #[source]
        source: Box<kiln_pipeline::Error>,
    },
    /// No queued job with this id (or it belongs to another team).
    #[error("job `{job_id}` is not in the queue {db}; `kiln jobs` lists the queued jobs")]
    NotInQueue { job_id: String, db: String },
    /// A submission was refused (nothing was queued).
    #[error("job not queued: {message}")]
    Submit { message: String },
    /// The team already has its most queued or running jobs (`max_active_jobs` of `kiln serve
    /// --tenants`): nothing was queued.
    #[error(
        "team `{team}` has {active} queued or running jobs, its limit of max_active_jobs = {limit}; submit again when some have finished"
    )]
    TooManyJobs {
        team: String,
        active: i64,
        limit: i64,
    },
    /// The worker's lease on a stage attempt was lost (it expired and another worker took the
    /// stage, or the job was cancelled): its results are refused so work is committed once.
    #[error(
        "job `{job_id}`, stage `{stage}`: lease with fencing token {token} is no longer held (it expired or the job was cancelled); this attempt's result is discarded"
    )]
    LeaseLost {
        job_id: String,
        stage: String,
        token: i64,
    },
    /// `--db` / `KILN_DB` names no usable database.
    #[error("database `{target}`: {problem}")]
    Database { target: String, problem: String },
}
