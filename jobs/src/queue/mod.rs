//! The durable job queue: jobs submitted by teams, their DAG stages claimed by workers under
//! leases, in the same database as the ledger (SQLite file by default, PostgreSQL for many
//! machines; see [`crate::db`]).
//!
//! Model (shared/design/ARCHITECTURE.md "jobs"; shared/research/pipeline-anchors.md §2):
//! - A job is a `queue_jobs` row (`queued → running → succeeded | failed | cancelled | dead`) and
//!   one `queue_stages` row per stage of its DAG, in order. The first stage starts `queued`, the
//!   others `waiting`; a stage becomes `queued` when the one before it succeeds.
//! - A worker claims the best queued stage (highest job priority, then oldest job, then stage
//!   order; GPU stages only by workers with a free GPU; at most the team's `max_running` stages
//!   running). The claim increments the stage's **fencing token** and opens an attempt
//!   (`queue_attempts`) with a lease that the worker extends by heartbeats.
//! - Every later write of the attempt (heartbeat, commit, failure, release) names the token and
//!   only applies while the stage is still `running` under that token: a worker whose lease
//!   expired and was taken over cannot commit (it gets [`Error::LeaseLost`]). Delivery is
//!   at-least-once; stages are idempotent (same key, same output), so a re-run is safe.
//! - Failures are retried after a capped exponential backoff with jitter ([`RetryPolicy`]);
//!   after `max_attempts` failed or lost attempts the stage and job go `dead`, keeping every
//!   attempt's error. Errors the job itself causes (bad input) fail the job at once.
//! - Cancellation of a running job is a flag the worker sees at its next heartbeat; it stops the
//!   stage (training checkpoints) and reports the attempt `cancelled`.
//!
//! Claims are single `UPDATE … WHERE (job_id, stage) = (SELECT … LIMIT 1 [FOR UPDATE SKIP
//! LOCKED]) RETURNING …` statements: on PostgreSQL concurrent workers skip rows another claim holds;
//! SQLite serialises writers (`BEGIN IMMEDIATE`).

mod backoff;
mod lease;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

pub use backoff::RetryPolicy;
pub use lease::{Claimed, Failure, Fault, Heartbeat, Lease};

use crate::db::{Backend, Db};
use crate::{Error, Result};

/// The current time in Unix milliseconds (UTC), the queue's clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A job to submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// Unique id (see [`crate::runner::new_job_id`]).
    pub id: String,
    /// The submitting team; every read and cancel is scoped to it.
    pub team: String,
    pub name: String,
    /// `capture`, `mesh` or `splats`.
    pub kind: String,
    /// Input URL or path.
    pub input: String,
    /// Output URL or path.
    pub output: String,
    /// The job file (TOML) as submitted; workers plan from it.
    pub spec: String,
    /// Higher runs first; ties go to the older job.
    pub priority: i64,
    /// Failed or lost attempts per stage before the job is dead-lettered (≥ 1).
    pub max_attempts: i64,
    /// Optional spending cap in USD for the whole job.
    pub budget_usd: Option<f64>,
    /// The DAG's stages in run order: `(stage name, uses a GPU)`.
    pub stages: Vec<(String, bool)>,
}

/// What [`Queue::submit_once`] did: the job's id, and whether it was queued now (`false`: an
/// earlier submission with the same key already had).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: String,
    pub created: bool,
}

/// A job as stored in the queue. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedJob {
    pub id: String,
    pub team: String,
    pub name: String,
    pub kind: String,
    pub input: String,
    pub output: String,
    /// The job file (TOML).
    pub spec: String,
    pub priority: i64,
    /// `queued`, `running`, `succeeded`, `failed`, `cancelled` or `dead`.
    pub state: String,
    pub max_attempts: i64,
    pub budget_usd: Option<f64>,
    pub cancel_requested: bool,
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
}

