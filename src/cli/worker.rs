//! `kiln worker` (claim and run queued stages) and the hidden `kiln stage-exec` it starts for each
//! stage. The work is in `kiln_jobs::worker`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use kiln_jobs::queue::{Queue, RetryPolicy};
use kiln_jobs::spec::JobSpec;
use kiln_jobs::worker::{self, WorkerConfig, exec};

use super::DbArgs;

/// Arguments of `kiln worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// GPU slots: stages run one per GPU, slot i on cuda:i. 0: a CPU-only worker that also trains
    /// on the CPU.
    #[arg(long, default_value_t = 0, env = "KILN_GPUS")]
    pub gpus: usize,
    /// Each GPU slot is part of a GPU, not a whole one: a MIG instance `SKU:PROFILE`
    /// (`H100:1g.10gb`, `A100-40GB:3g.20gb`; profiles from the price catalog's [[mig]] tables) or
    /// a vGPU / time-sliced partition as a fraction of one GPU (`0.5`, `1/4`, `H100:0.5`).
    /// Attempts are charged the fraction: allocated GPU-seconds × fraction at the SKU's price (MIG:
    /// compute slices / 7), or the profile's published price per instance-hour where the catalog
    /// has one. With a SKU in SLOT, --sku defaults to it. Needs --gpus ≥ 1 (cuda:i is the slot's
    /// device as the container sees it).
    #[arg(long, value_name = "SLOT", env = "KILN_GPU_SLOT")]
    pub gpu_slot: Option<String>,
    /// Extra slots for CPU stages (ingest, decimate, tile, publish) beside the GPU slots.
    #[arg(long, default_value_t = 1)]
    pub cpu_slots: usize,
    /// Shared stage cache every worker reads and writes: s3://BUCKET/PREFIX or a folder
    /// [default: $KILN_HOME/stage-cache].
    #[arg(long, value_name = "URL", env = "KILN_CACHE")]
    pub cache: Option<String>,
    /// Who reuses whose stage-cache entries. `team`: each team only its own, under
    /// CACHE/teams/<team>/, so no team reuses or learns of another's work. `global`: every job
    /// shares one cache; only for trusted single-tenant deployments.
    #[arg(
        long,
        value_name = "team|global",
        default_value = "team",
        env = "KILN_CACHE_SHARE"
    )]
    pub cache_share: kiln_jobs::worker::CacheShare,
    /// Root of this worker's work directories [default: $KILN_HOME/worker].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Serve GET /healthz and /readyz on this address (for Kubernetes probes).
    #[arg(long, value_name = "HOST:PORT", env = "KILN_HEALTH")]
    pub health: Option<String>,
    /// Name shown in listings [default: host name and process id].
    #[arg(long, env = "KILN_WORKER_NAME")]
    pub name: Option<String>,
    /// Seconds a claim holds without a heartbeat; a dead worker's stages are retaken after it.
    #[arg(long, default_value_t = 60.0)]
    pub lease_ttl: f64,
    /// Seconds between claims when the queue is empty.
    #[arg(long, default_value_t = 2.0)]
    pub poll: f64,
    /// Seconds before the first retry of a failed stage (doubling, with jitter, up to 10 min), and
    /// after the first infrastructure fault (doubling up to 2 min).
    #[arg(long, default_value_t = 10.0)]
    pub retry_base: f64,
    /// Exit once nothing is claimable and nothing runs (batch jobs, tests).
    #[arg(long)]
    pub drain: bool,
    /// This machine's GPU SKU in the price catalog (for job budgets) [default: the dearest].
    #[arg(long, env = "KILN_SKU")]
    pub sku: Option<String>,
    /// Price catalog TOML for job budgets [default: the built-in one].
    #[arg(long, value_name = "FILE", env = "KILN_PRICES")]
    pub prices: Option<PathBuf>,
}

