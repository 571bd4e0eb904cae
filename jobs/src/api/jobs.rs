//! The job routes of `/api/v1`: submit, list, get, cancel, outputs and report. Every handler takes
//! the caller's [`Team`] and scopes its query to it, so another team's job is indistinguishable
//! from a missing one (404).

use std::path::Path;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kiln_pipeline::stages::publish::{MANIFEST_JSON, Manifest};
use serde::{Deserialize, Serialize};

use super::auth::Team;
use super::body::SubmitJson;
use super::locations::check_submitted_locations;
use super::{ApiError, AppState, body};
use crate::queue::{Attempt, CancelOutcome, QueuedJob, QueuedStage};
use crate::serve::output::{OutputLocation, resolve_output};
use crate::submit::SubmitOptions;

/// Job states a list may be filtered by.
pub const JOB_STATES: &[&str] = &[
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "dead",
];

/// States after which a job never changes again (its event stream ends there).
pub const FINAL_STATES: &[&str] = &["succeeded", "failed", "cancelled", "dead"];

/// Most jobs one list returns; the default is 50 (as `kiln jobs`).
pub const MAX_LIST_LIMIT: i64 = 1000;

/// Body of every error response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
}

/// `GET /jobs` answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobList {
    /// The team's jobs, newest first (`QueuedJob` objects: id, team, name, kind, input, output,
    /// spec, priority, state, max_attempts, budget_usd, cancel_requested, submitted_at (Unix ms),
    /// started_at, finished_at, error).
    #[schema(value_type = Vec<Object>)]
    pub jobs: Vec<QueuedJob>,
}

/// `GET /jobs/{id}` answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobDetail {
    /// The job (as in [`JobList`]).
    #[schema(value_type = Object)]
    pub job: QueuedJob,
    /// Its stages in DAG order (stage, position, uses_gpu, state, attempts, lease, stage_key, …).
    #[schema(value_type = Vec<Object>)]
    pub stages: Vec<QueuedStage>,
    /// Every attempt in start order (stage, attempt, token, worker, state, times, error).
    #[schema(value_type = Vec<Object>)]
    pub attempts: Vec<Attempt>,
    /// What its finished stages warned about (`{stage, message}`: a missing texture, a skipped
    /// camera, a clamped value), in stage order; empty when none did.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub warnings: Vec<kiln_pipeline::warnings::StageWarning>,
}

/// `POST /jobs/{id}/cancel` answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CancelResponse {
    /// The job's id.
    pub job_id: String,
    /// `cancelled` (nothing was running), `requested` (the running stage stops at its next
    /// heartbeat) or `already_finished` (nothing changed).
    pub outcome: String,
    /// The job's state after the request.
    pub state: String,
}

/// `GET /jobs/{id}/outputs` answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Outputs {
    /// The job's id.
    pub job_id: String,
    /// The output URL or path as queued.
    pub output: String,
    /// `local` (a folder on the server's machine), `remote` (object storage) or `unsupported`.
    pub location: String,
    /// The local folder, for `local`.
    pub dir: Option<String>,
    /// The committed `manifest.json` (job_id, kiln_version, files: path, bytes, blake3), when the
    /// output is local and published.
    #[schema(value_type = Option<Object>)]
    pub manifest: Option<Manifest>,
    /// Why there is no manifest, when there is none.
    pub note: Option<String>,
}

/// Query of `GET /jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only jobs in this state: queued, running, succeeded, failed, cancelled or dead.
    pub state: Option<String>,
    /// At most this many jobs, 1 to 1000 (default 50).
    pub limit: Option<i64>,
}

