//! Queue behaviour on SQLite, and on PostgreSQL when `KILN_TEST_POSTGRES_URL` names a server
//! (`.ci/run` starts one; under `CI=true` its absence fails the tests instead of skipping them).

use std::time::Duration;

use super::*;
use crate::db::Backend;

/// A fresh database per backend: a temporary SQLite file, and a new PostgreSQL database on the
/// test server when there is one. The guard keeps the temporary folder alive.
async fn backends() -> Vec<(Queue, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.sqlite");
    let mut out = vec![(Queue::open(path.to_str().unwrap()).await.unwrap(), dir)];
    match std::env::var("KILN_TEST_POSTGRES_URL") {
        Ok(url) => out.push((fresh_postgres(&url).await, tempfile::tempdir().unwrap())),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but KILN_TEST_POSTGRES_URL is not: .ci/run starts PostgreSQL")
        }
        Err(_) => eprintln!("KILN_TEST_POSTGRES_URL unset: queue tests run on SQLite only"),
    }
    out
}

/// A new, empty database on the server of `url` (so tests do not see each other's jobs).
pub(crate) async fn fresh_postgres(url: &str) -> Queue {
    Queue::with_db(fresh_postgres_db(url).await)
}

/// A new, empty, migrated database on the server of `url`; shared with the API tests.
pub(crate) async fn fresh_postgres_db(url: &str) -> crate::db::Db {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let name = format!("kiln_t_{}_{:x}", std::process::id(), rand_suffix());
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    crate::db::Db::open(&format!("{base}/{name}"))
        .await
        .unwrap()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    t ^ (N.fetch_add(1, Ordering::Relaxed) << 48)
}

pub(crate) fn job(id: &str, team: &str, priority: i64, stages: &[(&str, bool)]) -> NewJob {
    NewJob {
        id: id.into(),
        team: team.into(),
        name: id.into(),
        kind: "mesh".into(),
        input: "in".into(),
        output: "out".into(),
        spec: "name = 'x'".into(),
        priority,
        max_attempts: 3,
        budget_usd: None,
        stages: stages.iter().map(|(s, g)| (s.to_string(), *g)).collect(),
    }
}