/// `--gpu-slot TEXT` checked against `--gpus` and `--sku`.
///
/// # Errors
/// A malformed or unknown slot; a slot on a worker without GPUs; a SKU in the slot that is not
/// `--sku`.
fn worker_gpu_slot(
    text: &str,
    gpus: usize,
    sku: Option<&str>,
    catalog: &kiln_jobs::prices::PriceCatalog,
) -> anyhow::Result<kiln_jobs::gpu_slot::GpuSlot> {
    let slot = kiln_jobs::gpu_slot::GpuSlot::parse(text, catalog)
        .with_context(|| format!("--gpu-slot {text}"))?;
    if gpus == 0 {
        anyhow::bail!(
            "--gpu-slot {text} needs --gpus 1 or more (the number of such slots on this machine); --gpus is 0"
        );
    }
    if let (Some(a), Some(b)) = (sku, &slot.sku)
        && !a.eq_ignore_ascii_case(b)
    {
        anyhow::bail!(
            "--gpu-slot {text} is part of a {b} but --sku is {a}; drop --sku or make them agree"
        );
    }
    Ok(slot)
}

fn seconds(name: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero() || name == "retry-base")
        .with_context(|| format!("--{name} {v}: expected a positive number of seconds"))
}

/// Run the worker until SIGTERM/SIGINT (or, with --drain, until the queue is empty).
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let home = kiln_jobs::spec::kiln_home();
    let lease_ttl = seconds("lease-ttl", args.lease_ttl)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let id = format!(
        "{host}-{}-{}",
        std::process::id(),
        chrono::Utc::now().format("%Y%m%dT%H%M%S")
    );
    let cache = match args.cache {
        Some(c) => c,
        None => home.join("stage-cache").to_string_lossy().into_owned(),
    };
    let catalog = match &args.prices {
        Some(p) => kiln_jobs::prices::PriceCatalog::from_file(p)?,
        None => kiln_jobs::prices::PriceCatalog::default_catalog(),
    };
    if let Some(s) = &args.sku {
        catalog.sku(s)?;
    }
    let gpu_slot = match &args.gpu_slot {
        Some(text) => Some(worker_gpu_slot(
            text,
            args.gpus,
            args.sku.as_deref(),
            &catalog,
        )?),
        None => None,
    };
    let sku = args
        .sku
        .clone()
        .or_else(|| gpu_slot.as_ref().and_then(|s| s.sku.clone()));
    let cfg = WorkerConfig {
        catalog,
        sku,
        gpu_slot,
        name: args.name.unwrap_or_else(|| id.clone()),
        id,
        gpus: args.gpus,
        cpu_slots: args.cpu_slots,
        cache,
        cache_share: args.cache_share,
        db: args.db.target(),
        work_root: args.work_dir.unwrap_or_else(|| home.join("worker")),
        lease_ttl,
        heartbeat: lease_ttl / 4,
        poll: seconds("poll", args.poll)?,
        retry: RetryPolicy {
            base: seconds("retry-base", args.retry_base)?,
            infra_base: seconds("retry-base", args.retry_base)?,
            ..RetryPolicy::default()
        },
        exe: std::env::current_exe().context("cannot find the kiln binary to run stages with")?,
        drain: args.drain,
    };
    // A worker that cannot run stages would claim every job and burn its attempts: check the
    // GPUs and the shared cache before claiming anything.
    for i in 0..cfg.gpus {
        use kiln_kernels::device::{Device, DeviceRequest};
        Device::resolve(DeviceRequest::Exact(Device::Cuda(i))).with_context(|| {
            format!(
                "--gpus {}: cuda:{i} is not usable on this machine (use --gpus 0 for a CPU-only worker); nothing was claimed",
                cfg.gpus
            )
        })?;
    }
    wait_for_cache(&cfg).await?;
    let queue = Queue::open(&args.db.target()).await?;
    if let Some(addr) = &args.health {
        worker::health::serve(addr, queue.clone()).await?;
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!(
            "stopping: no new claims; running stages are asked to checkpoint and handed back"
        );
        let _ = tx.send(true);
    });
    let summary = worker::run(cfg, queue, rx).await?;
    println!(
        "worker stopped: {} stages succeeded, {} failed, {} handed back, {} lost",
        summary.succeeded, summary.failed, summary.released, summary.lost
    );
    Ok(())
}

