//! The queue's claim path: claim + commit of one single-stage job, on the SQLite default and, when
//! `KILN_TEST_POSTGRES_URL` names a server, on PostgreSQL (a fresh database). Throughput in claims/s.
//!
//! `cargo bench -p kiln-jobs --bench claim`

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_jobs::queue::{NewJob, Queue, RetryPolicy};

const NOW: RetryPolicy = RetryPolicy {
    base: Duration::ZERO,
    max: Duration::ZERO,
    infra_base: Duration::ZERO,
    infra_max: Duration::ZERO,
    max_infra_faults: 12,
};

fn job(i: u64) -> NewJob {
    NewJob {
        id: format!("bench-{i}"),
        team: "bench".into(),
        name: "bench".into(),
        kind: "mesh".into(),
        input: "in".into(),
        output: "out".into(),
        spec: String::new(),
        priority: 0,
        max_attempts: 3,
        budget_usd: None,
        stages: vec![("ingest".into(), false)],
    }
}

async fn fresh_postgres(url: &str) -> Queue {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let name = format!("kiln_bench_{}", std::process::id());
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name}"
    )))
    .execute(&mut conn)
    .await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = url.rsplit_once('/').unwrap().0;
    Queue::open(&format!("{base}/{name}")).await.unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut queues = vec![(
        "sqlite",
        rt.block_on(Queue::open(dir.path().join("q.sqlite").to_str().unwrap()))
            .unwrap(),
    )];
    if let Ok(url) = std::env::var("KILN_TEST_POSTGRES_URL") {
        queues.push(("postgres", rt.block_on(fresh_postgres(&url))));
    }
    let mut g = c.benchmark_group("queue");
    g.throughput(Throughput::Elements(1));
    for (name, q) in queues {
        let mut next = 0u64;
        g.bench_function(format!("claim_and_commit/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    for _ in 0..iters {
                        q.submit(&job(next)).await.unwrap();
                        next += 1;
                    }
                    let t = Instant::now();
                    for _ in 0..iters {
                        let c = q
                            .claim("bench", true, Duration::from_secs(60), &NOW)
                            .await
                            .unwrap()
                            .unwrap();
                        q.complete(&c.lease, "k", &serde_json::json!({}))
                            .await
                            .unwrap();
                    }
                    t.elapsed()
                })
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