pub(crate) const NOW: RetryPolicy = RetryPolicy {
    base: Duration::ZERO,
    max: Duration::ZERO,
    infra_base: Duration::ZERO,
    infra_max: Duration::ZERO,
    max_infra_faults: 12,
};
const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn stages_run_in_order_and_priority_and_age_pick_the_job() {
    for (q, _g) in backends().await {
        q.submit(&job("low", "a", 0, &[("ingest", false), ("tile", false)]))
            .await
            .unwrap();
        q.submit(&job("high", "a", 5, &[("ingest", false)]))
            .await
            .unwrap();
        let c = q.claim("w1", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!((c.lease.job_id.as_str(), c.lease.token), ("high", 1));
        q.complete(&c.lease, "k-high", &serde_json::json!({"n": 1}))
            .await
            .unwrap();
        assert_eq!(q.job("high", None).await.unwrap().state, "succeeded");

        let c = q.claim("w1", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(
            (c.lease.job_id.as_str(), c.lease.stage.as_str()),
            ("low", "ingest")
        );
        // `tile` waits for `ingest`: nothing else is claimable meanwhile.
        assert!(q.claim("w2", true, TTL, &NOW).await.unwrap().is_none());
        assert_eq!(q.job("low", None).await.unwrap().state, "running");
        q.complete(&c.lease, "k1", &serde_json::json!({}))
            .await
            .unwrap();
        let c = q.claim("w2", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(c.lease.stage, "tile");
        assert_eq!(c.stages[0].stage_key.as_deref(), Some("k1"));
        q.complete(&c.lease, "k2", &serde_json::json!({}))
            .await
            .unwrap();
        let j = q.job("low", None).await.unwrap();
        assert_eq!(j.state, "succeeded");
        assert!(j.finished_at.is_some());
        let kinds: Vec<String> = q
            .events("low", 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                "submitted",
                "claimed",
                "stage_succeeded",
                "claimed",
                "stage_succeeded",
                "succeeded"
            ]
        );
        // Duplicate ids and empty jobs are refused.
        let e = q
            .submit(&job("low", "a", 0, &[("x", false)]))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("already queued"), "{e}");
        let e = q.submit(&job("empty", "a", 0, &[])).await.unwrap_err();
        assert!(e.to_string().contains("no stages"), "{e}");
    }
}

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_the_stale_worker_cannot_commit() {
    for (q, _g) in backends().await {
        q.submit(&job("j", "a", 0, &[("train", true)]))
            .await
            .unwrap();
        let stale = q
            .claim("w-old", true, Duration::from_millis(200), &NOW)
            .await
            .unwrap()
            .unwrap()
            .lease;
        // Still held: nobody else gets it.
        assert!(q.claim("w-new", true, TTL, &NOW).await.unwrap().is_none());
        tokio::time::sleep(Duration::from_millis(350)).await;
        // Expired: the stale worker's heartbeat says so, and the next claim takes it over.
        assert_eq!(q.heartbeat(&stale, TTL).await.unwrap(), Heartbeat::Lost);
        let fresh = q.claim("w-new", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!((fresh.lease.attempt, fresh.lease.token), (2, 2));
        let e = q
            .complete(&stale, "stale-key", &serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::LeaseLost { token: 1, .. }), "{e}");
        assert_eq!(
            q.heartbeat(&fresh.lease, TTL).await.unwrap(),
            Heartbeat::Held {
                cancel_requested: false
            }
        );
        q.complete(&fresh.lease, "good-key", &serde_json::json!({}))
            .await
            .unwrap();
        let s = &q.stages("j").await.unwrap()[0];
        assert_eq!(
            (s.state.as_str(), s.stage_key.as_deref()),
            ("succeeded", Some("good-key"))
        );
        let states: Vec<(i64, String)> = q
            .attempts("j")
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.token, a.state))
            .collect();
        // Attempt 1's heartbeat came after its lease ran out: refused, so recorded `rejected`
        // (before anyone reclaimed the stage, which would have closed it `lost`).
        assert_eq!(
            states,
            [(1, "rejected".to_string()), (2, "succeeded".to_string())]
        );
        let kinds: Vec<String> = q
            .events("j", 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert!(kinds.contains(&"rejected".to_string()), "{kinds:?}");
    }
}

#[tokio::test]
async fn failures_back_off_then_dead_letter_with_the_error_history() {
    for (q, _g) in backends().await {
        let mut j = job("j", "a", 0, &[("ingest", false)]);
        j.max_attempts = 2;
        q.submit(&j).await.unwrap();
        let slow = RetryPolicy {
            base: Duration::from_secs(60),
            max: Duration::from_secs(60),
            ..NOW
        };
        let c = q.claim("w", true, TTL, &slow).await.unwrap().unwrap();
        let before = now_ms();
        let Failure::Retry { not_before } = q
            .fail(&c.lease, "disk full", Fault::Stage, &slow)
            .await
            .unwrap()
        else {
            panic!("first failure of two allowed should retry");
        };
        // Equal jitter: between half and all of the 60 s first delay.
        assert!(
            not_before >= before + 30_000 && not_before <= now_ms() + 60_000,
            "{}",
            not_before - before
        );
        assert!(
            q.claim("w", true, TTL, &slow).await.unwrap().is_none(),
            "claimed during backoff"
        );
        // Skip the wait: make it due now.
        sqlx::query("UPDATE queue_stages SET not_before = 0")
            .execute(&q.db().pool)
            .await
            .unwrap();
        let c = q.claim("w", true, TTL, &slow).await.unwrap().unwrap();
        assert_eq!(c.lease.attempt, 2);
        assert_eq!(
            q.fail(&c.lease, "disk still full", Fault::Stage, &slow)
                .await
                .unwrap(),
            Failure::Dead
        );
        let jr = q.job("j", None).await.unwrap();
        assert_eq!(jr.state, "dead");
        assert!(
            jr.error.as_deref().unwrap().contains("2 failed attempts"),
            "{jr:?}"
        );
        let errors: Vec<Option<String>> = q
            .attempts("j")
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.error)
            .collect();
        assert_eq!(
            errors,
            [
                Some("disk full".to_string()),
                Some("disk still full".to_string())
            ]
        );
        assert!(q.claim("w", true, TTL, &slow).await.unwrap().is_none());

        // A job's own error fails it at once.
        q.submit(&job("bad", "a", 0, &[("ingest", false), ("tile", false)]))
            .await
            .unwrap();
        let c = q.claim("w", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(
            q.fail(&c.lease, "transforms.json: bad field", Fault::Job, &NOW)
                .await
                .unwrap(),
            Failure::Failed
        );
        assert_eq!(q.job("bad", None).await.unwrap().state, "failed");
        let st: Vec<String> = q
            .stages("bad")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.state)
            .collect();
        assert_eq!(st, ["failed", "cancelled"]);
    }
}