/// One stage of a queued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedStage {
    pub job_id: String,
    pub stage: String,
    /// 0-based order in the DAG.
    pub position: i64,
    pub uses_gpu: bool,
    /// `waiting`, `queued`, `running`, `succeeded`, `failed`, `cancelled` or `dead`.
    pub state: String,
    /// Attempts started so far.
    pub attempts: i64,
    /// Not claimable before this time (retry backoff), Unix ms.
    pub not_before: i64,
    pub lease_worker: Option<String>,
    /// The fencing token of the latest attempt.
    pub lease_token: i64,
    pub lease_expires_at: Option<i64>,
    /// Content key of the finished output (hex BLAKE3).
    pub stage_key: Option<String>,
    pub summary: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// One attempt at a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: i64,
    pub job_id: String,
    pub stage: String,
    /// 1-based attempt number of the stage.
    pub attempt: i64,
    /// The fencing token this attempt held.
    pub token: i64,
    pub worker: String,
    /// `running`, `succeeded`, `failed`, `lost` (lease expired), `released` (worker shut down),
    /// `cancelled` or `rejected` (a commit that came after the lease was lost).
    pub state: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// The ledger's `stage_attempts.id` holding this attempt's usage.
    pub ledger_attempt_id: Option<i64>,
    pub error: Option<String>,
}

/// A job event (submitted, claimed, retried, …), in order of `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    pub job_id: String,
    /// Unix ms.
    pub at: i64,
    pub kind: String,
    pub message: String,
}

/// What [`Queue::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CancelOutcome {
    /// Nothing was running: the job is `cancelled` now.
    Cancelled,
    /// A stage is running: its worker stops it at its next heartbeat.
    Requested,
    /// The job had already finished (the state is unchanged).
    AlreadyFinished,
}

/// Queue depth by state, for `/metrics` and `kiln jobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Depth {
    /// Stages ready to claim now.
    pub queued_stages: i64,
    pub running_stages: i64,
    pub queued_jobs: i64,
    pub running_jobs: i64,
}

/// The queue in an open database.
#[derive(Debug, Clone)]
pub struct Queue {
    db: Db,
}

/// A team's queued and running jobs (`$1`: the team).
const ACTIVE_JOBS_SQL: &str =
    "SELECT COUNT(*) FROM queue_jobs WHERE team = $1 AND state IN ('queued', 'running')";

/// First key of the PostgreSQL advisory lock that serialises one team's submissions (the second is
/// the hash of the team): "KILN" in ASCII, so Kiln's locks are told apart from other users' of the
/// same database in `pg_locks`.
const SUBMIT_LOCK_CLASS: i32 = 0x4b49_4c4e;

const JOB_COLUMNS: &str = "id, team, name, kind, input, output, spec, priority, state, max_attempts, budget_usd, cancel_requested, submitted_at, started_at, finished_at, error";
const STAGE_COLUMNS: &str = "job_id, stage, position, uses_gpu, state, attempts, not_before, lease_worker, lease_token, lease_expires_at, stage_key, summary, error";

fn job_row(r: &AnyRow) -> QueuedJob {
    QueuedJob {
        id: r.get("id"),
        team: r.get("team"),
        name: r.get("name"),
        kind: r.get("kind"),
        input: r.get("input"),
        output: r.get("output"),
        spec: r.get("spec"),
        priority: r.get("priority"),
        state: r.get("state"),
        max_attempts: r.get("max_attempts"),
        budget_usd: r.get("budget_usd"),
        cancel_requested: r.get::<i64, _>("cancel_requested") != 0,
        submitted_at: r.get("submitted_at"),
        started_at: r.get("started_at"),
        finished_at: r.get("finished_at"),
        error: r.get("error"),
    }
}

fn stage_row(r: &AnyRow) -> QueuedStage {
    QueuedStage {
        job_id: r.get("job_id"),
        stage: r.get("stage"),
        position: r.get("position"),
        uses_gpu: r.get::<i64, _>("uses_gpu") != 0,
        state: r.get("state"),
        attempts: r.get("attempts"),
        not_before: r.get("not_before"),
        lease_worker: r.get("lease_worker"),
        lease_token: r.get("lease_token"),
        lease_expires_at: r.get("lease_expires_at"),
        stage_key: r.get("stage_key"),
        summary: r
            .get::<Option<String>, _>("summary")
            .and_then(|s| serde_json::from_str(&s).ok()),
        error: r.get("error"),
    }
}