/// Submit a job file for the caller's team. Local input and output paths are refused unless the
/// server allows them ([`super::locations`]).
#[utoipa::path(
    post,
    path = "/api/v1/jobs",
    tag = "jobs",
    request_body(
        description = "A job file (TOML) as is, or JSON with the job file and options.",
        content(
            (SubmitJson = "application/json"),
            (String = "application/toml"),
            (String = "text/plain"),
        ),
    ),
    responses(
        (status = 201, description = "Queued; the job as stored (Location: its URL).", body = Object),
        (status = 200, description = "An earlier submission with the same Idempotency-Key (and team) already queued this job: nothing new was queued; the job as stored, header Idempotent-Replayed: true.", body = Object),
        (status = 400, description = "Malformed TOML or JSON, a bad job field, a local input or output path (refused unless kiln serve --allow-local-paths), or no budget_usd from a team whose tenants entry sets require_budget.", body = ErrorBody),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
        (status = 403, description = "The input or output is outside the team's prefixes, or the job's estimated cost is over the team's max_estimate_usd (kiln serve --tenants).", body = ErrorBody),
        (status = 429, description = "The team already has its most queued or running jobs (kiln serve --tenants, max_active_jobs).", body = ErrorBody),
        (status = 413, description = "Body over the size limit.", body = ErrorBody),
        (status = 415, description = "Unsupported Content-Type.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn submit(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    headers: HeaderMap,
    request_body: Body,
) -> Result<Response, ApiError> {
    body::check_declared_length(&headers, state.max_body_bytes)?;
    let idempotency_key = match headers.get("idempotency-key") {
        Some(v) => {
            let key = v.to_str().unwrap_or("\u{0}").to_string();
            crate::submit::check_idempotency_key(&key).map_err(|e| ApiError::BadRequest {
                what: "header Idempotency-Key",
                message: super::error::quoted_lines(&e.to_string()),
            })?;
            Some(key)
        }
        None => None,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not ASCII)").to_string());
    let media = body::media(content_type.as_deref())?;
    let bytes = body::read_limited(request_body, state.max_body_bytes).await?;
    let sub = body::parse(media, &bytes)?;
    // Checked on the job file as written: `prepare` resolves `dataset://` to a local cache path.
    let spec = crate::spec::JobSpec::from_toml(&sub.job_toml, Path::new("request body"))?;
    check_submitted_locations(
        &spec.input,
        sub.output.as_deref().unwrap_or(&spec.output),
        state.local_paths,
    )?;
    if let Some(tenants) = &state.tenants {
        tenants.check(
            &team,
            &spec.input,
            sub.output.as_deref().unwrap_or(&spec.output),
            &state.relative_base,
        )?;
        tenants.check_limits(
            &team,
            super::tenants::Asked {
                priority: sub.priority,
                job_file_bytes: sub.job_toml.len(),
                budget_usd: sub.budget_usd,
            },
        )?;
    }
    let opts = SubmitOptions {
        team,
        priority: sub.priority,
        max_attempts: sub.max_attempts,
        output: sub.output,
        budget_usd: sub.budget_usd,
    };
    let job = crate::submit::prepare(
        &sub.job_toml,
        Path::new("request body"),
        &state.relative_base,
        &opts,
    )
    .await?;
    let tenants = state.tenants.as_ref();
    if let Some(tenants) = tenants
        && tenants.max_estimate_usd(&opts.team).is_some()
    {
        let usd = estimate_usd(&state.ledger, &job, &spec).await?;
        tenants.check_estimate(&opts.team, usd)?;
    }
    let max_active_jobs = tenants.and_then(|t| t.max_active_jobs(&opts.team));
    let submitted = state
        .queue
        .submit_within(&job, idempotency_key.as_deref(), max_active_jobs)
        .await?;
    let (id, created) = (submitted.id, submitted.created);
    let stored = state.queue.job(&id, Some(&opts.team)).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut res = (status, Json(stored)).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/api/v1/jobs/{id}")) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    if !created {
        res.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(res)
}

/// `kiln plan`'s estimate of `job`: USD on the reference GPU at the built-in catalog's on-demand
/// prices, learnt from the server's ledger. An S3 input's size is unknown here (as in `kiln plan`),
/// so per-byte stages count 0 bytes for it.
///
/// # Errors
/// [`ApiError::Internal`] when the ledger cannot be read or the catalog lacks the reference GPU.
async fn estimate_usd(
    ledger: &crate::ledger::Ledger,
    job: &crate::queue::NewJob,
    spec: &crate::spec::JobSpec,
) -> Result<f64, ApiError> {
    use crate::estimate::{self, REFERENCE_GPU_SKU};
    let shape = estimate::job_shape(
        &job.kind,
        job.stages.iter().map(|(stage, _)| stage.clone()).collect(),
        &crate::worker::first_estimate::local_input(&job.input),
        spec.train.steps,
        spec.ingest.max_side,
    );
    let history = estimate::ledger_history(ledger).await?;
    let catalog = crate::prices::PriceCatalog::default_catalog();
    let est = estimate::estimate(&shape, &history, &catalog, &[REFERENCE_GPU_SKU.to_string()])
        .map_err(|e| ApiError::Internal {
            message: format!("estimating the job's cost: {e}"),
        })?;
    Ok(est.skus.first().map_or(0.0, |row| row.usd_on_demand))
}

/// The job id of a `/jobs/{id}…` path, or 404 for one no job can have: not UTF-8 once decoded,
/// or holding a control character (`%00`: PostgreSQL cannot even compare text with a NUL byte,
/// so the query would fail with a 500 quoting the database).
///
/// # Errors
/// [`ApiError::JobNotFound`] (quoting at most [`super::error::MAX_QUOTED_CHARS`] of the id).
pub(crate) fn job_id(path: Result<UrlPath<String>, PathRejection>) -> Result<String, ApiError> {
    let not_found = |id: &str| ApiError::JobNotFound {
        job_id: super::error::quoted(id),
    };
    match path {
        Ok(UrlPath(id)) if id.chars().any(char::is_control) => Err(not_found(&id)),
        Ok(UrlPath(id)) => Ok(id),
        Err(_) => Err(not_found("(not UTF-8)")),
    }
}

/// Check `?state=&limit=`: a known state, a limit in 1..=[`MAX_LIST_LIMIT`].
///
/// # Errors
/// [`ApiError::BadRequest`] naming the parameter.
pub fn check_list_params(p: &ListParams) -> Result<(Option<&str>, i64), ApiError> {
    let state = p.state.as_deref().filter(|s| !s.is_empty());
    if let Some(s) = state
        && !JOB_STATES.contains(&s)
    {
        return Err(ApiError::BadRequest {
            what: "query parameter state",
            message: format!(
                "expected one of {}, found `{}`",
                JOB_STATES.join(", "),
                super::error::quoted(s)
            ),
        });
    }
    let limit = p.limit.unwrap_or(50);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest {
            what: "query parameter limit",
            message: format!("expected 1 to {MAX_LIST_LIMIT}, found {limit}"),
        });
    }
    Ok((state, limit))
}

