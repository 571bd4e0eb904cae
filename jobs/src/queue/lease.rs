//! Claims, leases and fencing tokens: how a worker takes a stage, keeps it, and hands it back.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, Row};

use super::{Queue, QueuedJob, QueuedStage, RetryPolicy, event, job_row, now_ms, stage_row};
use crate::db::Backend;
use crate::{Error, Result};

/// A held stage attempt. Every write that ends or extends it names its fencing `token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub job_id: String,
    pub stage: String,
    /// 1-based attempt number of this stage.
    pub attempt: i64,
    /// The fencing token: increments on every claim of the stage.
    pub token: i64,
    pub worker: String,
}

/// A claimed stage with what the worker needs to run it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub lease: Lease,
    pub job: QueuedJob,
    /// The job's stages (this one `running`; earlier ones `succeeded` with their keys).
    pub stages: Vec<QueuedStage>,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was extended; `cancel_requested` asks the worker to stop the stage.
    Held { cancel_requested: bool },
    /// The lease is gone (expired and reclaimed, or the job ended): stop and discard the work.
    Lost,
}

/// Whose fault a failed attempt was, which decides how it is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The job's own input or parameters: retrying cannot help, the job fails.
    Job,
    /// The stage failed on this machine (a crash, a GPU error, anything not known to be the
    /// job's or the infrastructure's): retried on the job's `max_attempts`.
    Stage,
    /// The object store or the database did not answer, or the lease was lost: retried on the
    /// policy's separate, longer infrastructure budget.
    Infrastructure,
}

/// What became of a failed attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Failure {
    /// Queued again, claimable from this Unix-ms time.
    Retry { not_before: i64 },
    /// Out of attempts: the stage and job are `dead` (the attempts keep every error).
    Dead,
    /// Not retryable: the job is `failed`.
    Failed,
}

impl Queue {
    /// Claim the best claimable stage for `worker`, holding it for `ttl`. GPU stages are only
    /// claimed when `gpu_free`. Expired leases are reclaimed first (their attempts become `lost`
    /// and count as failures).
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn claim(
        &self,
        worker: &str,
        gpu_free: bool,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Option<Claimed>> {
        self.reap_expired(policy).await?;
        let now = now_ms();
        let skip_locked = match self.db.backend() {
            Backend::Postgres => "FOR UPDATE OF s SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let mut tx = self.begin().await?;
        let err = self.db.err();
        // One statement: pick and take. Team limits count running stages of the same team.
        let sql = format!(
            "UPDATE queue_stages SET state = 'running', lease_worker = $1, lease_token = lease_token + 1, \
               lease_expires_at = $2, attempts = attempts + 1 \
             WHERE (job_id, stage) = ( \
               SELECT s.job_id, s.stage FROM queue_stages s JOIN queue_jobs j ON j.id = s.job_id \
               LEFT JOIN (SELECT rj.team, COUNT(*) AS n FROM queue_stages r JOIN queue_jobs rj ON rj.id = r.job_id \
                          WHERE r.state = 'running' GROUP BY rj.team) tr ON tr.team = j.team \
               LEFT JOIN queue_teams t ON t.team = j.team \
               WHERE s.state = 'queued' AND s.not_before <= $3 AND j.cancel_requested = 0 \
                 AND j.state IN ('queued', 'running') AND (s.uses_gpu = 0 OR $4 = 1) \
                 AND COALESCE(tr.n, 0) < COALESCE(t.max_running, 1000000000) \
               ORDER BY j.priority DESC, j.submitted_at, j.id, s.position LIMIT 1 {skip_locked}) \
             RETURNING job_id, stage, attempts, lease_token"
        );
        let Some(row) = sqlx::query(AssertSqlSafe(sql))
            .bind(worker)
            .bind(now + ttl.as_millis() as i64)
            .bind(now)
            .bind(i64::from(gpu_free))
            .fetch_optional(&mut *tx)
            .await
            .map_err(&err)?
        else {
            tx.commit().await.map_err(&err)?;
            return Ok(None);
        };
        let lease = Lease {
            job_id: row.get("job_id"),
            stage: row.get("stage"),
            attempt: row.get("attempts"),
            token: row.get("lease_token"),
            worker: worker.to_string(),
        };
        sqlx::query(
            "INSERT INTO queue_attempts (job_id, stage, attempt, token, worker, state, started_at) VALUES ($1, $2, $3, $4, $5, 'running', $6)",
        )
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(lease.attempt)
        .bind(lease.token)
        .bind(worker)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        sqlx::query(
            "UPDATE queue_jobs SET state = 'running', started_at = COALESCE(started_at, $2) WHERE id = $1 AND state = 'queued'",
        )
        .bind(&lease.job_id)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        super::event(
            &mut tx,
            &lease.job_id,
            now,
            "claimed",
            &format!(
                "{} attempt {} claimed by {worker} (fencing token {})",
                lease.stage, lease.attempt, lease.token
            ),
        )
        .await
        .map_err(&err)?;
        let job = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM queue_jobs WHERE id = $1",
            super::JOB_COLUMNS
        )))
        .bind(&lease.job_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
        let stages = sqlx::query(AssertSqlSafe(format!(
            "SELECT {} FROM queue_stages WHERE job_id = $1 ORDER BY position",
            super::STAGE_COLUMNS
        )))
        .bind(&lease.job_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(&err)?;
        tx.commit().await.map_err(&err)?;
        Ok(Some(Claimed {
            job: job_row(&job),
            stages: stages.iter().map(stage_row).collect(),
            lease,
        }))
    }

    /// Extend `lease` by `ttl` from now. A heartbeat of a lease no longer held (expired, or taken
    /// by another worker) changes nothing and records the attempt `rejected`, as a stale commit
    /// would: its worker stops the stage process.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<Heartbeat> {
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE queue_stages SET lease_expires_at = $1 \
             WHERE job_id = $2 AND stage = $3 AND lease_token = $4 AND state = 'running' AND lease_expires_at >= $5",
        )
        .bind(now + ttl.as_millis() as i64)
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(lease.token)
        .bind(now)
        .execute(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        if done.rows_affected() == 0 {
            let _ = self.reject(lease, "heartbeat").await;
            return Ok(Heartbeat::Lost);
        }
        let cancel: i64 =
            sqlx::query_scalar("SELECT cancel_requested FROM queue_jobs WHERE id = $1")
                .bind(&lease.job_id)
                .fetch_one(&self.db.pool)
                .await
                .map_err(self.db.err())?;
        Ok(Heartbeat::Held {
            cancel_requested: cancel != 0,
        })
    }