/// Arguments of the hidden `kiln stage-exec` (written by the worker, not by people).
#[derive(Debug, clap::Args)]
pub struct StageExecArgs {
    #[arg(long)]
    pub job_file: PathBuf,
    #[arg(long)]
    pub job_id: String,
    #[arg(long)]
    pub stage: String,
    #[arg(long)]
    pub work_dir: PathBuf,
    #[arg(long)]
    pub done: PathBuf,
    #[arg(long)]
    pub outcome: PathBuf,
    #[arg(long)]
    pub device: kiln_kernels::device::DeviceRequest,
    #[arg(long)]
    pub cache: String,
    /// The job's namespace in the cache (`teams/<team>`); none: the cache root.
    #[arg(long)]
    pub cache_namespace: Option<String>,
    /// The queue database, whose cache ledger vouches for the cache's entries (the worker
    /// passes it as $KILN_DB).
    #[command(flatten)]
    pub db: DbArgs,
    /// The queue's input (resolved at submit time), overriding the job file's.
    #[arg(long)]
    pub input: String,
    /// The queue's output, overriding the job file's.
    #[arg(long)]
    pub output: String,
    /// The attempt's fencing token; with `--lease-file`, `publish` writes only while the worker
    /// keeps that file in date.
    #[arg(long, requires = "lease_file")]
    pub fence_token: Option<i64>,
    /// The lease file the worker rewrites after each accepted heartbeat.
    #[arg(long, requires = "fence_token")]
    pub lease_file: Option<PathBuf>,
}

/// Run one stage and write its outcome file.
pub async fn stage_exec(args: StageExecArgs) -> anyhow::Result<()> {
    let cache = match stage_cache(&args).await {
        Ok(c) => c,
        // The database did not answer: retried on the infrastructure budget, like an outage of
        // the store.
        Err(e) => {
            let failed = exec::ExecOutcome::Failed {
                message: format!("{e:#}"),
                retryable: true,
                infrastructure: true,
            };
            return report(&args.outcome, failed);
        }
    };
    let text = std::fs::read_to_string(&args.job_file)
        .with_context(|| format!("cannot read {}", args.job_file.display()))?;
    let mut spec = JobSpec::from_toml(&text, &args.job_file)?;
    spec.input = args.input;
    spec.output = args.output;
    let done: Vec<exec::DoneStage> = serde_json::from_slice(
        &std::fs::read(&args.done).with_context(|| format!("{}", args.done.display()))?,
    )
    .with_context(|| format!("{}", args.done.display()))?;
    let mut plan = spec.plan(&args.job_id, &args.work_dir, &args.job_file, &|l| {
        Ok(l.to_string())
    })?;
    plan.work_dir = args.work_dir;
    plan.device = args.device;
    plan.stage_cache = Some(cache);
    plan.fence = args
        .fence_token
        .zip(args.lease_file)
        .map(|(token, lease_file)| kiln_pipeline::stages::publish::Fence { token, lease_file });
    let outcome = exec::exec_stage(&plan, &args.stage, &done).await;
    report(&args.outcome, outcome)
}

/// Write `outcome` to the outcome file and end the process with its exit status.
fn report(path: &std::path::Path, outcome: exec::ExecOutcome) -> anyhow::Result<()> {
    exec::write_outcome(path, &outcome)?;
    match outcome {
        exec::ExecOutcome::Succeeded(_) => Ok(()),
        exec::ExecOutcome::Failed {
            message,
            retryable,
            infrastructure,
        } => {
            eprintln!("error: {message}");
            std::process::exit(failure_exit_code(retryable, infrastructure))
        }
        exec::ExecOutcome::Interrupted { message } => {
            eprintln!("{message}");
            std::process::exit(EXIT_INTERRUPTED)
        }
    }
}