#[tokio::test]
async fn infrastructure_faults_have_their_own_longer_budget_and_cost_no_attempt() {
    for (q, _g) in backends().await {
        let mut j = job("j", "a", 0, &[("ingest", false)]);
        j.max_attempts = 1;
        q.submit(&j).await.unwrap();
        // The fifth infrastructure fault dead-letters (as the job's N-th failed attempt does).
        let policy = RetryPolicy {
            max_infra_faults: 5,
            ..NOW
        };
        // Three storage outages and a lost lease: each retried, none counted against the job's
        // single attempt.
        for n in 1..=3 {
            let c = q.claim("w", true, TTL, &policy).await.unwrap().unwrap();
            let f = q
                .fail(
                    &c.lease,
                    "object store s3://b: connection refused",
                    Fault::Infrastructure,
                    &policy,
                )
                .await
                .unwrap();
            assert!(matches!(f, Failure::Retry { .. }), "fault {n}: {f:?}");
        }
        let c = q
            .claim("w", true, Duration::from_millis(1), &policy)
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(q.reap_expired(&policy).await.unwrap(), 1);
        // The fifth is a fault too many: dead-lettered, saying why.
        let c2 = q.claim("w", true, TTL, &policy).await.unwrap().unwrap();
        assert_ne!(c2.lease.token, c.lease.token);
        let f = q
            .fail(
                &c2.lease,
                "database unreachable",
                Fault::Infrastructure,
                &policy,
            )
            .await
            .unwrap();
        assert_eq!(f, Failure::Dead);
        let jr = q.job("j", None).await.unwrap();
        assert!(
            jr.error
                .as_deref()
                .unwrap()
                .contains("5 infrastructure faults"),
            "{jr:?}"
        );
        let states: Vec<String> = q
            .attempts("j")
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.state)
            .collect();
        assert_eq!(states, ["failed", "failed", "failed", "lost", "failed"]);
        let infra: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM queue_attempts WHERE job_id = 'j' AND fault = 'infrastructure'",
        )
        .fetch_one(&q.db().pool)
        .await
        .unwrap();
        assert_eq!(infra, 4);

        // Infrastructure faults do not use up the job's attempts: after two of them, the
        // stage's own first failure is retried (max_attempts 2).
        let mut k = job("k", "a", 0, &[("ingest", false)]);
        k.max_attempts = 2;
        q.submit(&k).await.unwrap();
        for _ in 0..2 {
            let c = q.claim("w", true, TTL, &policy).await.unwrap().unwrap();
            q.fail(&c.lease, "S3 down", Fault::Infrastructure, &policy)
                .await
                .unwrap();
        }
        let c = q.claim("w", true, TTL, &policy).await.unwrap().unwrap();
        let f = q
            .fail(&c.lease, "CUDA error", Fault::Stage, &policy)
            .await
            .unwrap();
        assert!(matches!(f, Failure::Retry { .. }), "{f:?}");
    }
}