    /// Take the stage row of `lease` from `running` to `state` with `extra` assignments, only
    /// while the lease is held and unexpired. False when it is not (the caller's work is stale).
    async fn end_lease(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        lease: &Lease,
        now: i64,
        set: &str,
    ) -> std::result::Result<bool, sqlx::Error> {
        let sql = format!(
            "UPDATE queue_stages SET lease_worker = NULL, lease_expires_at = NULL, {set} \
             WHERE job_id = $1 AND stage = $2 AND lease_token = $3 AND state = 'running' AND lease_expires_at >= $4"
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(&lease.job_id)
            .bind(&lease.stage)
            .bind(lease.token)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Record that `lease`'s attempt ended as `state`, with an optional error.
    async fn close_attempt(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        lease: &Lease,
        now: i64,
        state: &str,
        error: Option<&str>,
    ) -> std::result::Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE queue_attempts SET state = $1, finished_at = $2, error = $3 \
             WHERE job_id = $4 AND stage = $5 AND token = $6 AND state = 'running'",
        )
        .bind(state)
        .bind(now)
        .bind(error)
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(lease.token)
        .execute(&mut **tx)
        .await
        .map(|_| ())
    }

    /// A stale attempt's result: mark it `rejected` (outside any transaction) and refuse it.
    async fn reject(&self, lease: &Lease, what: &str) -> Error {
        let now = now_ms();
        if let Ok(mut tx) = self.begin().await {
            let _ = Self::close_attempt(
                &mut tx,
                lease,
                now,
                "rejected",
                Some(&format!("{what} refused: the lease was no longer held")),
            )
            .await;
            let _ = event(
                &mut tx,
                &lease.job_id,
                now,
                "rejected",
                &format!(
                    "{} attempt {} ({}): {what} with stale fencing token {} refused",
                    lease.stage, lease.attempt, lease.worker, lease.token
                ),
            )
            .await;
            let _ = tx.commit().await;
        }
        Error::LeaseLost {
            job_id: lease.job_id.clone(),
            stage: lease.stage.clone(),
            token: lease.token,
        }
    }

