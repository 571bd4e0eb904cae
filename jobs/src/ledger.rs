//! The job ledger: every job and every stage attempt with its device, wall/CPU/GPU seconds and bytes,
//! in an embedded SQLite database (sqlx, runtime-checked queries so no database is needed to build).
//!
//! Default location: `$KILN_HOME/ledger.sqlite` (else the user's data dir `kiln/ledger.sqlite`);
//! `--db PATH` or `KILN_DB` overrides it. The schema is created on open (idempotent).

use std::path::Path;

use kiln_pipeline::meter::StageUsage;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::Result;
use crate::db::Db;

/// An open ledger.
#[derive(Debug, Clone)]
pub struct Ledger {
    db: Db,
}

/// One stage attempt as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageRow {
    pub stage: String,
    pub attempt: i64,
    /// `succeeded`, `failed`, `cached` (output reused) or `running`.
    pub state: String,
    pub device: String,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub gpu_s: f64,
    pub bytes_read: i64,
    pub bytes_written: i64,
    pub summary: Option<serde_json::Value>,
    pub error: Option<String>,
    /// Busy GPU-seconds (NVML), when measured.
    #[serde(default)]
    pub gpu_busy_s: Option<f64>,
    /// GPU name, on GPU stages.
    #[serde(default)]
    pub device_name: Option<String>,
    /// GPU total memory, bytes, on GPU stages.
    #[serde(default)]
    pub device_memory_bytes: Option<i64>,
    /// The content key and what it was made of (`kiln why`), on attempts that computed one.
    #[serde(default)]
    pub stage_key: Option<String>,
    #[serde(default)]
    pub key_recipe: Option<serde_json::Value>,
    /// The slot when the attempt held part of a GPU (`H100:1g.10gb`, `0.5`); its `gpu_s` is then
    /// GPU-equivalent seconds (slot seconds × the slot's fraction). `None`: a whole GPU or the CPU.
    #[serde(default)]
    pub gpu_slot: Option<String>,
}