#[tokio::test]
async fn cancel_is_scoped_to_the_team_and_stops_running_stages_at_the_heartbeat() {
    for (q, _g) in backends().await {
        q.submit(&job("queued", "a", 0, &[("ingest", false)]))
            .await
            .unwrap();
        q.submit(&job(
            "running",
            "a",
            0,
            &[("ingest", false), ("tile", false)],
        ))
        .await
        .unwrap();
        // Another team can neither see nor cancel it.
        assert!(matches!(
            q.cancel("queued", Some("b")).await.unwrap_err(),
            Error::NotInQueue { .. }
        ));
        assert!(q.job("queued", Some("b")).await.is_err());
        assert_eq!(q.jobs(Some("b"), None, 100).await.unwrap().len(), 0);
        assert_eq!(q.jobs(Some("a"), None, 100).await.unwrap().len(), 2);

        let c = q.claim("w", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(c.lease.job_id, "queued", "older job first");
        q.complete(&c.lease, "k", &serde_json::json!({}))
            .await
            .unwrap();
        let c = q.claim("w", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(c.lease.job_id, "running");
        assert_eq!(
            q.cancel("running", Some("a")).await.unwrap(),
            CancelOutcome::Requested
        );
        assert_eq!(
            q.heartbeat(&c.lease, TTL).await.unwrap(),
            Heartbeat::Held {
                cancel_requested: true
            }
        );
        q.cancelled(&c.lease).await.unwrap();
        assert_eq!(q.job("running", None).await.unwrap().state, "cancelled");
        let st: Vec<String> = q
            .stages("running")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.state)
            .collect();
        assert_eq!(st, ["cancelled", "cancelled"]);
        assert_eq!(
            q.cancel("queued", None).await.unwrap(),
            CancelOutcome::AlreadyFinished
        );

        q.submit(&job("never", "a", 0, &[("ingest", false)]))
            .await
            .unwrap();
        assert_eq!(
            q.cancel("never", None).await.unwrap(),
            CancelOutcome::Cancelled
        );
        assert!(q.claim("w", true, TTL, &NOW).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn team_limits_and_gpu_slots_gate_claims() {
    for (q, _g) in backends().await {
        q.set_team_limit("a", 1).await.unwrap();
        q.submit(&job("a1", "a", 9, &[("ingest", false)]))
            .await
            .unwrap();
        q.submit(&job("a2", "a", 9, &[("ingest", false)]))
            .await
            .unwrap();
        q.submit(&job("b1", "b", 0, &[("train", true)]))
            .await
            .unwrap();
        let a = q.claim("w", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(a.lease.job_id, "a1");
        // Team a is at its limit; b's stage needs a GPU this worker does not have free.
        assert!(q.claim("w", false, TTL, &NOW).await.unwrap().is_none());
        let b = q.claim("w", true, TTL, &NOW).await.unwrap().unwrap();
        assert_eq!(b.lease.job_id, "b1");
        q.complete(&a.lease, "k", &serde_json::json!({}))
            .await
            .unwrap();
        assert_eq!(
            q.claim("w", false, TTL, &NOW)
                .await
                .unwrap()
                .unwrap()
                .lease
                .job_id,
            "a2"
        );
        let d = q.depth().await.unwrap();
        assert_eq!((d.running_stages, d.queued_stages), (2, 0));
    }
}

#[tokio::test]
async fn concurrent_claims_take_each_stage_exactly_once() {
    for (q, _g) in backends().await {
        for i in 0..40 {
            q.submit(&job(&format!("j{i:02}"), "a", 0, &[("ingest", false)]))
                .await
                .unwrap();
        }
        let mut tasks = Vec::new();
        for w in 0..4 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                while let Some(c) = q.claim(&format!("w{w}"), true, TTL, &NOW).await.unwrap() {
                    q.complete(&c.lease, "k", &serde_json::json!({}))
                        .await
                        .unwrap();
                    mine.push(c.lease.job_id);
                }
                mine
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        let expected: Vec<String> = (0..40).map(|i| format!("j{i:02}")).collect();
        assert_eq!(all, expected);
        assert_eq!(
            q.jobs(None, Some("succeeded"), 100).await.unwrap().len(),
            40
        );
    }
}

/// Load: 1,000 two-stage jobs, 4 workers (each its own connection pool, as separate processes
/// would have), claim + commit with no stage work. Every job completes exactly once; claims/s
/// and claim latency percentiles are printed (`--nocapture`); the claim path's benchmark is
/// `cargo bench -p kiln-jobs --bench claim`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_1000_jobs_on_4_workers_complete_exactly_once() {
    for (q, g) in backends().await {
        let target = match q.db().backend() {
            Backend::Sqlite => g.path().join("queue.sqlite").to_string_lossy().into_owned(),
            Backend::Postgres => postgres_url_of(&q).await,
        };
        for i in 0..1000 {
            q.submit(&job(
                &format!("j{i:04}"),
                "a",
                0,
                &[("ingest", false), ("tile", false)],
            ))
            .await
            .unwrap();
        }
        let start = std::time::Instant::now();
        let mut tasks = Vec::new();
        for w in 0..4 {
            let target = target.clone();
            tasks.push(tokio::spawn(async move {
                let q = Queue::open(&target).await.unwrap();
                let mut latencies = Vec::new();
                let mut committed = Vec::new();
                loop {
                    let t = std::time::Instant::now();
                    let Some(c) = q.claim(&format!("w{w}"), true, TTL, &NOW).await.unwrap() else {
                        break;
                    };
                    latencies.push(t.elapsed());
                    q.complete(&c.lease, "k", &serde_json::json!({}))
                        .await
                        .unwrap();
                    committed.push((c.lease.job_id, c.lease.stage));
                }
                (latencies, committed)
            }));
        }
        let mut latencies = Vec::new();
        let mut committed = Vec::new();
        for t in tasks {
            let (l, c) = t.await.unwrap();
            latencies.extend(l);
            committed.extend(c);
        }
        let elapsed = start.elapsed().as_secs_f64();
        committed.sort();
        let n = committed.len();
        committed.dedup();
        assert_eq!(
            (n, committed.len()),
            (2000, 2000),
            "each stage committed exactly once"
        );
        assert_eq!(
            q.jobs(None, Some("succeeded"), 2000).await.unwrap().len(),
            1000
        );
        latencies.sort();
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        eprintln!(
            "load {:?}: 1000 jobs × 2 stages, 4 workers: {:.0} claims/s, claim latency p50 {:.2} ms, p99 {:.2} ms",
            q.db().backend(),
            2000.0 / elapsed,
            pct(0.5).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3
        );
    }
}

/// The URL of the fresh database behind `q` (tests open more pools on it).
async fn postgres_url_of(q: &Queue) -> String {
    let name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&q.db().pool)
        .await
        .unwrap();
    let url = std::env::var("KILN_TEST_POSTGRES_URL").unwrap();
    format!("{}/{name}", url.rsplit_once('/').unwrap().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submissions_never_pass_the_active_job_limit() {
    // Issue 41: the limit was counted, then the job inserted, so concurrent submissions all saw
    // room for one more.
    for (q, _guard) in backends().await {
        let backend = q.db().backend();
        let submits = (0..20).map(|n| {
            let q = q.clone();
            tokio::spawn(async move {
                let j = job(&format!("j{n}"), "art", 0, &[("ingest", false)]);
                q.submit_within(&j, None, Some(3)).await
            })
        });
        let mut queued = 0;
        for answer in futures::future::join_all(submits).await {
            match answer.unwrap() {
                Ok(s) => {
                    assert!(s.created);
                    queued += 1;
                }
                Err(Error::TooManyJobs { limit: 3, .. }) => {}
                Err(e) => panic!("{backend:?}: {e}"),
            }
        }
        assert_eq!(queued, 3, "{backend:?}");
        assert_eq!(q.active_jobs("art").await.unwrap(), 3, "{backend:?}");
        // Another team is not held back by art's limit.
        let other = job("other", "geo", 0, &[("ingest", false)]);
        q.submit_within(&other, None, Some(3)).await.unwrap();
        // A replayed idempotent submission answers with its job even at the limit.
        let keyed = job("keyed", "geo", 0, &[("ingest", false)]);
        q.submit_within(&keyed, Some("k1"), Some(2)).await.unwrap();
        let again = q.submit_within(&keyed, Some("k1"), Some(2)).await.unwrap();
        assert!(!again.created, "{backend:?}");
    }
}

#[tokio::test]
async fn budgets_and_no_budgets_interleave_on_one_connection() {
    // Issue 41: on PostgreSQL a NULL `f64` went out as a `float4` parameter, the connection's
    // prepared statement kept that type, and the next budget failed ("incorrect binary data
    // format in bind parameter 10"). Sequential calls reuse the pool's one idle connection.
    for (q, _guard) in backends().await {
        let backend = q.db().backend();
        for n in 0..6 {
            let mut j = job(&format!("j{n}"), "art", 0, &[("ingest", false)]);
            j.budget_usd = (n % 2 == 1).then_some(0.1 * f64::from(n));
            q.submit(&j)
                .await
                .unwrap_or_else(|e| panic!("{backend:?} #{n}: {e}"));
            assert_eq!(q.job(&j.id, None).await.unwrap().budget_usd, j.budget_usd);
        }
    }
}