/// The caller's team's jobs, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    tag = "jobs",
    params(ListParams),
    responses(
        (status = 200, description = "The team's jobs.", body = JobList),
        (status = 400, description = "Bad state or limit.", body = ErrorBody),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    query: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(params) = query.map_err(|e| ApiError::BadRequest {
        what: "query string",
        message: super::error::quoted_lines(&e.body_text()),
    })?;
    let (job_state, limit) = check_list_params(&params)?;
    let jobs = state.queue.jobs(Some(&team), job_state, limit).await?;
    Ok(Json(JobList { jobs }))
}

/// One job of the caller's team with its stages and attempts.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The job.", body = JobDetail),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
        (status = 404, description = "No such job for this team.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<JobDetail>, ApiError> {
    let id = job_id(id)?;
    let job = state.queue.job(&id, Some(&team)).await?;
    let stages = state.queue.stages(&id).await?;
    let attempts = state.queue.attempts(&id).await?;
    let warnings = crate::report::warnings(&state.ledger.stages(&id).await?);
    Ok(Json(JobDetail {
        job,
        stages,
        attempts,
        warnings,
    }))
}

/// Cancel a job of the caller's team.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "What the cancel did.", body = CancelResponse),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
        (status = 404, description = "No such job for this team.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<CancelResponse>, ApiError> {
    let id = job_id(id)?;
    let outcome = state.queue.cancel(&id, Some(&team)).await?;
    let job = state.queue.job(&id, Some(&team)).await?;
    Ok(Json(CancelResponse {
        job_id: id,
        outcome: match outcome {
            CancelOutcome::Cancelled => "cancelled",
            CancelOutcome::Requested => "requested",
            CancelOutcome::AlreadyFinished => "already_finished",
        }
        .into(),
        state: job.state,
    }))
}

/// Where a job's output is and, for a published local folder, its manifest's files.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/outputs",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The output location.", body = Outputs),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
        (status = 404, description = "No such job for this team.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn outputs(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Outputs>, ApiError> {
    let id = job_id(id)?;
    let job = state.queue.job(&id, Some(&team)).await?;
    let mut out = Outputs {
        job_id: id,
        output: job.output.clone(),
        location: String::new(),
        dir: None,
        manifest: None,
        note: None,
    };
    match resolve_output(&job.output, &state.relative_base) {
        OutputLocation::Local { dir, .. } => {
            out.location = "local".into();
            let path = dir.join(MANIFEST_JSON);
            out.dir = Some(dir.display().to_string());
            match tokio::fs::read(&path).await {
                Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                    Ok(m) => out.manifest = Some(m),
                    Err(e) => {
                        out.note = Some(format!("{}: not a Kiln manifest: {e}", path.display()))
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    out.note = Some(format!(
                        "no {MANIFEST_JSON} yet: the job's publish stage has not finished (state {})",
                        job.state
                    ))
                }
                Err(e) => out.note = Some(format!("{}: {e}", path.display())),
            }
        }
        OutputLocation::Remote { .. } => {
            out.location = "remote".into();
            out.note = Some(format!(
                "object storage: read {MANIFEST_JSON} under the output URL"
            ));
        }
        OutputLocation::Unsupported { reason, .. } => {
            out.location = "unsupported".into();
            out.note = Some(reason.to_string());
        }
    }
    Ok(Json(out))
}

/// The ledger report of a job of the caller's team: every stage attempt's device, wall/CPU/GPU
/// seconds and bytes, and the totals.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/report",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The report (job, stages, totals).", body = Object),
        (status = 401, description = "Missing or invalid token.", body = ErrorBody),
        (status = 404, description = "No such job for this team, or no stage has run yet.", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn report(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(id)?;
    state.queue.job(&id, Some(&team)).await?;
    let report = crate::report::job_report(&state.ledger, &id).await?;
    if report.stages.is_empty() {
        return Err(ApiError::NoReport { job_id: id });
    }
    Ok(Json(report).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(state: Option<&str>, limit: Option<i64>) -> ListParams {
        ListParams {
            state: state.map(String::from),
            limit,
        }
    }

    #[test]
    fn list_params_default_to_all_states_and_50() {
        assert_eq!(check_list_params(&params(None, None)).unwrap(), (None, 50));
        assert_eq!(
            check_list_params(&params(Some(""), Some(3))).unwrap(),
            (None, 3)
        );
    }

    #[test]
    fn list_params_reject_unknown_states_and_out_of_range_limits() {
        assert!(check_list_params(&params(Some("done"), None)).is_err());
        assert!(check_list_params(&params(None, Some(0))).is_err());
        assert!(check_list_params(&params(None, Some(MAX_LIST_LIMIT + 1))).is_err());
    }
}