impl Queue {
    /// Open the queue at `target` (an SQLite path or a `postgres://` URL; see [`Db::open`]).
    ///
    /// # Errors
    /// As [`Db::open`].
    pub async fn open(target: &str) -> Result<Queue> {
        Ok(Queue {
            db: Db::open(target).await?,
        })
    }

    /// Open an existing queue (never creates an SQLite file; see [`Db::open_existing`]).
    ///
    /// # Errors
    /// As [`Db::open_existing`].
    pub async fn open_existing(target: &str) -> Result<Queue> {
        Ok(Queue {
            db: Db::open_existing(target).await?,
        })
    }

    /// The queue in an already open database.
    pub fn with_db(db: Db) -> Queue {
        Queue { db }
    }

    /// The database behind the queue (the ledger shares it).
    pub fn db(&self) -> &Db {
        &self.db
    }

    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        match self.db.backend() {
            // Take the write lock up front: a deferred transaction that reads then writes can
            // fail with SQLITE_BUSY instead of waiting when another process writes meanwhile.
            Backend::Sqlite => self.db.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.db.pool.begin().await,
        }
        .map_err(self.db.err())
    }

    /// Queue `job`: all its stages, the first one claimable now.
    ///
    /// # Errors
    /// [`Error::Submit`] when it has no stages, `max_attempts < 1`, a negative budget, an empty
    /// team, or its id is already queued; [`Error::Ledger`].
    pub async fn submit(&self, job: &NewJob) -> Result<()> {
        self.insert(job, None, None).await
    }

    /// Queue `job` unless `team` already submitted one under `key` (an HTTP `Idempotency-Key`,
    /// `kiln submit --idempotency-key`): then nothing is queued and that job's id is returned,
    /// so a retried submission never runs (and bills) a job twice.
    ///
    /// # Errors
    /// As [`Queue::submit`]; [`Error::Submit`] when the key was used for a different job file,
    /// output, priority or attempts.
    pub async fn submit_once(&self, job: &NewJob, key: &str) -> Result<Submitted> {
        self.submit_within(job, Some(key), None).await
    }

    /// Queue `job` as [`Queue::submit`] (or [`Queue::submit_once`] with `idempotency_key`), but
    /// only while its team has fewer than `max_active_jobs` queued or running jobs (`None`: no
    /// limit). The count and the insert are one transaction that holds the team's submit lock
    /// (PostgreSQL: a transaction-scoped advisory lock on the team; SQLite: the database's write
    /// lock, `BEGIN IMMEDIATE`), so concurrent submissions cannot all see room for one more. A
    /// replayed idempotent submission answers with its job even at the limit.
    ///
    /// # Errors
    /// As [`Queue::submit_once`]; [`Error::TooManyJobs`] at the limit (nothing queued).
    pub async fn submit_within(
        &self,
        job: &NewJob,
        idempotency_key: Option<&str>,
        max_active_jobs: Option<i64>,
    ) -> Result<Submitted> {
        let Some(key) = idempotency_key else {
            self.insert(job, None, max_active_jobs).await?;
            return Ok(Submitted {
                id: job.id.clone(),
                created: true,
            });
        };
        if let Some(existing) = self.by_idempotency_key(job, key).await? {
            return Ok(existing);
        }
        match self.insert(job, Some(key), max_active_jobs).await {
            Ok(()) => Ok(Submitted {
                id: job.id.clone(),
                created: true,
            }),
            // A concurrent retry inserted the same key first: answer with its job.
            Err(e) => match self.by_idempotency_key(job, key).await? {
                Some(existing) => Ok(existing),
                None => Err(e),
            },
        }
    }

    async fn by_idempotency_key(&self, job: &NewJob, key: &str) -> Result<Option<Submitted>> {
        let row = sqlx::query(
            "SELECT id, spec, output, priority, max_attempts, budget_usd FROM queue_jobs WHERE team = $1 AND idempotency_key = $2",
        )
        .bind(&job.team)
        .bind(key)
        .fetch_optional(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        let Some(row) = row else { return Ok(None) };
        let id: String = row.get("id");
        let same = row.get::<String, _>("spec") == job.spec
            && row.get::<String, _>("output") == job.output
            && row.get::<i64, _>("priority") == job.priority
            && row.get::<i64, _>("max_attempts") == job.max_attempts
            && row.get::<Option<f64>, _>("budget_usd") == job.budget_usd;
        if !same {
            return Err(Error::Submit {
                message: format!(
                    "Idempotency-Key `{key}` was already used by team {} for job {id} with a different job file, output, priority, attempts or budget; use a new key for a new job",
                    job.team
                ),
            });
        }
        Ok(Some(Submitted { id, created: false }))
    }

    async fn insert(
        &self,
        job: &NewJob,
        idempotency_key: Option<&str>,
        max_active_jobs: Option<i64>,
    ) -> Result<()> {
        let refuse = |message: String| Err(Error::Submit { message });
        if job.stages.is_empty() {
            return refuse(format!("job `{}` has no stages", job.id));
        }
        if job.max_attempts < 1 {
            return refuse(format!(
                "max_attempts must be at least 1, found {}",
                job.max_attempts
            ));
        }
        if job.budget_usd.is_some_and(|b| !(b >= 0.0 && b.is_finite())) {
            return refuse(format!(
                "budget_usd must be a non-negative number of US dollars, found {:?}",
                job.budget_usd
            ));
        }
        if job.team.trim().is_empty() {
            return refuse("the team name is empty".into());
        }
        let now = now_ms();
        let mut tx = self.begin().await?;
        let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM queue_jobs WHERE id = $1")
            .bind(&job.id)
            .fetch_one(&mut *tx)
            .await
            .map_err(self.db.err())?;
        if exists > 0 {
            return refuse(format!("a job with id `{}` is already queued", job.id));
        }
        if let Some(limit) = max_active_jobs {
            self.check_active_jobs(&mut tx, &job.team, limit).await?;
        }
        sqlx::query(
            "INSERT INTO queue_jobs (id, team, name, kind, input, output, spec, priority, state, max_attempts, budget_usd, submitted_at, idempotency_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'queued', $9, CAST($10 AS DOUBLE PRECISION), $11, $12)",
        )
        .bind(&job.id)
        .bind(&job.team)
        .bind(&job.name)
        .bind(&job.kind)
        .bind(&job.input)
        .bind(&job.output)
        .bind(&job.spec)
        .bind(job.priority)
        .bind(job.max_attempts)
        .bind(crate::db::nullable_f64(job.budget_usd))
        .bind(now)
        .bind(idempotency_key)
        .execute(&mut *tx)
        .await
        .map_err(self.db.err())?;
        for (i, (stage, uses_gpu)) in job.stages.iter().enumerate() {
            sqlx::query(
                "INSERT INTO queue_stages (job_id, stage, position, uses_gpu, state, not_before) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&job.id)
            .bind(stage)
            .bind(i as i64)
            .bind(i64::from(*uses_gpu))
            .bind(if i == 0 { "queued" } else { "waiting" })
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(self.db.err())?;
        }
        let stages: Vec<&str> = job.stages.iter().map(|(s, _)| s.as_str()).collect();
        event(
            &mut tx,
            &job.id,
            now,
            "submitted",
            &format!(
                "team {}, priority {}, stages {}",
                job.team,
                job.priority,
                stages.join(" → ")
            ),
        )
        .await
        .map_err(self.db.err())?;
        tx.commit().await.map_err(self.db.err())?;
        Ok(())
    }

    /// The job `id`; with `team`, only when it is that team's.
    ///
    /// # Errors
    /// [`Error::NotInQueue`]; [`Error::Ledger`].
    pub async fn job(&self, id: &str, team: Option<&str>) -> Result<QueuedJob> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM queue_jobs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.db.pool)
        .await
        .map_err(self.db.err())?
        .map(|r| job_row(&r))
        .filter(|j| team.is_none_or(|t| t == j.team));
        row.ok_or_else(|| Error::NotInQueue {
            job_id: id.into(),
            db: self.db.shown().into(),
        })
    }

    /// How many of `team`'s jobs are queued or running.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn active_jobs(&self, team: &str) -> Result<i64> {
        sqlx::query_scalar(ACTIVE_JOBS_SQL)
            .bind(team)
            .fetch_one(&self.db.pool)
            .await
            .map_err(self.db.err())
    }

    /// Inside submission `tx`: take `team`'s submit lock, then refuse when it has `limit` or more
    /// active jobs. The lock lasts until `tx` ends, so the count stays true until the insert
    /// commits.
    async fn check_active_jobs(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        team: &str,
        limit: i64,
    ) -> Result<()> {
        if self.db.backend() == Backend::Postgres {
            // READ COMMITTED transactions do not see each other's uncommitted inserts, so without
            // the lock twenty concurrent submissions all count the same few jobs. Keyed by team:
            // other teams' submissions do not wait. (SQLite's `BEGIN IMMEDIATE` already holds the
            // only write lock.)
            sqlx::query(AssertSqlSafe(format!(
                "SELECT pg_advisory_xact_lock({SUBMIT_LOCK_CLASS}, hashtext($1))"
            )))
            .bind(team)
            .execute(&mut **tx)
            .await
            .map_err(self.db.err())?;
        }
        let active: i64 = sqlx::query_scalar(ACTIVE_JOBS_SQL)
            .bind(team)
            .fetch_one(&mut **tx)
            .await
            .map_err(self.db.err())?;
        if active >= limit {
            return Err(Error::TooManyJobs {
                team: team.to_string(),
                active,
                limit,
            });
        }
        Ok(())
    }

    /// Jobs, newest first: only `team`'s when given, only in `state` when given, at most `limit`.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn jobs(
        &self,
        team: Option<&str>,
        state: Option<&str>,
        limit: i64,
    ) -> Result<Vec<QueuedJob>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM queue_jobs \
             WHERE ($1 IS NULL OR team = $1) AND ($2 IS NULL OR state = $2) \
             ORDER BY submitted_at DESC, id DESC LIMIT $3"
        )))
        .bind(team)
        .bind(state)
        .bind(limit)
        .fetch_all(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(rows.iter().map(job_row).collect())
    }

    /// The stages of job `id`, in DAG order.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn stages(&self, id: &str) -> Result<Vec<QueuedStage>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {STAGE_COLUMNS} FROM queue_stages WHERE job_id = $1 ORDER BY position"
        )))
        .bind(id)
        .fetch_all(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(rows.iter().map(stage_row).collect())
    }

    /// Every attempt of job `id`, in start order (the error history of retries).
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn attempts(&self, id: &str) -> Result<Vec<Attempt>> {
        let rows = sqlx::query(
            "SELECT id, job_id, stage, attempt, token, worker, state, started_at, finished_at, ledger_attempt_id, error \
             FROM queue_attempts WHERE job_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(rows
            .iter()
            .map(|r| Attempt {
                id: r.get("id"),
                job_id: r.get("job_id"),
                stage: r.get("stage"),
                attempt: r.get("attempt"),
                token: r.get("token"),
                worker: r.get("worker"),
                state: r.get("state"),
                started_at: r.get("started_at"),
                finished_at: r.get("finished_at"),
                ledger_attempt_id: r.get("ledger_attempt_id"),
                error: r.get("error"),
            })
            .collect())
    }

    /// Events of job `id` with an id above `after` (0 for all), oldest first.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn events(&self, id: &str, after: i64) -> Result<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT id, job_id, at, kind, message FROM queue_events WHERE job_id = $1 AND id > $2 ORDER BY id",
        )
        .bind(id)
        .bind(after)
        .fetch_all(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(rows
            .iter()
            .map(|r| Event {
                id: r.get("id"),
                job_id: r.get("job_id"),
                at: r.get("at"),
                kind: r.get("kind"),
                message: r.get("message"),
            })
            .collect())
    }

    /// Cancel job `id` (only `team`'s, when given). Stages not yet started are cancelled; a
    /// running stage is asked to stop (its worker sees the request at its next heartbeat).
    ///
    /// # Errors
    /// [`Error::NotInQueue`]; [`Error::Ledger`].
    pub async fn cancel(&self, id: &str, team: Option<&str>) -> Result<CancelOutcome> {
        let job = self.job(id, team).await?;
        // A stage held by a dead worker would otherwise wait for another worker to reclaim it.
        self.reap_expired(&RetryPolicy::default()).await?;
        if !matches!(job.state.as_str(), "queued" | "running") {
            return Ok(CancelOutcome::AlreadyFinished);
        }
        let now = now_ms();
        let mut tx = self.begin().await?;
        let err = self.db.err();
        sqlx::query(
            "UPDATE queue_jobs SET cancel_requested = 1 WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        sqlx::query(
            "UPDATE queue_stages SET state = 'cancelled' WHERE job_id = $1 AND state IN ('waiting', 'queued')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_stages WHERE job_id = $1 AND state = 'running'",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
        let outcome = if running == 0 {
            sqlx::query(
                "UPDATE queue_jobs SET state = 'cancelled', finished_at = $2 WHERE id = $1 AND state IN ('queued', 'running')",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
            event(
                &mut tx,
                id,
                now,
                "cancelled",
                "cancelled before its next stage started",
            )
            .await
            .map_err(&err)?;
            CancelOutcome::Cancelled
        } else {
            event(
                &mut tx,
                id,
                now,
                "cancel_requested",
                "cancel requested: the running stage stops at its worker's next heartbeat",
            )
            .await
            .map_err(&err)?;
            CancelOutcome::Requested
        };
        tx.commit().await.map_err(&err)?;
        Ok(outcome)
    }

    /// Limit `team` to `max_running` stages running at once (across all workers).
    ///
    /// # Errors
    /// [`Error::Submit`] when `max_running < 0`; [`Error::Ledger`].
    pub async fn set_team_limit(&self, team: &str, max_running: i64) -> Result<()> {
        if max_running < 0 {
            return Err(Error::Submit {
                message: format!("max_running must be ≥ 0, found {max_running}"),
            });
        }
        let mut tx = self.begin().await?;
        let err = self.db.err();
        sqlx::query("DELETE FROM queue_teams WHERE team = $1")
            .bind(team)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        sqlx::query("INSERT INTO queue_teams (team, max_running) VALUES ($1, $2)")
            .bind(team)
            .bind(max_running)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        tx.commit().await.map_err(&err)
    }

    /// Stages and jobs by state (queued stages counts only those claimable now).
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn depth(&self) -> Result<Depth> {
        let r = sqlx::query(
            "SELECT \
               (SELECT COUNT(*) FROM queue_stages WHERE state = 'queued' AND not_before <= $1) AS qs, \
               (SELECT COUNT(*) FROM queue_stages WHERE state = 'running') AS rs, \
               (SELECT COUNT(*) FROM queue_jobs WHERE state = 'queued') AS qj, \
               (SELECT COUNT(*) FROM queue_jobs WHERE state = 'running') AS rj",
        )
        .bind(now_ms())
        .fetch_one(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(Depth {
            queued_stages: r.get("qs"),
            running_stages: r.get("rs"),
            queued_jobs: r.get("qj"),
            running_jobs: r.get("rj"),
        })
    }
}

/// Append an event to job `job_id` inside `tx`.
pub(crate) async fn event(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    job_id: &str,
    at: i64,
    kind: &str,
    message: &str,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO queue_events (job_id, at, kind, message) VALUES ($1, $2, $3, $4)")
        .bind(job_id)
        .bind(at)
        .bind(kind)
        .bind(message)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests;