    /// Link `lease`'s attempt to its ledger row (usage is recorded there).
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn set_ledger_attempt(&self, lease: &Lease, ledger_attempt_id: i64) -> Result<()> {
        sqlx::query(
            "UPDATE queue_attempts SET ledger_attempt_id = $1 WHERE job_id = $2 AND stage = $3 AND token = $4",
        )
        .bind(ledger_attempt_id)
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(lease.token)
        .execute(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(())
    }

    /// Open a transaction ending `lease`'s attempt: the stage row takes `set` (only while the
    /// lease is held) and the attempt closes as `attempt_state` with `error`. When the lease is no
    /// longer held nothing changes and the attempt is recorded `rejected` (`what` names the
    /// refused write).
    async fn end_attempt(
        &self,
        lease: &Lease,
        now: i64,
        set: &str,
        attempt_state: &str,
        error: Option<&str>,
        what: &str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.begin().await?;
        let err = self.db.err();
        if !self
            .end_lease(&mut tx, lease, now, set)
            .await
            .map_err(&err)?
        {
            tx.rollback().await.map_err(&err)?;
            return Err(self.reject(lease, what).await);
        }
        Self::close_attempt(&mut tx, lease, now, attempt_state, error)
            .await
            .map_err(&err)?;
        Ok(tx)
    }

    /// Commit `lease`'s stage as succeeded with its content `key` and `summary`; queue the next
    /// stage, or finish the job when it was the last (or `cancelled` when a cancel came in).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease is no longer held (nothing is changed, the attempt is
    /// recorded `rejected`); [`Error::Ledger`].
    pub async fn complete(
        &self,
        lease: &Lease,
        key: &str,
        summary: &serde_json::Value,
    ) -> Result<()> {
        let now = now_ms();
        let mut tx = self.begin().await?;
        let err = self.db.err();
        let done = sqlx::query(
            "UPDATE queue_stages SET lease_worker = NULL, lease_expires_at = NULL, state = 'succeeded', \
               stage_key = $5, summary = $6, error = NULL \
             WHERE job_id = $1 AND stage = $2 AND lease_token = $3 AND state = 'running' AND lease_expires_at >= $4",
        )
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(lease.token)
        .bind(now)
        .bind(key)
        .bind(summary.to_string())
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        if done.rows_affected() != 1 {
            tx.rollback().await.map_err(&err)?;
            return Err(self.reject(lease, "commit").await);
        }
        Self::close_attempt(&mut tx, lease, now, "succeeded", None)
            .await
            .map_err(&err)?;
        let cancel: i64 =
            sqlx::query_scalar("SELECT cancel_requested FROM queue_jobs WHERE id = $1")
                .bind(&lease.job_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(&err)?;
        let next = sqlx::query(
            "UPDATE queue_stages SET state = 'queued', not_before = $3 \
             WHERE job_id = $1 AND state = 'waiting' \
               AND position = (SELECT position + 1 FROM queue_stages WHERE job_id = $1 AND stage = $2)",
        )
        .bind(&lease.job_id)
        .bind(&lease.stage)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        let remaining: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_stages WHERE job_id = $1 AND state <> 'succeeded'",
        )
        .bind(&lease.job_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
        event(
            &mut tx,
            &lease.job_id,
            now,
            "stage_succeeded",
            &format!(
                "{} attempt {} succeeded (key {})",
                lease.stage,
                lease.attempt,
                &key[..key.len().min(12)]
            ),
        )
        .await
        .map_err(&err)?;
        if remaining == 0 {
            sqlx::query(
                "UPDATE queue_jobs SET state = 'succeeded', finished_at = $2 WHERE id = $1 AND state = 'running'",
            )
            .bind(&lease.job_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
            event(
                &mut tx,
                &lease.job_id,
                now,
                "succeeded",
                "every stage succeeded",
            )
            .await
            .map_err(&err)?;
        } else if cancel != 0 || next.rows_affected() == 0 {
            // Cancelled while this stage ran: the remaining stages were cancelled already.
            self.finish_cancelled(&mut tx, &lease.job_id, now)
                .await
                .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)?;
        Ok(())
    }

    async fn finish_cancelled(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        job_id: &str,
        now: i64,
    ) -> std::result::Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE queue_stages SET state = 'cancelled' WHERE job_id = $1 AND state IN ('waiting', 'queued')",
        )
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "UPDATE queue_jobs SET state = 'cancelled', finished_at = $2 WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(job_id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        event(tx, job_id, now, "cancelled", "cancelled").await
    }

    /// Record that `lease`'s attempt failed with `error`. An infrastructure fault (`fault` =
    /// [`Fault::Infrastructure`]: object store or database unreachable, lease lost) is recorded
    /// `failed` with fault `infrastructure` and retried on the policy's infrastructure budget; other `retryable`
    /// failures (a crash, a lost GPU, an error in the stage) are retried after the policy's
    /// backoff until `max_attempts` failed attempts, then dead-lettered; the rest (the job's own
    /// input or parameters) fail the job at once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease is no longer held; [`Error::Ledger`].
    pub async fn fail(
        &self,
        lease: &Lease,
        error: &str,
        fault: Fault,
        policy: &RetryPolicy,
    ) -> Result<Failure> {
        let now = now_ms();
        let mut tx = self
            .end_attempt(
                lease,
                now,
                "state = 'failed'",
                "failed",
                Some(error),
                "failure report",
            )
            .await?;
        let err = self.db.err();
        if fault == Fault::Infrastructure {
            sqlx::query(
                "UPDATE queue_attempts SET fault = 'infrastructure' WHERE job_id = $1 AND stage = $2 AND token = $3",
            )
            .bind(&lease.job_id)
            .bind(&lease.stage)
            .bind(lease.token)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        }
        let outcome = self
            .after_failure(
                &mut tx,
                &FailedStage {
                    job_id: &lease.job_id,
                    stage: &lease.stage,
                    error,
                    fault,
                },
                policy,
                now,
            )
            .await
            .map_err(&err)?;
        tx.commit().await.map_err(&err)?;
        Ok(outcome)
    }

    /// The stage row is `failed` (its attempt closed): retry it, dead-letter it, or fail the job.
    async fn after_failure(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        f: &FailedStage<'_>,
        policy: &RetryPolicy,
        now: i64,
    ) -> std::result::Result<Failure, sqlx::Error> {
        let (job_id, stage, error) = (f.job_id, f.stage, f.error);
        let tally = FailureTally::read(tx, job_id, stage).await?;
        let set_stage = |state: &'static str| {
            sqlx::query(
                "UPDATE queue_stages SET state = $3, error = $4, not_before = $5 WHERE job_id = $1 AND stage = $2",
            )
            .bind(job_id.to_string())
            .bind(stage.to_string())
            .bind(state)
            .bind(error.to_string())
        };
        if tally.cancel_requested {
            set_stage("cancelled").bind(now).execute(&mut **tx).await?;
            self.finish_cancelled(tx, job_id, now).await?;
            return Ok(Failure::Failed);
        }
        if let Some((delay, what)) = tally.retry(f, policy) {
            let not_before = now + delay.as_millis() as i64;
            set_stage("queued")
                .bind(not_before)
                .execute(&mut **tx)
                .await?;
            event(tx, job_id, now, "retry", &what).await?;
            return Ok(Failure::Retry { not_before });
        }
        let (state, outcome, what) = tally.verdict(f, policy);
        set_stage(state).bind(now).execute(&mut **tx).await?;
        sqlx::query(
            "UPDATE queue_stages SET state = 'cancelled' WHERE job_id = $1 AND state IN ('waiting', 'queued')",
        )
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
        sqlx::query("UPDATE queue_jobs SET state = $2, finished_at = $3, error = $4 WHERE id = $1")
            .bind(job_id)
            .bind(state)
            .bind(now)
            .bind(&what)
            .execute(&mut **tx)
            .await?;
        event(tx, job_id, now, state, &what).await?;
        Ok(outcome)
    }