/// The shared stage cache of a stage process: the worker's cache in the job's namespace, its
/// entries vouched for by the queue database's cache ledger.
///
/// # Errors
/// The database cannot be opened; the namespace is malformed.
async fn stage_cache(
    args: &StageExecArgs,
) -> anyhow::Result<kiln_pipeline::stage_cache::StageCache> {
    let db = kiln_jobs::db::Db::open(&args.db.target()).await?;
    let ledger = std::sync::Arc::new(kiln_jobs::cache_ledger::DbCacheLedger::new(db));
    Ok(kiln_pipeline::stage_cache::StageCache::new(
        &args.cache,
        args.cache_namespace.as_deref(),
        ledger,
    )?)
}

/// `kiln stage-exec` exit status: the stage failed on this machine; retrying (a bounded number of
/// times) may help.
pub const EXIT_STAGE_FAILED: i32 = 1;
/// The job's own input or parameters are at fault: retrying cannot help (sysexits `EX_DATAERR`).
pub const EXIT_JOB_FAULT: i32 = 65;
/// The object store or the database did not answer, or the attempt lost its lease: retry later,
/// with a longer horizon (sysexits `EX_TEMPFAIL`).
pub const EXIT_INFRASTRUCTURE: i32 = 75;
/// Stopped by SIGINT/SIGTERM (128 + SIGINT); a training checkpoint may be kept.
pub const EXIT_INTERRUPTED: i32 = 130;

fn failure_exit_code(retryable: bool, infrastructure: bool) -> i32 {
    match (infrastructure, retryable) {
        (true, _) => EXIT_INFRASTRUCTURE,
        (false, true) => EXIT_STAGE_FAILED,
        (false, false) => EXIT_JOB_FAULT,
    }
}

/// Check that this worker can write the shared stage cache before claiming anything. While the
/// store is unreachable (an S3 outage, a server still starting) wait and try again, saying so
/// once per try; a refusal that waiting cannot fix (credentials, a missing bucket) ends the worker.
///
/// # Errors
/// The store's refusal, naming `--cache` and what to check; a signal while waiting.
async fn wait_for_cache(cfg: &WorkerConfig) -> anyhow::Result<()> {
    let probe = format!(".kiln-probe/{}", cfg.id);
    // Short retries per request: the loop below waits (and says so) rather than object_store
    // retrying silently for minutes inside one request.
    let store = kiln_pipeline::storage::open_for_probe(&cfg.cache)?;
    let mut delay = Duration::from_secs(1);
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let tried = store
            .put_bytes(
                &format!("{probe}/check"),
                b"kiln worker write check".to_vec(),
            )
            .await
            .and(store.delete_prefix(&probe).await);
        let e = match tried {
            Ok(()) => return Ok(()),
            Err(e) if kiln_pipeline::storage::is_unreachable(&e) => e,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "--cache {}: this worker cannot write the shared stage cache (for s3:// check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / AWS_ENDPOINT and the bucket); nothing was claimed",
                        cfg.cache
                    )
                });
            }
        };
        tracing::warn!(cache = %cfg.cache, retry_in_s = delay.as_secs(), "the stage cache is unreachable; nothing is claimed until it answers: {e}");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = tokio::signal::ctrl_c() => anyhow::bail!("stopped while waiting for the stage cache {}", cfg.cache),
            _ = stop.recv() => anyhow::bail!("stopped while waiting for the stage cache {}", cfg.cache),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_slots_need_gpus_and_a_matching_sku() {
        let cat = kiln_jobs::prices::PriceCatalog::default_catalog();
        let s = worker_gpu_slot("h100:1g.10gb", 1, None, &cat).unwrap();
        assert_eq!(s.label, "H100:1g.10gb");
        assert_eq!(
            worker_gpu_slot("0.5", 2, Some("A100-40GB"), &cat)
                .unwrap()
                .fraction,
            0.5
        );
        let e = worker_gpu_slot("0.5", 0, None, &cat)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--gpus 1 or more"), "{e}");
        let e = worker_gpu_slot("H100:0.5", 1, Some("A100-40GB"), &cat)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--sku is A100-40GB"), "{e}");
        let e = format!(
            "{:#}",
            worker_gpu_slot("H100:9g.1gb", 1, None, &cat).unwrap_err()
        );
        assert!(
            e.contains("--gpu-slot H100:9g.1gb") && e.contains("1g.10gb"),
            "{e}"
        );
    }
}
