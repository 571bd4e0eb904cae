//! The queue end to end: `kiln submit`, `kiln worker` processes, `kiln jobs`, `kiln report`, on the
//! SQLite default and on PostgreSQL (`KILN_TEST_POSTGRES_URL`, started by `.ci/run`; required
//! under `CI=true`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::{Sandbox, dataset, ok, stderr, stdout};

/// A new empty PostgreSQL database on the test server, or `None` without one (outside CI).
pub fn fresh_postgres() -> Option<String> {
    let url = match std::env::var("KILN_TEST_POSTGRES_URL") {
        Ok(u) => u,
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but KILN_TEST_POSTGRES_URL is not: .ci/run starts PostgreSQL")
        }
        Err(_) => return None,
    };
    let name = format!(
        "kiln_e2e_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let o = Command::new("psql")
        .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!("CREATE DATABASE {name}"))
        .output()
        .expect("psql");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let base = url.rsplit_once('/').unwrap().0;
    Some(format!("{base}/{name}"))
}

pub fn worker(sb: &Sandbox, db: &str, work: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", db, "--work-dir", work])
        .args(extra)
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kiln worker")
}

pub fn job_json(sb: &Sandbox, db: &str, id: &str) -> serde_json::Value {
    let o = sb.kiln(&["jobs", id, "--json", "--db", db]);
    ok(&o);
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn stage_state(doc: &serde_json::Value, stage: &str) -> String {
    doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == stage)
        .map(|s| s["state"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn finish(child: Child) -> std::process::Output {
    let o = child.wait_with_output().unwrap();
    ok(&o);
    o
}

fn manifests(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("manifest"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_queued_job_runs_on_a_worker_and_the_same_inputs_again_run_no_stage() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    // A dataset URL: the queue stores it as written and the worker resolves it on its own disk.
    let input = "dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf";
    let job = sb.job(
        "avocado",
        &format!("name = \"avocado\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"out/a\"\n"),
    );
    let submit = |out: &str| {
        let o = sb.kiln(&[
            "submit",
            job.to_str().unwrap(),
            "--db",
            db,
            "--team",
            "art",
            "--output",
            out,
        ]);
        ok(&o);
        stdout(&o).trim().to_string()
    };
    let first = submit("out/a");
    assert_eq!(job_json(&sb, db, &first)["job"]["state"], "queued");
    assert_eq!(job_json(&sb, db, &first)["job"]["input"], input);
    finish(worker(&sb, db, "w1", &["--drain", "--poll", "0.2"]));
    let doc = job_json(&sb, db, &first);
    assert_eq!(doc["job"]["state"], "succeeded", "{doc:#}");
    assert!(sb.path().join("out/a/tileset.json").is_file());

    // Same inputs, another worker with an empty work directory: every stage but publish is
    // restored from the shared stage cache, and the ledger shows no compute.
    let second = submit("out/b");
    finish(worker(&sb, db, "w2", &["--drain", "--poll", "0.2"]));
    assert_eq!(job_json(&sb, db, &second)["job"]["state"], "succeeded");
    let o = sb.kiln(&["report", &second, "--json", "--db", db]);
    ok(&o);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let states: Vec<(String, String)> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().to_string(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = |s: &str, st: &str| (s.to_string(), st.to_string());
    assert_eq!(
        states,
        [
            expect("ingest", "cached"),
            expect("decimate", "cached"),
            expect("tile", "cached"),
            expect("publish", "succeeded"),
        ]
    );
    assert_eq!(report["totals"]["gpu_s"], 0.0);
    assert!(sb.path().join("out/b/tileset.json").is_file());

    // The same job with the same output again: even publish has nothing to write.
    let third = submit("out/a");
    finish(worker(&sb, db, "w3", &["--drain", "--poll", "0.2"]));
    let o = sb.kiln(&["report", &third, "--json", "--db", db]);
    ok(&o);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let states: Vec<&str> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["cached", "cached", "cached", "cached"],
        "{report:#}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("out/a/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest["job_id"],
        first.as_str(),
        "the first job's publish stands"
    );

    // Another team sees nothing and cannot cancel.
    let o = sb.kiln(&["cancel", &first, "--team", "other", "--db", db]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not in the queue"), "{}", stderr(&o));
}

#[test]
fn a_killed_worker_s_stage_is_rerun_by_another_worker_and_the_job_succeeds_once() {
    let sb = Sandbox::new();
    let sqlite = sb.path().join("queue.sqlite");
    let db = fresh_postgres().unwrap_or_else(|| sqlite.to_string_lossy().into_owned());
    let fox = dataset("capture-fox-instantngp");
    let job = sb.job(
        "fox",
        &format!(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
             [ingest]\nmax_side = 64\n[train]\nsteps = 400\nseed = 3\ncheckpoint_every = 50\n",
            fox.display()
        ),
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", &db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();

    // Worker A takes training and stores a checkpoint in the shared stage cache, then dies
    // without a word (kill -9; its stage process dies with it).
    let mut a = worker(&sb, &db, "wa", &["--lease-ttl", "2", "--poll", "0.2"]);
    // In the submitting team's namespace of the cache (docs/queue.md).
    let team = job_json(&sb, &db, &id)["job"]["team"]
        .as_str()
        .unwrap()
        .to_string();
    let checkpoints = sb
        .path()
        .join(format!("stage-cache/teams/{team}/checkpoints/train"));
    wait_for(
        "worker A to store a training checkpoint",
        Duration::from_secs(240),
        || {
            std::fs::read_dir(&checkpoints)
                .map(|d| d.flatten().any(|k| k.path().join("train.ckpt").is_file()))
                .unwrap_or(false)
        },
    );
    a.kill().unwrap();
    a.wait().unwrap();
    assert_eq!(stage_state(&job_json(&sb, &db, &id), "train"), "running");

    // Worker B (another work directory: ingest comes from the stage cache) retakes the stage
    // once A's lease expires, resumes training from A's checkpoint, and finishes the job.
    let b = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", &db, "--work-dir", "wb", "--drain"])
        .args(["--lease-ttl", "10", "--poll", "0.2", "--retry-base", "0"])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info,kiln_pipeline=info")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(b);
    let log = stderr(&out);
    let resumed_at: usize = log
        .lines()
        .find(|l| l.contains("train: resuming from checkpoint"))
        .and_then(|l| l.split("step=").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("worker B did not resume from a checkpoint:\n{log}"));
    assert!(
        resumed_at >= 50 && resumed_at.is_multiple_of(50),
        "resumed at step {resumed_at}"
    );
    assert!(
        !checkpoints.exists()
            || std::fs::read_dir(&checkpoints)
                .unwrap()
                .flatten()
                .all(|k| !k.path().join("train.ckpt").exists()),
        "the finished stage's checkpoint is still stored"
    );
    let doc = job_json(&sb, &db, &id);
    assert_eq!(
        doc["job"]["state"],
        "succeeded",
        "{doc:#}\n{}",
        stderr(&out)
    );
    let train: Vec<(String, i64)> = doc["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["stage"] == "train")
        .map(|a| {
            (
                a["state"].as_str().unwrap().to_string(),
                a["token"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        train,
        [("lost".to_string(), 1), ("succeeded".to_string(), 2)],
        "{doc:#}"
    );
    assert_eq!(manifests(&sb.path().join("out/fox")), 1, "published once");
    // The ledger charges the lost attempt as wasted time.
    let o = sb.kiln(&["report", &id, "--json", "--db", &db]);
    ok(&o);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let lost = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train" && s["state"] == "failed")
        .unwrap_or_else(|| panic!("no failed train row: {report:#}"))
        .clone();
    assert!(lost["wall_s"].as_f64().unwrap() > 0.5, "{lost:#}");
    assert!(
        lost["error"].as_str().unwrap().contains("lease expired"),
        "{lost:#}"
    );
}

#[test]
fn sigterm_hands_the_running_stage_back_and_cancel_stops_a_running_job() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let fox = dataset("capture-fox-instantngp");
    let job = sb.job(
        "fox",
        &format!(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
             [ingest]\nmax_side = 64\n[train]\nsteps = 3000\nseed = 3\ncheckpoint_every = 20\n",
            fox.display()
        ),
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    let a = worker(&sb, db, "wa", &["--poll", "0.2"]);
    wait_for("training to start", Duration::from_secs(120), || {
        stage_state(&job_json(&sb, db, &id), "train") == "running"
    });
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(a.id() as i32, libc::SIGTERM);
    }
    let out = finish(a);
    assert!(stdout(&out).contains("1 handed back"), "{}", stdout(&out));
    let doc = job_json(&sb, db, &id);
    assert_eq!(stage_state(&doc, "train"), "queued", "{doc:#}");
    let last = doc["attempts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["state"], "released", "{doc:#}");
    assert!(
        sb.path().join("wa").join(&id).join("train.ckpt").is_file(),
        "training checkpointed on SIGTERM"
    );

    // A running job is cancelled at the next heartbeat.
    let b = worker(&sb, db, "wa", &["--poll", "0.2", "--lease-ttl", "2"]);
    wait_for("training to resume", Duration::from_secs(120), || {
        stage_state(&job_json(&sb, db, &id), "train") == "running"
    });
    let o = sb.kiln(&["cancel", &id, "--db", db]);
    ok(&o);
    assert!(stdout(&o).contains("cancel requested"), "{}", stdout(&o));
    wait_for("the cancel to land", Duration::from_secs(60), || {
        job_json(&sb, db, &id)["job"]["state"] == "cancelled"
    });
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(b.id() as i32, libc::SIGTERM);
    }
    finish(b);
    let doc = job_json(&sb, db, &id);
    let states: Vec<String> = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect();
    // ingest, then train, tile, eval and publish cancelled.
    assert_eq!(
        states,
        [
            "succeeded",
            "cancelled",
            "cancelled",
            "cancelled",
            "cancelled"
        ]
    );
}

#[test]
fn a_budget_stops_training_before_the_cap_and_reports_sum_cost_per_team() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let fox = dataset("capture-fox-instantngp");
    let job = sb.job(
        "fox",
        &format!(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
             [ingest]\nmax_side = 64\n[train]\nsteps = 100000\nseed = 3\n",
            fox.display()
        ),
    );
    // A CPU slot costs every core at the catalog's vCPU rate: allow about 15 s (ingest and a few
    // seconds of training).
    let catalog = kiln_jobs::prices::PriceCatalog::default_catalog();
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let per_s = catalog.cpu.vcpu_hour_usd_on_demand / 3600.0 * cores;
    let budget = 15.0 * per_s;
    let o = sb.kiln(&[
        "submit",
        job.to_str().unwrap(),
        "--db",
        db,
        "--team",
        "vfx",
        "--budget-usd",
        &format!("{budget:.12}"),
    ]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    let t = Instant::now();
    finish(worker(
        &sb,
        db,
        "w",
        &["--drain", "--poll", "0.2", "--lease-ttl", "2"],
    ));
    let doc = job_json(&sb, db, &id);
    assert_eq!(doc["job"]["state"], "failed", "{doc:#}");
    let err = doc["job"]["error"].as_str().unwrap();
    assert!(err.contains("budget exhausted: stopped `train`"), "{err}");
    // 100,000 steps take far longer; the stop came within a few heartbeats of the cap.
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());

    // The period report per team, as CSV: one vfx line holding both attempts.
    let o = sb.kiln(&[
        "report",
        "--by",
        "team",
        "--csv",
        "--since",
        "2000-01-01",
        "--db",
        db,
    ]);
    ok(&o);
    let csv = stdout(&o);
    let mut lines = csv.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("key,team,state,attempts,wasted_attempts")
    );
    let vfx: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!((vfx[0], vfx[3], vfx[4]), ("vfx", "2", "1"), "{csv}");
    assert!(lines.next().is_none(), "{csv}");
    // Nothing before the job was created.
    let o = sb.kiln(&["report", "--json", "--until", "2000-01-01", "--db", db]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["lines"].as_array().unwrap().len(), 0);
}

#[test]
fn kiln_why_names_the_parameter_that_made_a_stage_run_again() {
    let sb = Sandbox::new();
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = |ratios: &str| {
        sb.job(
            "avocado",
            &format!(
                "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/a\"\n\
                 [decimate]\nratios = {ratios}\n",
                gltf.display()
            ),
        )
    };
    let o = sb.kiln(&["run", job("[1.0, 0.5]").to_str().unwrap()]);
    ok(&o);
    let first = super::harness::job_id(&o);
    let o = sb.kiln(&["run", job("[1.0, 0.25]").to_str().unwrap()]);
    ok(&o);
    let second = super::harness::job_id(&o);

    let o = sb.kiln(&["why", &second, "decimate"]);
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains(&first), "compares with the earlier run: {out}");
    assert!(
        out.contains("parameter ratios: [1.0,0.5] → [1.0,0.25]"),
        "{out}"
    );
    let o = sb.kiln(&["why", &second, "tile"]);
    ok(&o);
    assert!(
        stdout(&o).contains("input from `decimate` changed"),
        "{}",
        stdout(&o)
    );
    let o = sb.kiln(&["why", &second, "ingest", "--json"]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["changes"].as_array().unwrap().len(), 0, "{doc:#}");
    let o = sb.kiln(&["why", &second, "train"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no recorded key for stage `train`"),
        "{}",
        stderr(&o)
    );
}

/// The real S3 server the outage tests start and stop themselves: `.ci/s3-server.sh PORT DIR`
/// (SeaweedFS; `.ci/run` installs it and sets `KILN_TEST_S3_SERVER`).
pub fn s3_server() -> Option<String> {
    match std::env::var("KILN_TEST_S3_SERVER") {
        Ok(p) => Some(p),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but KILN_TEST_S3_SERVER is not: .ci/run installs SeaweedFS")
        }
        Err(_) => {
            eprintln!("SKIP: KILN_TEST_S3_SERVER not set (run .ci/run)");
            None
        }
    }
}

/// A free port whose next 7 are free too (the S3 server derives its other ports from it), below
/// Linux's ephemeral range (32768 and up): clients retrying during an outage take ephemeral
/// ports, and one of them could otherwise sit on a port the restarted server needs.
pub fn free_port_block() -> u16 {
    // Tests of one process run side by side: each call starts from its own block, so two tests
    // never both find the same block free before either server has bound it.
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = (std::process::id() as u16 % 1_000).wrapping_add(call.wrapping_mul(97)) % 1_500;
    (0..1_500u16)
        .map(|i| 20_000 + ((start + i) % 1_500) * 8)
        .find(|&p| (0..8).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()))
        .expect("a free block of 8 ports below 32000")
}

/// Start the S3 server on `port` keeping its data in `dir` (a restart with the same `dir` keeps
/// what was stored, as a real server does); returns once it answers.
pub fn start_s3(script: &str, port: u16, dir: &Path) -> Child {
    let log_path = dir.with_extension(format!("{port}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    let mut child = Command::new(script)
        .arg(port.to_string())
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the S3 server");
    let url = format!("http://127.0.0.1:{port}/");
    let t = Instant::now();
    while !Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"200"))
    {
        if t.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            panic!(
                "the S3 server on port {port} did not answer; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

/// The environment that points a kiln process at the test S3 server on `port`.
pub fn s3_env(port: u16) -> [(&'static str, String); 5] {
    [
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
    ]
}

/// Create `bucket` (already there is fine: a restarted server keeps its buckets). Retried while
/// the server's storage finishes starting.
pub fn create_bucket(port: u16, bucket: &str) {
    let url = format!("http://127.0.0.1:{port}/{bucket}");
    let mut last = String::new();
    for _ in 0..120 {
        let o = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-X",
                "PUT",
                &url,
            ])
            .output()
            .unwrap();
        last = String::from_utf8_lossy(&o.stdout).into_owned();
        if last == "200" || last == "409" {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("create bucket {bucket}: HTTP {last}");
}

#[test]
fn an_s3_outage_while_a_stage_stores_its_output_is_ridden_out_and_the_job_succeeds() {
    let Some(bin) = s3_server() else { return };
    let port = free_port_block();
    let bucket = "kiln-cache";
    let sb = Sandbox::new();
    let data = sb.path().join("s3-data");
    let mut s3 = start_s3(&bin, port, &data);
    create_bucket(port, bucket);
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = sb.job(
        "avocado",
        &format!(
            "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/a\"\n",
            gltf.display()
        ),
    );
    // The worker starts (and checks it can write the cache) while S3 is up …
    let cache = format!("s3://{bucket}/cache");
    let w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", db, "--work-dir", "w", "--cache", &cache])
        .args(["--poll", "0.2", "--retry-base", "0.5"])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .envs(s3_env(port))
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // … then S3 goes away, and only then does a job arrive: its first stage cannot store its
    // output …
    s3.kill().unwrap();
    s3.wait().unwrap();
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    // … until S3 comes back a few seconds later.
    std::thread::sleep(Duration::from_secs(3));
    let s3 = start_s3(&bin, port, &data);
    create_bucket(port, bucket);
    wait_for("the job to finish", Duration::from_secs(180), || {
        let s = job_json(&sb, db, &id)["job"]["state"].clone();
        s != "queued" && s != "running"
    });
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(w.id() as i32, libc::SIGTERM);
    }
    let out = finish(w);
    let mut s3 = s3;
    let doc = job_json(&sb, db, &id);
    assert_eq!(
        doc["job"]["state"],
        "succeeded",
        "{doc:#}\n{}",
        stderr(&out)
    );
    // Every cacheable stage's output reached the restarted server (in the team's namespace),
    // marker included.
    let team = doc["job"]["team"].as_str().unwrap();
    let o = Command::new("curl")
        .args([
            "-sf",
            &format!("http://127.0.0.1:{port}/{bucket}?list-type=2&prefix=cache/"),
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&o.stdout);
    for stage in ["ingest", "decimate", "tile"] {
        assert!(
            listing.contains(&format!("cache/teams/{team}/{stage}/"))
                && listing.contains(".kiln-stage.json"),
            "{stage} not in the cache:\n{listing}"
        );
    }
    s3.kill().unwrap();
    s3.wait().unwrap();
}

#[test]
fn a_database_password_never_reaches_output_logs_or_error_messages() {
    let Some(db) = fresh_postgres() else {
        eprintln!("skipped: no KILN_TEST_POSTGRES_URL");
        return;
    };
    // The test server trusts local connections, so any password works; it must never be shown.
    const SECRET: &str = "Pw-9f3a-SECRET";
    let with_password = db.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{SECRET}@"),
        1,
    );
    assert_ne!(
        with_password, db,
        "KILN_TEST_POSTGRES_URL has the form postgres://postgres@HOST/DB"
    );
    let sb = Sandbox::new();
    let job = sb.job(
        "avocado",
        "name = \"avocado\"\nkind = \"mesh\"\n\
         input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
         output = \"out/a\"\n",
    );
    let mut shown = String::new();
    let mut keep = |o: &std::process::Output| {
        shown += &stdout(o);
        shown += &stderr(o);
    };
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", &with_password]);
    ok(&o);
    keep(&o);
    let id = stdout(&o).trim().to_string();
    let w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", &with_password, "--drain", "--poll", "0.2"])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "debug")
        .current_dir(sb.path())
        .output()
        .unwrap();
    ok(&w);
    keep(&w);
    for args in [
        vec!["jobs", id.as_str(), "--json"],
        vec!["report", id.as_str()],
        vec!["jobs", "no-such-job"],
        vec!["token", "create", "--team", "art"],
    ] {
        let mut a = args.clone();
        a.extend(["--db", &with_password]);
        keep(&sb.kiln(&a));
    }
    // An unreachable server: the connection error names the URL, without the password; the same
    // for a password given as a query parameter.
    let unreachable = format!("postgres://postgres:{SECRET}@127.0.0.1:1/kiln");
    let query = format!("postgres://127.0.0.1:1/kiln?user=postgres&password={SECRET}");
    let unknown_param = format!("postgres://postgres@127.0.0.1:1/kiln?sslpassword={SECRET}");
    let slash = format!("postgres://postgres:{SECRET}/x@127.0.0.1:1/kiln");
    for url in [&unreachable, &query, &unknown_param, &slash] {
        let o = sb.kiln(&["jobs", "--db", url]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("127.0.0.1:1"), "{}", stderr(&o));
        keep(&o);
    }
    assert!(
        shown.contains("succeeded") || shown.contains("publish"),
        "{shown}"
    );
    assert!(!shown.contains(SECRET), "the password was shown:\n{shown}");
}

#[test]
fn a_publish_attempt_that_lost_its_lease_changes_nothing_committed() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let job = sb.job(
        "avocado",
        "name = \"avocado\"\nkind = \"mesh\"\n\
         input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
         output = \"out/a\"\n",
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    finish(worker(&sb, db, "w", &["--drain", "--poll", "0.2"]));
    let doc = job_json(&sb, db, &id);
    assert_eq!(doc["job"]["state"], "succeeded", "{doc:#}");
    let manifest_path = sb.path().join("out/a/manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    // The committing attempt recorded its fencing token.
    assert_eq!(manifest["fence_token"], 1, "{manifest:#}");
    // Say a later attempt (token 5) committed something else here; the stale attempt (token 4,
    // paused past its lease, now resumed) runs the same stage process the worker would start.
    manifest["fence_token"] = 5.into();
    manifest["stage_key"] = "committed-by-a-later-attempt".into();
    std::fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    let before = std::fs::read(&manifest_path).unwrap();
    let tileset_before = std::fs::read(sb.path().join("out/a/tileset.json")).unwrap();
    let work = sb.path().join("w").join(&id);
    let lease = work.join("stale.lease.json");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for (valid_until_ms, says) in [(now_ms - 10_000, "ran out"), (now_ms + 60_000, "token 5")] {
        std::fs::write(
            &lease,
            serde_json::json!({"token": 4, "valid_until_ms": valid_until_ms}).to_string(),
        )
        .unwrap();
        let o = sb.kiln(&[
            "stage-exec",
            "--job-file",
            work.join("job.toml").to_str().unwrap(),
            "--job-id",
            &id,
            "--stage",
            "publish",
            "--work-dir",
            work.to_str().unwrap(),
            "--done",
            work.join("publish.done.json").to_str().unwrap(),
            "--outcome",
            work.join("stale.outcome.json").to_str().unwrap(),
            "--device",
            "cpu",
            "--cache",
            sb.path().join("stage-cache").to_str().unwrap(),
            "--input",
            doc["job"]["input"].as_str().unwrap(),
            "--output",
            doc["job"]["output"].as_str().unwrap(),
            "--fence-token",
            "4",
            "--lease-file",
            lease.to_str().unwrap(),
        ]);
        // EX_TEMPFAIL: an infrastructure fault (docs/queue.md, "Exit codes and retries").
        assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("fenced") && stderr(&o).contains(says),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(&manifest_path).unwrap(), before);
        assert_eq!(
            std::fs::read(sb.path().join("out/a/tileset.json")).unwrap(),
            tileset_before
        );
        let staging: Vec<_> = std::fs::read_dir(sb.path().join("out/a"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".staging"))
            .collect();
        assert!(staging.is_empty(), "{staging:?}");
    }
}

/// Whether process `pid` ignores SIGPIPE (bit 13 of `SigIgn` in /proc/PID/status).
fn ignores_sigpipe(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (libc::SIGPIPE - 1)) != 0
}

#[test]
fn processes_that_hold_connections_survive_a_dropped_peer_instead_of_dying_of_sigpipe() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    ok(&sb.kiln(&["token", "create", "--team", "art", "--db", db]));
    let mut w = worker(&sb, db, "w", &["--poll", "0.2"]);
    let mut s = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--db", db, "--addr", "127.0.0.1:0"])
        .env("KILN_HOME", sb.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (worker_ignores, serve_ignores) = (ignores_sigpipe(w.id()), ignores_sigpipe(s.id()));
    for c in [&mut w, &mut s] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(worker_ignores, "kiln worker would die of SIGPIPE");
    assert!(serve_ignores, "kiln serve would die of SIGPIPE");
}

#[test]
fn a_worker_started_while_s3_is_down_waits_for_it_then_runs_jobs() {
    let Some(bin) = s3_server() else { return };
    let port = free_port_block();
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let job = sb.job(
        "avocado",
        "name = \"avocado\"\nkind = \"mesh\"\n\
         input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
         output = \"out/a\"\n",
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    // The bucket is made first and the server stopped: when it comes back the bucket is there, so
    // the worker's first successful probe cannot fall between the server answering and the bucket
    // being created (a missing bucket ends a worker, rightly).
    let s3_data = sb.path().join("s3-data");
    let mut s3 = start_s3(&bin, port, &s3_data);
    create_bucket(port, "kiln-cache");
    let _ = s3.kill();
    let _ = s3.wait();
    // S3 is down when the worker starts: it must wait, not exit (a crash loop under Kubernetes).
    let mut w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", db, "--work-dir", "w"])
        .args(["--cache", "s3://kiln-cache/cache", "--poll", "0.2"])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "warn")
        .envs(s3_env(port))
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        w.try_wait().unwrap().is_none(),
        "the worker exited while S3 was down"
    );
    assert_eq!(job_json(&sb, db, &id)["job"]["state"], "queued");
    let mut s3 = start_s3(&bin, port, &s3_data);
    wait_for("the job to finish", Duration::from_secs(180), || {
        let s = job_json(&sb, db, &id)["job"]["state"].clone();
        s != "queued" && s != "running"
    });
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(w.id() as i32, libc::SIGTERM);
    }
    let out = finish(w);
    let _ = s3.kill();
    let _ = s3.wait();
    assert_eq!(job_json(&sb, db, &id)["job"]["state"], "succeeded");
    assert!(
        stderr(&out).contains("the stage cache is unreachable; nothing is claimed"),
        "{}",
        stderr(&out)
    );
}

/// GET `url` with curl (the test S3 server accepts unsigned reads); `None` on any failure.
fn http_get(url: &str) -> Option<Vec<u8>> {
    let o = Command::new("curl").args(["-sf", url]).output().ok()?;
    o.status.success().then_some(o.stdout)
}

/// A worker of the chaos test: logs to a file (a pipe nobody reads would block it).
fn chaos_worker(sb: &Sandbox, db: &str, n: usize, port: u16) -> Child {
    let log = std::fs::File::create(sb.path().join(format!("worker-{n}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", db, "--work-dir", &format!("w{n}")])
        .args(["--cache", "s3://kiln-chaos/cache", "--lease-ttl", "3"])
        .args(["--poll", "0.2", "--retry-base", "0.2"])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .envs(s3_env(port))
        .current_dir(sb.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[test]
fn chaos_kill_9_an_s3_outage_and_a_database_restart_lose_and_duplicate_no_job() {
    let Some(db) = fresh_postgres() else {
        eprintln!("SKIP chaos: no KILN_TEST_POSTGRES_URL");
        return;
    };
    let Some(s3_bin) = s3_server() else { return };
    // It restarts the database server, so .ci/run runs it alone, after the other tests, with
    // the restart command in KILN_TEST_PG_RESTART; without it the test is skipped.
    let Ok(restart_pg) = std::env::var("KILN_TEST_PG_RESTART") else {
        eprintln!("SKIP chaos: KILN_TEST_PG_RESTART not set (.ci/run runs it alone)");
        return;
    };
    const JOBS: usize = 8;
    const WORKERS: usize = 3;
    let port = free_port_block();
    let sb = Sandbox::new();
    let data = sb.path().join("s3-data");
    let mut s3 = Some(start_s3(&s3_bin, port, &data));
    create_bucket(port, "kiln-chaos");
    let job = sb.job(
        "avocado",
        "name = \"avocado\"\nkind = \"mesh\"\n\
         input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
         output = \"s3://kiln-chaos/out/x\"\n",
    );
    let ids: Vec<String> = (0..JOBS)
        .map(|i| {
            let out = format!("s3://kiln-chaos/out/{i}");
            let o = sb.kiln(&[
                "submit",
                job.to_str().unwrap(),
                "--db",
                &db,
                "--output",
                &out,
            ]);
            ok(&o);
            stdout(&o).trim().to_string()
        })
        .collect();
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|n| chaos_worker(&sb, &db, n, port))
        .collect();
    let terminal = |sb: &Sandbox| {
        ids.iter()
            .filter(|id| {
                let o = sb.kiln(&["jobs", id, "--json", "--db", &db]);
                o.status.success()
                    && serde_json::from_str::<serde_json::Value>(&stdout(&o)).is_ok_and(|d| {
                        !matches!(d["job"]["state"].as_str(), Some("queued" | "running"))
                    })
            })
            .count()
    };
    // Chaos: a kill -9 every 1.5 s, S3 down for 60 s from 4 s on, PostgreSQL restarted at 18 s.
    let started = Instant::now();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let (mut kills, mut outage_s, mut pg_restarts) = (0, 0.0, 0);
    let mut s3_down_at = None;
    while started.elapsed() < Duration::from_secs(150) {
        std::thread::sleep(Duration::from_millis(1500));
        let t = started.elapsed().as_secs_f64();
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let n = (seed >> 33) as usize % WORKERS;
        let _ = workers[n].kill();
        let _ = workers[n].wait();
        workers[n] = chaos_worker(&sb, &db, n, port);
        kills += 1;
        if t > 4.0 && s3_down_at.is_none() && s3.is_some() {
            let mut c = s3.take().unwrap();
            c.kill().unwrap();
            c.wait().unwrap();
            s3_down_at = Some(Instant::now());
        }
        if let Some(at) = s3_down_at
            && at.elapsed() > Duration::from_secs(60)
            && s3.is_none()
        {
            s3 = Some(start_s3(&s3_bin, port, &data));
            outage_s = at.elapsed().as_secs_f64();
        }
        if t > 18.0 && pg_restarts == 0 {
            let o = Command::new("sh")
                .arg("-c")
                .arg(&restart_pg)
                .output()
                .unwrap();
            assert!(o.status.success(), "restart PostgreSQL: {}", stderr(&o));
            pg_restarts += 1;
        }
        if t > 30.0 && terminal(&sb) == JOBS {
            break;
        }
    }
    // Then calm: the workers finish what is left.
    wait_for("every job to end", Duration::from_secs(600), || {
        terminal(&sb) == JOBS
    });
    for w in &mut workers {
        // SAFETY: signals our own child processes.
        unsafe {
            libc::kill(w.id() as i32, libc::SIGTERM);
        }
        let _ = w.wait();
    }
    let logs = (0..WORKERS)
        .map(|n| {
            std::fs::read_to_string(sb.path().join(format!("worker-{n}.log"))).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("\n");
    let tail: String = logs.lines().rev().take(40).collect::<Vec<_>>().join("\n");
    let (mut succeeded, mut duplicates, mut verified) = (0, 0, 0);
    for (i, id) in ids.iter().enumerate() {
        let doc = job_json(&sb, &db, id);
        if doc["job"]["state"] == "succeeded" {
            succeeded += 1;
        }
        // Each stage committed once: one succeeded attempt per stage, whatever was killed.
        let attempts = doc["attempts"].as_array().unwrap();
        for stage in ["ingest", "decimate", "tile", "publish"] {
            let commits = attempts
                .iter()
                .filter(|a| a["stage"] == stage && a["state"] == "succeeded")
                .count();
            if commits > 1 {
                duplicates += 1;
            }
        }
        // The published manifest names this job and every file matches its hash.
        let base = format!("http://127.0.0.1:{port}/kiln-chaos/out/{i}");
        let manifest: serde_json::Value =
            serde_json::from_slice(&http_get(&format!("{base}/manifest.json")).unwrap_or_default())
                .unwrap_or_default();
        let files = manifest["files"].as_array().cloned().unwrap_or_default();
        let all_match = !files.is_empty()
            && manifest["job_id"] == id.as_str()
            && files.iter().all(|f| {
                http_get(&format!("{base}/{}", f["path"].as_str().unwrap())).is_some_and(|b| {
                    blake3::hash(&b).to_hex().as_str() == f["blake3"].as_str().unwrap()
                })
            });
        if all_match {
            verified += 1;
        }
    }
    eprintln!(
        "chaos: {JOBS} jobs, {WORKERS} workers, {kills} kill -9, S3 down {outage_s:.1} s, \
         {pg_restarts} PostgreSQL restart, {:.0} s: {succeeded} succeeded, {} lost, \
         {duplicates} duplicate commits, {verified} manifests verified",
        started.elapsed().as_secs_f64(),
        JOBS - succeeded
    );
    assert!(kills >= 10 && outage_s >= 60.0 && pg_restarts == 1);
    assert_eq!(succeeded, JOBS, "jobs lost; last worker log lines:\n{tail}");
    assert_eq!(duplicates, 0);
    assert_eq!(verified, JOBS);
    if let Some(mut c) = s3 {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The stages of job `id` and their states in `kiln report`, in order.
fn stage_states(sb: &Sandbox, db: &str, id: &str) -> Vec<(String, String)> {
    let o = sb.kiln(&["report", id, "--json", "--db", db]);
    ok(&o);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().into(),
                s["state"].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// Submit the Avocado mesh job for `team` with output `out`; its id.
fn submit_avocado(sb: &Sandbox, db: &str, team: &str, out: &str) -> String {
    let input = "dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf";
    let job = sb.job(
        "avocado",
        &format!("name = \"avocado\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"{out}\"\n"),
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db, "--team", team]);
    ok(&o);
    stdout(&o).trim().to_string()
}

/// Issue 41 (c), on PostgreSQL when `.ci/run` provides it: the stage cache is scoped per team. Team geo's job, identical to team art's,
/// shows none of art's stages as `cached` (it pays for its own compute and learns nothing of
/// art's inputs), and each team's entries sit under `CACHE/teams/<team>/`. With
/// `--cache-share global` (a trusted single-tenant deployment) one team's work is reused by the
/// other.
#[test]
fn issue_41_another_team_s_identical_job_reuses_nothing_unless_the_cache_is_shared() {
    let sb = Sandbox::new();
    let sqlite = sb.path().join("queue.sqlite");
    let db = fresh_postgres().unwrap_or_else(|| sqlite.to_str().unwrap().to_string());
    let db = db.as_str();
    let computed = |states: Vec<(String, String)>| {
        states
            .iter()
            .filter(|(s, st)| s != "publish" && st == "cached")
            .count()
            == 0
    };
    let art = submit_avocado(&sb, db, "art", "out/art");
    finish(worker(&sb, db, "w1", &["--drain", "--poll", "0.2"]));
    let geo = submit_avocado(&sb, db, "geo", "out/geo");
    finish(worker(&sb, db, "w2", &["--drain", "--poll", "0.2"]));
    for id in [&art, &geo] {
        assert_eq!(job_json(&sb, db, id)["job"]["state"], "succeeded");
        let states = stage_states(&sb, db, id);
        assert!(computed(states.clone()), "{id}: {states:?}");
    }
    let cache = sb.path().join("stage-cache");
    assert!(cache.join("teams/art/tile").is_dir());
    assert!(cache.join("teams/geo/tile").is_dir());
    assert!(
        !cache.join("tile").exists(),
        "an entry outside the teams' namespaces"
    );

    // Shared on purpose: art's work is reused by geo.
    let shared = ["--drain", "--poll", "0.2", "--cache-share", "global"];
    let art = submit_avocado(&sb, db, "art", "out/art-2");
    finish(worker(&sb, db, "w3", &shared));
    let geo = submit_avocado(&sb, db, "geo", "out/geo-2");
    finish(worker(&sb, db, "w4", &shared));
    assert!(computed(stage_states(&sb, db, &art)));
    let states = stage_states(&sb, db, &geo);
    let cached: Vec<&str> = states.iter().map(|(_, st)| st.as_str()).collect();
    assert_eq!(cached[..3], ["cached", "cached", "cached"], "{states:?}");
}

/// Issue 41 (b), on PostgreSQL when `.ci/run` provides it: a stage-cache entry whose tile was rewritten together with a matching
/// `.kiln-cache.json` is not what the committing worker recorded in the queue database, so the
/// team's rerun on a fresh worker runs `tile` again (not `cached`), and what it publishes is
/// byte for byte what the untampered run published.
#[test]
fn issue_41_a_tile_rewritten_in_the_cache_with_its_contents_list_is_rebuilt_not_published() {
    let sb = Sandbox::new();
    let sqlite = sb.path().join("queue.sqlite");
    let db = fresh_postgres().unwrap_or_else(|| sqlite.to_str().unwrap().to_string());
    let db = db.as_str();
    let first = submit_avocado(&sb, db, "art", "out/a");
    finish(worker(&sb, db, "w1", &["--drain", "--poll", "0.2"]));
    assert_eq!(job_json(&sb, db, &first)["job"]["state"], "succeeded");

    let tiles = sb.path().join("stage-cache/teams/art/tile");
    let entry = std::fs::read_dir(&tiles)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Rewrite the entry's tile content and its contents list to match, as a team with write
    // access to the cache could.
    let poison = || {
        let mut poisoned = 0;
        let mut listed = Vec::new();
        for f in walk(&entry) {
            let rel = f
                .strip_prefix(&entry)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel == ".kiln-cache.json" {
                continue;
            }
            if rel.ends_with(".glb") || rel.ends_with(".png") || rel.ends_with(".jpg") {
                let mut bytes = std::fs::read(&f).unwrap();
                let n = bytes.len();
                bytes[n / 2] ^= 0xff;
                std::fs::write(&f, &bytes).unwrap();
                poisoned += 1;
            }
            let bytes = std::fs::read(&f).unwrap();
            let hash = blake3::hash(&bytes).to_hex().to_string();
            listed.push(serde_json::json!({"path": rel, "bytes": bytes.len(), "blake3": hash}));
        }
        assert!(poisoned > 0, "no tile content in {}", entry.display());
        listed.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
        std::fs::write(
            entry.join(".kiln-cache.json"),
            serde_json::to_vec_pretty(&listed).unwrap(),
        )
        .unwrap();
    };
    poison();
    let second = submit_avocado(&sb, db, "art", "out/b");
    finish(worker(&sb, db, "w2", &["--drain", "--poll", "0.2"]));
    let states = stage_states(&sb, db, &second);
    assert!(
        states.contains(&("tile".to_string(), "succeeded".to_string())),
        "{states:?}"
    );
    poison();
    // A worker that did not run the first job needs its tile output for publish: the cache
    // entry is rejected, so the stage process rebuilds tile there instead of failing every retry.
    let ran = sb.path().join("w1").join(&first);
    let fresh = sb.path().join("w-fresh").join(&first);
    std::fs::create_dir_all(&fresh).unwrap();
    for f in ["job.toml", "publish.done.json"] {
        std::fs::copy(ran.join(f), fresh.join(f)).unwrap();
    }
    let doc = job_json(&sb, db, &first);
    let o = sb.kiln(&[
        "stage-exec",
        "--db",
        db,
        "--job-file",
        fresh.join("job.toml").to_str().unwrap(),
        "--job-id",
        &first,
        "--stage",
        "publish",
        "--work-dir",
        fresh.to_str().unwrap(),
        "--done",
        fresh.join("publish.done.json").to_str().unwrap(),
        "--outcome",
        fresh.join("publish.outcome.json").to_str().unwrap(),
        "--device",
        "cpu",
        "--cache",
        sb.path().join("stage-cache").to_str().unwrap(),
        "--cache-namespace",
        "teams/art",
        "--input",
        doc["job"]["input"].as_str().unwrap(),
        "--output",
        "out/rebuilt",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("rebuilding it in this attempt"),
        "{}",
        stderr(&o)
    );

    let published = |dir: &str| -> Vec<(String, Vec<u8>)> {
        let root = sb.path().join(dir);
        let mut files: Vec<(String, Vec<u8>)> = walk(&root)
            .into_iter()
            .map(|f| (f.strip_prefix(&root).unwrap().display().to_string(), f))
            .filter(|(rel, _)| !rel.starts_with("manifest"))
            .map(|(rel, f)| (rel, std::fs::read(f).unwrap()))
            .collect();
        files.sort();
        files
    };
    let (a, b) = (published("out/a"), published("out/b"));
    assert!(!a.is_empty());
    assert!(
        a == b,
        "the rerun published other bytes than the untampered run"
    );
    assert!(
        a == published("out/rebuilt"),
        "the publish that rebuilt tile published other bytes than the untampered run"
    );
}

/// Issue 41 (b), on PostgreSQL when `.ci/run` provides it: a travelling checkpoint rewritten in
/// the stage cache between a kill -9 and the resume — with garbage, or with one byte changed — is
/// not what the uploading worker recorded in the queue database: the next worker discards it with
/// a warning, trains from the start, and the job succeeds (before: magenta splats, or a job that
/// failed for good on every resubmission).
#[test]
fn issue_41_a_checkpoint_rewritten_in_the_cache_is_discarded_and_the_job_succeeds() {
    let fox = dataset("capture-fox-instantngp");
    for garbage in [true, false] {
        let sb = Sandbox::new();
        let sqlite = sb.path().join("queue.sqlite");
        let db = fresh_postgres().unwrap_or_else(|| sqlite.to_str().unwrap().to_string());
        let db = db.as_str();
        let job = sb.job(
            "fox",
            &format!(
                "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
                 [ingest]\nmax_side = 64\n[train]\nsteps = 300\nseed = 3\ncheckpoint_every = 20\n",
                fox.display()
            ),
        );
        let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db, "--team", "art"]);
        ok(&o);
        let id = stdout(&o).trim().to_string();
        let a = worker(&sb, db, "wa", &["--poll", "0.2", "--lease-ttl", "3"]);
        let stored = sb.path().join("stage-cache/teams/art/checkpoints/train");
        wait_for(
            "a checkpoint in the stage cache",
            Duration::from_secs(300),
            // A whole upload, not the temporary file a local store writes first (`NAME#N`).
            || stored.is_dir() && walk(&stored).iter().any(|f| !is_partial(f)),
        );
        let mut a = a;
        super::publish_fence::signal_all(a.id(), libc::SIGKILL);
        a.wait().unwrap();
        for f in walk(&stored).into_iter().filter(|f| !is_partial(f)) {
            let mut bytes = std::fs::read(&f).unwrap();
            if garbage {
                bytes = b"garbage".to_vec();
            } else {
                let n = bytes.len();
                bytes[n / 2] ^= 0x01;
            }
            std::fs::write(&f, bytes).unwrap();
        }
        // Warnings of the stage process shown too.
        let b = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args([
                "worker",
                "--db",
                db,
                "--work-dir",
                "wb",
                "--drain",
                "--poll",
                "0.2",
            ])
            .env("KILN_HOME", sb.path())
            .env("RUST_LOG", "warn,kiln_jobs=info")
            .current_dir(sb.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish(b);
        let doc = job_json(&sb, db, &id);
        assert_eq!(
            doc["job"]["state"],
            "succeeded",
            "garbage={garbage}: {doc:#}\n{}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("checkpoint in the stage cache discarded"),
            "garbage={garbage}: {}",
            stderr(&out)
        );
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(sb.path().join("out/fox/metrics.json")).unwrap())
                .unwrap();
        assert!(m["psnr_db"].as_f64().unwrap() > 15.0, "{m}");
    }
}

/// Whether `f` is the temporary file a local object store writes before renaming (`NAME#N`).
fn is_partial(f: &Path) -> bool {
    f.file_name()
        .is_some_and(|n| n.to_string_lossy().contains('#'))
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