    /// Hand `lease` back without counting a failure (the worker is shutting down): the stage is
    /// claimable again at once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease is no longer held; [`Error::Ledger`].
    pub async fn release(&self, lease: &Lease, reason: &str) -> Result<()> {
        let now = now_ms();
        let mut tx = self
            .end_attempt(
                lease,
                now,
                "state = 'queued'",
                "released",
                Some(reason),
                "release",
            )
            .await?;
        let err = self.db.err();
        sqlx::query("UPDATE queue_stages SET not_before = $3 WHERE job_id = $1 AND stage = $2")
            .bind(&lease.job_id)
            .bind(&lease.stage)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        event(
            &mut tx,
            &lease.job_id,
            now,
            "released",
            &format!(
                "{} attempt {} released by {}: {reason}",
                lease.stage, lease.attempt, lease.worker
            ),
        )
        .await
        .map_err(&err)?;
        let cancel: i64 =
            sqlx::query_scalar("SELECT cancel_requested FROM queue_jobs WHERE id = $1")
                .bind(&lease.job_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(&err)?;
        if cancel != 0 {
            self.finish_cancelled(&mut tx, &lease.job_id, now)
                .await
                .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)
    }

    /// Record that `lease`'s stage stopped because its job was cancelled: the attempt is
    /// `cancelled` (its time is waste) and the job `cancelled`.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease is no longer held; [`Error::Ledger`].
    pub async fn cancelled(&self, lease: &Lease) -> Result<()> {
        let now = now_ms();
        let mut tx = self
            .end_attempt(
                lease,
                now,
                "state = 'cancelled'",
                "cancelled",
                Some("job cancelled"),
                "cancellation",
            )
            .await?;
        let err = self.db.err();
        self.finish_cancelled(&mut tx, &lease.job_id, now)
            .await
            .map_err(&err)?;
        tx.commit().await.map_err(&err)
    }

    /// Reclaim stages whose lease expired: their attempts become `lost` (a failure), and each
    /// stage is retried or dead-lettered as after [`Queue::fail`]. Returns how many were reclaimed.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn reap_expired(&self, policy: &RetryPolicy) -> Result<usize> {
        let now = now_ms();
        // The common case, nothing expired, costs one read and no lock.
        let expired: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_stages WHERE state = 'running' AND lease_expires_at < $1",
        )
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        if expired == 0 {
            return Ok(0);
        }
        let skip_locked = match self.db.backend() {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let mut tx = self.begin().await?;
        let err = self.db.err();
        let expired = sqlx::query(AssertSqlSafe(format!(
            "SELECT job_id, stage, lease_token, lease_worker FROM queue_stages \
             WHERE state = 'running' AND lease_expires_at < $1 {skip_locked}"
        )))
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(&err)?;
        for row in &expired {
            let lease = Lease {
                job_id: row.get("job_id"),
                stage: row.get("stage"),
                attempt: 0,
                token: row.get("lease_token"),
                worker: row
                    .get::<Option<String>, _>("lease_worker")
                    .unwrap_or_default(),
            };
            let error = format!(
                "lease expired: worker {} stopped heartbeating (killed, crashed or cut off)",
                lease.worker
            );
            sqlx::query(
                "UPDATE queue_stages SET state = 'failed', lease_worker = NULL, lease_expires_at = NULL \
                 WHERE job_id = $1 AND stage = $2 AND lease_token = $3 AND state = 'running'",
            )
            .bind(&lease.job_id)
            .bind(&lease.stage)
            .bind(lease.token)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
            Self::close_attempt(&mut tx, &lease, now, "lost", Some(&error))
                .await
                .map_err(&err)?;
            // The ledger's row of the lost attempt: failed, charged for the time its lease held
            // (allocated, wasted), GPU-seconds too when it held a GPU.
            let held = sqlx::query(
                "SELECT started_at, ledger_attempt_id FROM queue_attempts WHERE job_id = $1 AND stage = $2 AND token = $3",
            )
            .bind(&lease.job_id)
            .bind(&lease.stage)
            .bind(lease.token)
            .fetch_optional(&mut *tx)
            .await
            .map_err(&err)?;
            if let Some(h) = held
                && let Some(ledger_id) = h.get::<Option<i64>, _>("ledger_attempt_id")
            {
                let wall_s = (now - h.get::<i64, _>("started_at")) as f64 / 1000.0;
                sqlx::query(
                    "UPDATE stage_attempts SET state = 'failed', error = $1, wall_s = $2, \
                       gpu_s = CASE WHEN device LIKE 'cuda%' THEN $2 ELSE 0 END \
                     WHERE id = $3 AND state = 'running'",
                )
                .bind(&error)
                .bind(wall_s)
                .bind(ledger_id)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
            }
            event(
                &mut tx,
                &lease.job_id,
                now,
                "lost",
                &format!("{}: {error}", lease.stage),
            )
            .await
            .map_err(&err)?;
            self.after_failure(
                &mut tx,
                &FailedStage {
                    job_id: &lease.job_id,
                    stage: &lease.stage,
                    error: &error,
                    fault: Fault::Infrastructure,
                },
                policy,
                now,
            )
            .await
            .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)?;
        Ok(expired.len())
    }