/// One job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub input: String,
    pub output: String,
    pub state: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Ledger {
    /// Open (creating if missing) the SQLite ledger at `path`.
    ///
    /// # Errors
    /// [`crate::Error::Ledger`] naming the path when the file cannot be created or is not a Kiln
    /// ledger; [`crate::Error::Io`] when its folder cannot be created.
    pub async fn open(path: &Path) -> Result<Ledger> {
        Ok(Ledger {
            db: Db::open_sqlite(path).await?,
        })
    }

    /// Open the ledger at `target`: an SQLite path or a `postgres://` URL (see [`Db::open`]).
    ///
    /// # Errors
    /// As [`Db::open`].
    pub async fn connect(target: &str) -> Result<Ledger> {
        Ok(Ledger {
            db: Db::open(target).await?,
        })
    }

    /// Open an existing ledger (never creates an SQLite file; see [`Db::open_existing`]).
    ///
    /// # Errors
    /// As [`Db::open_existing`].
    pub async fn connect_existing(target: &str) -> Result<Ledger> {
        Ok(Ledger {
            db: Db::open_existing(target).await?,
        })
    }

    /// The ledger in an already open database (the queue's).
    pub fn with_db(db: Db) -> Ledger {
        Ledger { db }
    }

    /// The database behind this ledger.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The ledger's file path or URL (password redacted), for messages.
    pub fn path(&self) -> &str {
        self.db.shown()
    }

    fn err(&self) -> impl Fn(sqlx::Error) -> crate::Error + '_ {
        self.db.err()
    }

    /// Record a new running job.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn start_job(
        &self,
        id: &str,
        name: &str,
        kind: &str,
        input: &str,
        output: &str,
        spec: &str,
    ) -> Result<()> {
        sqlx::query("INSERT INTO jobs (id, name, kind, input, output, spec, state, created_at) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7)")
            .bind(id).bind(name).bind(kind).bind(input).bind(output).bind(spec).bind(now())
            .execute(&self.db.pool).await.map_err(self.err())?;
        Ok(())
    }

    /// Record job `id` as running unless the ledger has it already (a queued job's first stage
    /// attempt, on whichever worker claims it).
    ///
    /// # Errors
    /// [`crate::Error::Ledger`].
    pub async fn ensure_job(
        &self,
        id: &str,
        name: &str,
        kind: &str,
        input: &str,
        output: &str,
        spec: &str,
    ) -> Result<()> {
        sqlx::query("INSERT INTO jobs (id, name, kind, input, output, spec, state, created_at) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7) ON CONFLICT (id) DO NOTHING")
            .bind(id).bind(name).bind(kind).bind(input).bind(output).bind(spec).bind(now())
            .execute(&self.db.pool).await.map_err(self.err())?;
        Ok(())
    }

    /// Mark a job finished (`succeeded` or `failed` with its error).
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn finish_job(&self, id: &str, error: Option<&str>) -> Result<()> {
        let state = if error.is_some() {
            "failed"
        } else {
            "succeeded"
        };
        sqlx::query("UPDATE jobs SET state = $1, finished_at = $2, error = $3 WHERE id = $4")
            .bind(state)
            .bind(now())
            .bind(error)
            .bind(id)
            .execute(&self.db.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    /// Record the start of a stage attempt; returns its row id.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn start_stage(&self, job_id: &str, stage: &str, device: &str) -> Result<i64> {
        let attempt: i64 =
            sqlx::query("SELECT COUNT(*) FROM stage_attempts WHERE job_id = $1 AND stage = $2")
                .bind(job_id)
                .bind(stage)
                .fetch_one(&self.db.pool)
                .await
                .map_err(self.err())?
                .get::<i64, _>(0)
                + 1;
        let row = sqlx::query("INSERT INTO stage_attempts (job_id, stage, attempt, state, device, started_at) VALUES ($1, $2, $3, 'running', $4, $5) RETURNING id")
            .bind(job_id).bind(stage).bind(attempt).bind(device).bind(now())
            .fetch_one(&self.db.pool).await.map_err(self.err())?;
        Ok(row.get::<i64, _>(0))
    }

    /// Record the end of a stage attempt.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn finish_stage(
        &self,
        attempt_id: i64,
        state: &str,
        key: Option<&str>,
        usage: &StageUsage,
        summary: Option<&serde_json::Value>,
        error: Option<&str>,
    ) -> Result<()> {
        sqlx::query("UPDATE stage_attempts SET state = $1, stage_key = $2, device = $3, wall_s = $4, cpu_s = $5, gpu_s = $6, bytes_read = $7, bytes_written = $8, summary = $9, error = $10, gpu_busy_s = CAST($11 AS DOUBLE PRECISION), device_name = $12, device_memory_bytes = $13, gpu_slot = $14 WHERE id = $15")
            .bind(state).bind(key).bind(&usage.device).bind(usage.wall_s).bind(usage.cpu_s).bind(usage.gpu_s)
            .bind(usage.bytes_read as i64).bind(usage.bytes_written as i64)
            .bind(summary.map(|s| s.to_string())).bind(error)
            .bind(crate::db::nullable_f64(usage.gpu_busy_s)).bind(usage.device_name.as_deref())
            .bind(usage.device_memory_bytes.map(|b| b as i64))
            .bind(usage.gpu_slot.as_deref())
            .bind(attempt_id)
            .execute(&self.db.pool).await.map_err(self.err())?;
        Ok(())
    }

    /// Record what attempt `attempt_id`'s content key was made of.
    ///
    /// # Errors
    /// [`crate::Error::Ledger`].
    pub async fn set_key_recipe(
        &self,
        attempt_id: i64,
        recipe: &kiln_pipeline::dag::KeyRecipe,
    ) -> Result<()> {
        let json = serde_json::to_string(recipe).expect("recipe serialises");
        sqlx::query("UPDATE stage_attempts SET key_recipe = $1 WHERE id = $2")
            .bind(json)
            .bind(attempt_id)
            .execute(&self.db.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    /// The job `id`.
    ///
    /// # Errors
    /// [`crate::Error::NoSuchJob`] when absent; [`Error::Ledger`].
    pub async fn job(&self, id: &str) -> Result<JobRow> {
        let row = sqlx::query("SELECT id, name, kind, input, output, state, created_at, finished_at, error FROM jobs WHERE id = $1")
            .bind(id).fetch_optional(&self.db.pool).await.map_err(self.err())?
            .ok_or_else(|| crate::Error::NoSuchJob { job_id: id.into(), path: self.path().to_string() })?;
        Ok(job_row(&row))
    }

    /// All jobs, newest first.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn jobs(&self) -> Result<Vec<JobRow>> {
        let rows = sqlx::query("SELECT id, name, kind, input, output, state, created_at, finished_at, error FROM jobs ORDER BY created_at DESC, id DESC")
            .fetch_all(&self.db.pool).await.map_err(self.err())?;
        Ok(rows.iter().map(job_row).collect())
    }

    /// Jobs created in `[since, until)` (RFC 3339 UTC strings, either bound optional), oldest
    /// first, each with its queue team (`local` for `kiln run` jobs, which have none).
    ///
    /// # Errors
    /// [`crate::Error::Ledger`].
    pub async fn jobs_between(
        &self,
        since: Option<&str>,
        until: Option<&str>,
    ) -> Result<Vec<(JobRow, String)>> {
        let rows = sqlx::query(
            "SELECT j.id, j.name, j.kind, j.input, j.output, j.state, j.created_at, j.finished_at, j.error, \
               COALESCE(q.team, 'local') AS team \
             FROM jobs j LEFT JOIN queue_jobs q ON q.id = j.id \
             WHERE ($1 IS NULL OR j.created_at >= $1) AND ($2 IS NULL OR j.created_at < $2) \
             ORDER BY j.created_at, j.id",
        )
        .bind(since)
        .bind(until)
        .fetch_all(&self.db.pool)
        .await
        .map_err(self.err())?;
        Ok(rows
            .iter()
            .map(|r| (job_row(r), r.get::<String, _>("team")))
            .collect())
    }

    /// The team (`local` for a job run with `kiln run`) and the budget (`kiln submit
    /// --budget-usd`, `None` without one) of job `id`.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn job_team_and_budget(&self, id: &str) -> Result<(String, Option<f64>)> {
        let row = sqlx::query(
            "SELECT COALESCE(q.team, 'local') AS team, q.budget_usd AS budget_usd \
             FROM jobs j LEFT JOIN queue_jobs q ON q.id = j.id WHERE j.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.db.pool)
        .await
        .map_err(self.err())?;
        Ok(row.map_or(("local".to_string(), None), |r| {
            (r.get("team"), r.get("budget_usd"))
        }))
    }

    /// The stage attempts of job `id`, in run order.
    ///
    /// # Errors
    /// [`Error::Ledger`].
    pub async fn stages(&self, id: &str) -> Result<Vec<StageRow>> {
        let rows = sqlx::query("SELECT stage, attempt, state, device, wall_s, cpu_s, gpu_s, bytes_read, bytes_written, summary, error, gpu_busy_s, device_name, device_memory_bytes, stage_key, key_recipe, gpu_slot FROM stage_attempts WHERE job_id = $1 ORDER BY id")
            .bind(id).fetch_all(&self.db.pool).await.map_err(self.err())?;
        Ok(rows
            .iter()
            .map(|r| StageRow {
                stage: r.get("stage"),
                attempt: r.get("attempt"),
                state: r.get("state"),
                device: r.get("device"),
                wall_s: r.get("wall_s"),
                cpu_s: r.get("cpu_s"),
                gpu_s: r.get("gpu_s"),
                bytes_read: r.get("bytes_read"),
                bytes_written: r.get("bytes_written"),
                summary: r
                    .get::<Option<String>, _>("summary")
                    .and_then(|s: String| serde_json::from_str(&s).ok()),
                error: r.get("error"),
                gpu_busy_s: r.get("gpu_busy_s"),
                device_name: r.get("device_name"),
                device_memory_bytes: r.get("device_memory_bytes"),
                stage_key: r.get("stage_key"),
                key_recipe: r
                    .get::<Option<String>, _>("key_recipe")
                    .and_then(|s: String| serde_json::from_str(&s).ok()),
                gpu_slot: r.get("gpu_slot"),
            })
            .collect())
    }

    /// Record the estimate made for job `id` when it was run or submitted (see
    /// `crate::estimate::RecordedEstimate`), replacing any earlier one.
    ///
    /// # Errors
    /// [`crate::Error::Ledger`].
    pub async fn record_estimate(&self, id: &str, estimate: &serde_json::Value) -> Result<()> {
        sqlx::query("UPDATE jobs SET estimate = $1 WHERE id = $2")
            .bind(estimate.to_string())
            .bind(id)
            .execute(&self.db.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    /// The estimate recorded for job `id`; `None` when none was (older jobs) or it does not parse.
    ///
    /// # Errors
    /// [`crate::Error::Ledger`].
    pub async fn estimate(&self, id: &str) -> Result<Option<serde_json::Value>> {
        let row = sqlx::query("SELECT estimate FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.db.pool)
            .await
            .map_err(self.err())?;
        Ok(row
            .and_then(|r| r.get::<Option<String>, _>("estimate"))
            .and_then(|s| serde_json::from_str(&s).ok()))
    }
}

fn job_row(r: &AnyRow) -> JobRow {
    JobRow {
        id: r.get("id"),
        name: r.get("name"),
        kind: r.get("kind"),
        input: r.get("input"),
        output: r.get("output"),
        state: r.get("state"),
        created_at: r.get("created_at"),
        finished_at: r.get("finished_at"),
        error: r.get("error"),
    }
}

/// Default ledger path: `$KILN_DB`, else `<kiln home>/ledger.sqlite`.
pub fn default_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("KILN_DB") {
        return p.into();
    }
    crate::spec::kiln_home().join("ledger.sqlite")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ledger written before the GPU columns existed gets them on open and keeps its rows; a
    /// GPU stage's busy seconds, device name and memory round-trip.
    #[tokio::test]
    async fn old_ledgers_gain_the_gpu_columns_and_gpu_figures_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("old.sqlite");
        {
            use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
            use std::str::FromStr;
            let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
                .unwrap()
                .create_if_missing(true);
            let pool = SqlitePoolOptions::new().connect_with(opts).await.unwrap();
            // The ledger as written before migrations existed: the first schema, no
            // `_sqlx_migrations` table, no GPU columns.
            sqlx::raw_sql(include_str!("../migrations/sqlite/0001_ledger.sql"))
                .execute(&pool)
                .await
                .unwrap();
            sqlx::query("INSERT INTO jobs (id, name, kind, input, output, spec, state, created_at) VALUES ('old', 'n', 'capture', 'i', 'o', '{}', 'succeeded', '2026-01-01T00:00:00Z')")
                .execute(&pool).await.unwrap();
            sqlx::query("INSERT INTO stage_attempts (job_id, stage, attempt, state, device, started_at, wall_s) VALUES ('old', 'train', 1, 'succeeded', 'cpu', '2026-01-01T00:00:00Z', 3.5)")
                .execute(&pool).await.unwrap();
            pool.close().await;
        }
        let l = Ledger::open(&path).await.unwrap();
        let old = l.stages("old").await.unwrap();
        assert_eq!((old[0].wall_s, old[0].gpu_busy_s), (3.5, None));
        l.start_job("gpu", "fox", "capture", "in", "out", "{}")
            .await
            .unwrap();
        let a = l.start_stage("gpu", "train", "cuda:0").await.unwrap();
        let usage = StageUsage {
            device: "cuda:0".into(),
            wall_s: 10.0,
            gpu_s: 10.0,
            gpu_busy_s: Some(7.25),
            device_name: Some("NVIDIA H200".into()),
            device_memory_bytes: Some(150_000_000_000),
            ..Default::default()
        };
        l.finish_stage(a, "succeeded", Some("k"), &usage, None, None)
            .await
            .unwrap();
        let rows = l.stages("gpu").await.unwrap();
        assert_eq!(rows[0].gpu_busy_s, Some(7.25));
        assert_eq!(rows[0].device_name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(rows[0].device_memory_bytes, Some(150_000_000_000));
        // Opening again does not try to add the columns twice.
        drop(l);
        Ledger::open(&path).await.unwrap();
    }

    #[tokio::test]
    async fn stage_attempts_round_trip_with_attempt_numbers() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::open(&d.path().join("l.sqlite")).await.unwrap();
        l.start_job("j1", "fox", "capture", "in", "out", "{}")
            .await
            .unwrap();
        let usage = StageUsage {
            device: "cpu".into(),
            wall_s: 1.5,
            cpu_s: 2.5,
            gpu_s: 0.0,
            bytes_read: 10,
            bytes_written: 20,
            ..Default::default()
        };
        let a = l.start_stage("j1", "ingest", "cpu").await.unwrap();
        l.finish_stage(a, "failed", None, &usage, None, Some("boom"))
            .await
            .unwrap();
        let b = l.start_stage("j1", "ingest", "cpu").await.unwrap();
        l.finish_stage(
            b,
            "succeeded",
            Some("k"),
            &usage,
            Some(&serde_json::json!({"frames": 3})),
            None,
        )
        .await
        .unwrap();
        l.finish_job("j1", None).await.unwrap();
        let rows = l.stages("j1").await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].attempt, rows[1].attempt), (1, 2));
        assert_eq!(rows[1].summary.as_ref().unwrap()["frames"], 3);
        assert_eq!(rows[1].cpu_s, 2.5);
        assert_eq!(l.job("j1").await.unwrap().state, "succeeded");
        // Reopening keeps the data (durable file, idempotent schema).
        drop(l);
        let l = Ledger::open(&d.path().join("l.sqlite")).await.unwrap();
        assert_eq!(l.jobs().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn unknown_job_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::open(&d.path().join("l.sqlite")).await.unwrap();
        let e = l.job("nope").await.unwrap_err().to_string();
        assert!(
            e.contains("nope") && e.contains("kiln report --list"),
            "{e}"
        );
    }
}