    /// Register a worker process (one row per start) for `kiln workers` and `/metrics`.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn register_worker(&self, id: &str, name: &str, gpus: i64) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO queue_workers (id, name, gpus, started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(id)
        .bind(name)
        .bind(gpus)
        .bind(now)
        .execute(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(())
    }

    /// Mark worker `id` alive now, or stopped.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn worker_seen(&self, id: &str, stopped: bool) -> Result<()> {
        let now = now_ms();
        let sql = if stopped {
            "UPDATE queue_workers SET heartbeat_at = $1, stopped_at = $1 WHERE id = $2"
        } else {
            "UPDATE queue_workers SET heartbeat_at = $1 WHERE id = $2"
        };
        sqlx::query(sql)
            .bind(now)
            .bind(id)
            .execute(&self.db.pool)
            .await
            .map_err(self.db.err())?;
        Ok(())
    }
}
/// A stage attempt that failed: whose, what, and by whose fault.
struct FailedStage<'a> {
    job_id: &'a str,
    stage: &'a str,
    error: &'a str,
    fault: Fault,
}

/// What a stage's failures so far allow: its own failed attempts (the job's attempts budget),
/// its infrastructure faults (their own budget), the job's attempts and whether it is being
/// cancelled.
struct FailureTally {
    failures: i64,
    faults: i64,
    max_attempts: i64,
    cancel_requested: bool,
}

impl FailureTally {
    async fn read(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        job_id: &str,
        stage: &str,
    ) -> std::result::Result<Self, sqlx::Error> {
        let failures: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_attempts WHERE job_id = $1 AND stage = $2 AND state = 'failed' \
             AND fault IS NULL",
        )
        .bind(job_id)
        .bind(stage)
        .fetch_one(&mut **tx)
        .await?;
        let faults: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_attempts WHERE job_id = $1 AND stage = $2 \
             AND (state = 'lost' OR fault = 'infrastructure')",
        )
        .bind(job_id)
        .bind(stage)
        .fetch_one(&mut **tx)
        .await?;
        let row =
            sqlx::query("SELECT max_attempts, cancel_requested FROM queue_jobs WHERE id = $1")
                .bind(job_id)
                .fetch_one(&mut **tx)
                .await?;
        Ok(FailureTally {
            failures,
            faults,
            max_attempts: row.get("max_attempts"),
            cancel_requested: row.get::<i64, _>("cancel_requested") != 0,
        })
    }

    /// The delay and words of a retry, when the failure's budget has one left: infrastructure
    /// faults draw on their own budget, stage failures on the job's attempts; a job's own fault
    /// is never retried.
    fn retry(&self, f: &FailedStage<'_>, policy: &RetryPolicy) -> Option<(Duration, String)> {
        let (stage, error, job_id) = (f.stage, f.error, f.job_id);
        let (failures, faults, max_attempts) = (self.failures, self.faults, self.max_attempts);
        match f.fault {
            Fault::Infrastructure if faults < i64::from(policy.max_infra_faults) => {
                let delay = policy.infra_delay(job_id, stage, faults as u32);
                Some((
                    delay,
                    format!(
                        "{stage}: infrastructure fault {faults} of {} (not counted against the job's attempts), retrying in {:.1} s: {error}",
                        policy.max_infra_faults,
                        delay.as_secs_f64()
                    ),
                ))
            }
            Fault::Stage if failures < max_attempts => {
                let delay = policy.delay(job_id, stage, failures as u32);
                Some((
                    delay,
                    format!(
                        "{stage} failed ({failures} of {max_attempts} attempts used), retrying in {:.1} s: {error}",
                        delay.as_secs_f64()
                    ),
                ))
            }
            _ => None,
        }
    }

    /// No retry left: the state of the stage and the job (`dead` when retries ran out, `failed`
    /// for the job's own fault), the outcome and the words.
    fn verdict(
        &self,
        f: &FailedStage<'_>,
        policy: &RetryPolicy,
    ) -> (&'static str, Failure, String) {
        let (stage, error) = (f.stage, f.error);
        match f.fault {
            Fault::Infrastructure => (
                "dead",
                Failure::Dead,
                format!(
                    "dead-lettered after {} infrastructure faults of {stage} (lost leases, storage or database unreachable; {} s of retries); last error: {error}",
                    self.faults,
                    policy.infra_horizon().as_secs()
                ),
            ),
            Fault::Stage => (
                "dead",
                Failure::Dead,
                format!(
                    "dead-lettered after {} failed attempts of {stage}; last error: {error}",
                    self.failures
                ),
            ),
            Fault::Job => (
                "failed",
                Failure::Failed,
                format!("{stage} failed: {error}"),
            ),
        }
    }
}
