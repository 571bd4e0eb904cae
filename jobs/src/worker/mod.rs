//! `kiln worker`: claims stages from the queue and runs each in a child process (`kiln
//! stage-exec`, see [`exec`]), heartbeating its lease, until told to stop.
//!
//! Slots: `gpus` GPU slots (slot *i* runs its stages with `--device cuda:i`, one stage per GPU),
//! each claiming any stage; and `cpu_slots` CPU slots that claim only CPU stages. With `gpus = 0`
//! the CPU slots claim every stage and train on the CPU.
//!
//! Stateless: the queue database and the stage cache (an object store) hold everything another
//! worker needs to take over; the local work directory only saves downloads. On shutdown (SIGTERM)
//! the worker stops claiming, sends SIGTERM to its running stages (training checkpoints), releases
//! their leases and returns. A worker that dies without releasing (kill -9, lost machine) stops
//! heartbeating; its leases expire and other workers reclaim the stages.

mod egress_budget;
pub mod exec;
pub(crate) mod first_estimate;
pub mod health;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::sync::watch;

use crate::ledger::Ledger;
use crate::queue::{Claimed, Failure, Fault, Heartbeat, Lease, Queue, RetryPolicy};
use crate::{Error, Result};
use exec::{DoneStage, ExecOutcome};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unique per process start (leases name it).
    pub id: String,
    /// Human name (host, pod) for listings.
    pub name: String,
    /// GPU slots.
    pub gpus: usize,
    /// CPU-only slots.
    pub cpu_slots: usize,
    /// Shared stage cache URL or folder (see `kiln_pipeline::stage_cache`).
    pub cache: String,
    /// Whose entries a job may reuse: its own team's (the default) or everyone's.
    pub cache_share: CacheShare,
    /// The queue database as given (`--db`), for the stage processes: they record and check
    /// stage-cache entries in its cache ledger ([`crate::cache_ledger`]).
    pub db: String,
    /// Root of this worker's work directories (`<root>/<job id>/`).
    pub work_root: PathBuf,
    /// How long a claim holds without a heartbeat.
    pub lease_ttl: Duration,
    /// Heartbeat period (well under `lease_ttl`).
    pub heartbeat: Duration,
    /// Wait between claims when nothing is claimable.
    pub poll: Duration,
    pub retry: RetryPolicy,
    /// The `kiln` binary to run stages with (`kiln stage-exec`).
    pub exe: PathBuf,
    /// Return once nothing is claimable and nothing runs (batch use: Slurm, tests).
    pub drain: bool,
    /// Prices for job budgets (`budget_usd`).
    pub catalog: crate::prices::PriceCatalog,
    /// This machine's GPU SKU in the catalog; `None`: budgets assume the dearest GPU.
    pub sku: Option<String>,
    /// Each GPU slot is this part of a GPU (a MIG instance or vGPU partition); `None`: whole GPUs.
    /// Attempts on it are charged its fraction ([`WorkerConfig::charged_usage`]).
    pub gpu_slot: Option<crate::gpu_slot::GpuSlot>,
}

impl WorkerConfig {
    fn pricing(&self) -> crate::costing::Pricing<'_> {
        crate::costing::Pricing {
            catalog: &self.catalog,
            tier: crate::prices::Tier::OnDemand,
            fallback_sku: self.sku.clone(),
        }
    }

    /// What one slot costs per second while it runs a stage: a GPU slot one GPU of this SKU, a
    /// CPU slot every core of the machine (the CPU stages use them all).
    fn slot_usd_per_s(&self, slot: Slot) -> f64 {
        let p = self.pricing();
        match slot.gpu {
            Some(_) => {
                let sku = self.sku.clone().unwrap_or_else(|| {
                    p.sku_of(&crate::ledger::StageRow {
                        device: "cuda:0".into(),
                        ..Default::default()
                    })
                });
                match &self.gpu_slot {
                    // GPU-equivalent rate × the slot's share = what one second of the slot costs.
                    Some(gs) => {
                        gs.gpu_hour_usd(&self.catalog, &sku, p.tier)
                            .unwrap_or_else(|| p.gpu_rate(&sku))
                            * gs.fraction
                            / 3600.0
                    }
                    None => p.gpu_rate(&sku) / 3600.0,
                }
            }
            None => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                p.cpu_rate() / 3600.0 * cores as f64
            }
        }
    }
}

/// Who shares the entries of the stage cache (`kiln worker --cache-share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheShare {
    /// Each team has its own namespace, `CACHE/teams/<team>/`: no team reuses, or learns of,
    /// another team's entries (which would tell it which inputs the other team ran).
    #[default]
    Team,
    /// One namespace for every job (the cache root): for trusted single-tenant deployments,
    /// where reusing another team's work is wanted.
    Global,
}

impl std::str::FromStr for CacheShare {
    type Err = Error;

    fn from_str(s: &str) -> Result<CacheShare> {
        match s {
            "team" => Ok(CacheShare::Team),
            "global" => Ok(CacheShare::Global),
            _ => Err(Error::Field {
                path: "kiln worker".into(),
                field: "--cache-share".into(),
                expected: "`team` (each team its own entries) or `global` (one cache for all)"
                    .into(),
                found: format!("`{s}`"),
            }),
        }
    }
}

impl CacheShare {
    /// The stage-cache namespace of `team`'s jobs: `teams/<team>` (a name of letters, digits, `-`
    /// and `_` as it is; any other as `_` and its bytes in hex, so no two teams share a folder
    /// and none can name a path outside its own), or `None` for [`CacheShare::Global`].
    #[must_use]
    pub fn namespace(self, team: &str) -> Option<String> {
        let plain = !team.is_empty()
            && !team.starts_with('_')
            && team
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        match self {
            CacheShare::Global => None,
            CacheShare::Team if plain => Some(format!("teams/{team}")),
            CacheShare::Team => Some(format!(
                "teams/_{}",
                team.bytes().map(|b| format!("{b:02x}")).collect::<String>()
            )),
        }
    }
}

impl WorkerConfig {
    /// Where `team`'s entries of the stage cache are: the cache root, then its namespace.
    #[must_use]
    pub fn cache_url_for(&self, team: &str) -> String {
        match self.cache_share.namespace(team) {
            Some(ns) => format!("{}/{ns}", self.cache.trim_end_matches('/')),
            None => self.cache.clone(),
        }
    }

    /// `usage` of an attempt on `slot` as charged: on a GPU slot of a worker declared with
    /// `--gpu-slot`, an attempt that held the GPU (`gpu_s > 0`) is recorded at the slot's fraction
    /// (`StageUsage::on_gpu_slot`); anything else unchanged.
    fn charged_usage(
        &self,
        slot: Slot,
        usage: kiln_pipeline::meter::StageUsage,
    ) -> kiln_pipeline::meter::StageUsage {
        match (&self.gpu_slot, slot.gpu) {
            (Some(gs), Some(_)) if usage.gpu_s > 0.0 => usage.on_gpu_slot(&gs.label, gs.fraction),
            _ => usage,
        }
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WorkerSummary {
    pub succeeded: usize,
    pub failed: usize,
    pub released: usize,
    pub lost: usize,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    index: usize,
    gpu: Option<usize>,
    claims_gpu: bool,
}

/// Run the worker until `shutdown` turns true (or, with `drain`, until the queue is empty).
///
/// # Errors
/// [`Error::Ledger`] when the database cannot be reached at start; later database errors are
/// logged and retried.
pub async fn run(
    cfg: WorkerConfig,
    queue: Queue,
    shutdown: watch::Receiver<bool>,
) -> Result<WorkerSummary> {
    queue
        .register_worker(&cfg.id, &cfg.name, cfg.gpus as i64)
        .await?;
    let ledger = Ledger::with_db(queue.db().clone());
    let mut slots: Vec<Slot> = (0..cfg.gpus)
        .map(|i| Slot {
            index: i,
            gpu: Some(i),
            claims_gpu: true,
        })
        .collect();
    for i in 0..cfg.cpu_slots.max(usize::from(cfg.gpus == 0)) {
        slots.push(Slot {
            index: cfg.gpus + i,
            gpu: None,
            claims_gpu: cfg.gpus == 0,
        });
    }
    tracing::info!(worker = %cfg.id, name = %cfg.name, gpus = cfg.gpus, slots = slots.len(), db = %queue.db().shown(), cache = %cfg.cache, "worker started");
    let idle = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for slot in slots.clone() {
        let (cfg, queue, ledger, shutdown, idle) = (
            cfg.clone(),
            queue.clone(),
            ledger.clone(),
            shutdown.clone(),
            idle.clone(),
        );
        let n = slots.len();
        tasks.push(tokio::spawn(async move {
            slot_loop(&cfg, &queue, &ledger, slot, shutdown, idle, n).await
        }));
    }
    let mut summary = WorkerSummary::default();
    for t in tasks {
        if let Ok(s) = t.await {
            summary.succeeded += s.succeeded;
            summary.failed += s.failed;
            summary.released += s.released;
            summary.lost += s.lost;
        }
    }
    let _ = queue.worker_seen(&cfg.id, true).await;
    tracing::info!(worker = %cfg.id, ?summary, "worker stopped");
    Ok(summary)
}

async fn slot_loop(
    cfg: &WorkerConfig,
    queue: &Queue,
    ledger: &Ledger,
    slot: Slot,
    mut shutdown: watch::Receiver<bool>,
    idle: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    slots: usize,
) -> WorkerSummary {
    use std::sync::atomic::Ordering;
    let mut summary = WorkerSummary::default();
    let mut is_idle = false;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let claimed = match queue
            .claim(&cfg.id, slot.claims_gpu, cfg.lease_ttl, &cfg.retry)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(slot = slot.index, "claim failed, retrying: {e}");
                None
            }
        };
        let _ = queue.worker_seen(&cfg.id, false).await;
        match claimed {
            Some(c) => {
                if is_idle {
                    idle.fetch_sub(1, Ordering::SeqCst);
                    is_idle = false;
                }
                match run_claimed(cfg, queue, ledger, slot, c, &mut shutdown).await {
                    Ended::Succeeded => summary.succeeded += 1,
                    Ended::Failed => summary.failed += 1,
                    Ended::Released => summary.released += 1,
                    Ended::Lost => summary.lost += 1,
                }
            }
            None => {
                if !is_idle {
                    idle.fetch_add(1, Ordering::SeqCst);
                    is_idle = true;
                }
                // Drain: stop when every slot found nothing to do and no job is left that could
                // still need a worker (a stage held by a dead worker comes back when its lease
                // expires; one in backoff when its delay ends).
                if cfg.drain
                    && idle.load(Ordering::SeqCst) == slots
                    && queue
                        .depth()
                        .await
                        .is_ok_and(|d| d.queued_jobs + d.running_jobs == 0)
                {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(cfg.poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
    summary
}

enum Ended {
    Succeeded,
    Failed,
    Released,
    Lost,
}

/// USD of storing what running stage `stage` has written so far (its `STAGE.partial` folder in
/// the job's work folder, the output it will keep) for the catalog's `stage_cache_days`: the
/// storage part of a running stage's budget projection. 0 for `publish` (its egress and storage
/// are projected before it starts, `egress_budget`), or without a `[placement]`.
fn storage_so_far_usd(
    catalog: &crate::prices::PriceCatalog,
    work_dir: &std::path::Path,
    stage: &str,
) -> f64 {
    let Some(p) = catalog.placement.as_ref() else {
        return 0.0;
    };
    if stage == "publish" {
        return 0.0;
    }
    let bytes = kiln_pipeline::meter::dir_bytes(&work_dir.join(format!("{stage}.partial")));
    catalog
        .storage_usd_for_days(&p.storage_class, bytes, p.stage_cache_days)
        .unwrap_or(0.0)
}

/// Run one claimed stage to its end, keeping the lease, and record the result in the queue
/// and the ledger.
async fn run_claimed(
    cfg: &WorkerConfig,
    queue: &Queue,
    ledger: &Ledger,
    slot: Slot,
    c: Claimed,
    shutdown: &mut watch::Receiver<bool>,
) -> Ended {
    let lease = c.lease.clone();
    let device = match slot.gpu {
        Some(i) => format!("cuda:{i}"),
        None => "cpu".to_string(),
    };
    tracing::info!(job = %lease.job_id, stage = %lease.stage, attempt = lease.attempt, token = lease.token, %device, "claimed");
    let spent = match budget_left_to_start(cfg, ledger, &c).await {
        Ok(spent) => spent,
        Err(msg) => {
            return report_failure(queue, ledger, &lease, None, &msg, Fault::Job, cfg).await;
        }
    };
    let work_dir = cfg.work_root.join(&lease.job_id);
    let (ledger_attempt, mut child, outcome_path) = match prepare(
        cfg, ledger, &c, &work_dir, &device,
    )
    .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(job = %lease.job_id, stage = %lease.stage, "cannot start the stage: {e}");
            let msg = format!("worker could not start the stage: {e}");
            return report_failure(queue, ledger, &lease, None, &msg, Fault::Stage, cfg).await;
        }
    };
    let _ = queue.set_ledger_attempt(&lease, ledger_attempt).await;
    let attempt = Attempt {
        cfg,
        queue,
        ledger,
        lease: &lease,
        ledger_attempt,
        slot,
        device,
        work_dir,
        started: std::time::Instant::now(),
        rate: cfg.slot_usd_per_s(slot),
        budget: c.job.budget_usd,
        spent,
    };
    let stop = attempt.watch(&mut child, shutdown).await;
    match stop {
        Stop::Exited => {}
        Stop::Lost => return attempt.lost(&mut child).await,
        Stop::Cancel | Stop::Shutdown | Stop::Budget => terminate(&mut child).await,
    }
    let outcome = exec::read_outcome(&outcome_path).map(|o| match o {
        ExecOutcome::Succeeded(mut o) => {
            o.usage = cfg.charged_usage(slot, o.usage);
            ExecOutcome::Succeeded(o)
        }
        other => other,
    });
    attempt.settle(stop, outcome, &mut child).await
}

/// What the job has cost so far (every attempt, at catalog prices, with storage and egress),
/// when it has a budget: the stage is not started when the budget is spent, nor a publish whose
/// egress would pass it.
///
/// # Errors
/// The refusal, for the ledger and the queue.
async fn budget_left_to_start(
    cfg: &WorkerConfig,
    ledger: &Ledger,
    c: &Claimed,
) -> std::result::Result<f64, String> {
    let lease = &c.lease;
    let Some(b) = c.job.budget_usd else {
        return Ok(cfg.pricing().job_total(&[], &c.job.output).usd);
    };
    let rows = ledger.stages(&lease.job_id).await.unwrap_or_default();
    let spent = cfg.pricing().job_total(&rows, &c.job.output).usd;
    if spent >= b {
        return Err(format!(
            "budget exhausted: the job has cost ${spent:.6} of its ${b:.6} budget (--budget-usd; \
             price catalog {}); not starting `{}`. To finish it, submit the job again with a \
             larger --budget-usd: its finished stages are reused from the stage cache",
            cfg.catalog.version, lease.stage
        ));
    }
    if lease.stage == "publish"
        && let Some(msg) = egress_budget::refusal(cfg, c, &rows, spent, b).await
    {
        return Err(msg);
    }
    Ok(spent)
}

/// Why the watch over a running stage process ended.
enum Stop {
    /// The process exited by itself.
    Exited,
    /// The job was cancelled.
    Cancel,
    /// The worker is shutting down.
    Shutdown,
    /// The lease was lost (expired or taken over).
    Lost,
    /// The job's budget would be passed.
    Budget,
}

/// One running attempt of a claimed stage, and what the worker needs to settle it.
struct Attempt<'a> {
    cfg: &'a WorkerConfig,
    queue: &'a Queue,
    ledger: &'a Ledger,
    lease: &'a Lease,
    ledger_attempt: i64,
    slot: Slot,
    device: String,
    work_dir: PathBuf,
    started: std::time::Instant,
    /// What the slot costs, USD per second.
    rate: f64,
    budget: Option<f64>,
    /// USD the job had cost before this attempt.
    spent: f64,
}

impl Attempt<'_> {
    /// Heartbeat the lease (renewing the lease file the stage's publish is fenced by) until the
    /// process exits, the job is cancelled, the lease is lost, the worker shuts down or the
    /// budget would be passed.
    async fn watch(
        &self,
        child: &mut tokio::process::Child,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Stop {
        let (cfg, lease) = (self.cfg, self.lease);
        let mut beat = tokio::time::interval(cfg.heartbeat);
        beat.tick().await;
        loop {
            tokio::select! {
                _ = child.wait() => return Stop::Exited,
                _ = beat.tick() => {
                    if self.over_budget() {
                        return Stop::Budget;
                    }
                    let sent_ms = kiln_pipeline::stages::publish::now_ms();
                    match self.queue.heartbeat(lease, cfg.lease_ttl).await {
                        Ok(Heartbeat::Held { cancel_requested: true }) => return Stop::Cancel,
                        Ok(Heartbeat::Held { .. }) => {
                            let file = lease_file_of(&self.work_dir, lease);
                            if let Err(e) = renew_lease_file(&file, lease, cfg.lease_ttl, sent_ms) {
                                tracing::warn!(job = %lease.job_id, "cannot renew the lease file: {e}");
                            }
                        }
                        Ok(Heartbeat::Lost) => return Stop::Lost,
                        // A database hiccup: keep going; the lease outlives a few missed beats.
                        Err(e) => tracing::warn!(job = %lease.job_id, "heartbeat failed: {e}"),
                    }
                }
                r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return Stop::Shutdown },
            }
        }
    }

    /// Whether what the job spent before, this slot's time so far and what the stage has
    /// written would pass the budget.
    fn over_budget(&self) -> bool {
        self.budget.is_some_and(|b| {
            self.spent + self.started.elapsed().as_secs_f64() * self.rate + self.storage_usd() > b
        })
    }

    fn storage_usd(&self) -> f64 {
        storage_so_far_usd(&self.cfg.catalog, &self.work_dir, &self.lease.stage)
    }

    /// The lease was lost: kill the process, record the attempt failed, touch nothing else.
    async fn lost(&self, child: &mut tokio::process::Child) -> Ended {
        let _ = child.start_kill();
        let _ = child.wait().await;
        let msg = "lease lost (expired or taken over); the attempt's work is discarded";
        let _ = self
            .ledger
            .finish_stage(
                self.ledger_attempt,
                "failed",
                None,
                &Default::default(),
                None,
                Some(msg),
            )
            .await;
        tracing::warn!(job = %self.lease.job_id, stage = %self.lease.stage, "{msg}");
        Ended::Lost
    }

    /// The usage an attempt is charged: the stage's own when it succeeded; else what its slot
    /// held while it ran — one GPU on a GPU slot, every core on a CPU slot (allocated, not
    /// measured, seconds).
    fn usage(&self, outcome: Option<&ExecOutcome>) -> kiln_pipeline::meter::StageUsage {
        if let Some(ExecOutcome::Succeeded(o)) = outcome {
            return o.usage.clone();
        }
        let held = self.started.elapsed().as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let on_gpu = self.slot.gpu.is_some();
        self.cfg.charged_usage(
            self.slot,
            kiln_pipeline::meter::StageUsage {
                device: self.device.clone(),
                wall_s: held,
                gpu_s: if on_gpu { held } else { 0.0 },
                cpu_s: if on_gpu { 0.0 } else { held * cores },
                ..Default::default()
            },
        )
    }

    /// Record how the attempt ended, in the queue and the ledger: committed, cancelled, handed
    /// back, failed (by whose fault) or stopped by the budget.
    async fn settle(
        &self,
        stop: Stop,
        outcome: Option<ExecOutcome>,
        child: &mut tokio::process::Child,
    ) -> Ended {
        let (queue, ledger, lease, cfg) = (self.queue, self.ledger, self.lease, self.cfg);
        let usage = &self.usage(outcome.as_ref());
        let failed = |msg: String, fault: Fault| async move {
            report_failure(
                queue,
                ledger,
                lease,
                Some((self.ledger_attempt, usage)),
                &msg,
                fault,
                cfg,
            )
            .await
        };
        match (stop, outcome) {
            (Stop::Cancel, _) => self.cancelled(usage).await,
            (Stop::Shutdown, Some(ExecOutcome::Succeeded(o)))
            | (Stop::Exited, Some(ExecOutcome::Succeeded(o))) => {
                commit(queue, ledger, lease, self.ledger_attempt, &o, cfg.lease_ttl).await
            }
            (Stop::Shutdown, _) | (Stop::Exited, Some(ExecOutcome::Interrupted { .. })) => {
                self.released(usage).await
            }
            (
                Stop::Exited,
                Some(ExecOutcome::Failed {
                    message,
                    retryable,
                    infrastructure,
                }),
            ) => {
                let fault = match (infrastructure, retryable) {
                    (true, _) => Fault::Infrastructure,
                    (false, true) => Fault::Stage,
                    (false, false) => Fault::Job,
                };
                failed(message, fault).await
            }
            (Stop::Exited, None) => {
                let status = child.try_wait().ok().flatten();
                let msg = format!(
                    "the stage process ended without a result ({status:?}); see the worker's log"
                );
                failed(msg, Fault::Stage).await
            }
            (Stop::Lost, _) => Ended::Lost,
            (Stop::Budget, _) => failed(self.budget_stop_message(), Fault::Job).await,
        }
    }

    /// The job was cancelled while the stage ran.
    async fn cancelled(&self, usage: &kiln_pipeline::meter::StageUsage) -> Ended {
        let _ = self.queue.cancelled(self.lease).await;
        let _ = self
            .ledger
            .finish_stage(
                self.ledger_attempt,
                "failed",
                None,
                usage,
                None,
                Some("cancelled"),
            )
            .await;
        let _ = self
            .ledger
            .finish_job(&self.lease.job_id, Some("cancelled"))
            .await;
        Ended::Failed
    }

    /// The worker is shutting down (or the stage stopped at a signal): hand the stage back.
    async fn released(&self, usage: &kiln_pipeline::meter::StageUsage) -> Ended {
        let reason = "worker shutting down (SIGTERM): the stage is handed back; training resumes from its checkpoint on this machine";
        let _ = self.queue.release(self.lease, reason).await;
        let _ = self
            .ledger
            .finish_stage(
                self.ledger_attempt,
                "failed",
                None,
                usage,
                None,
                Some(reason),
            )
            .await;
        Ended::Released
    }

    /// Why the budget stopped the stage, with the figures.
    fn budget_stop_message(&self) -> String {
        let b = self.budget.unwrap_or_default();
        format!(
            "budget exhausted: stopped `{}` after {:.0} s, before the job would pass its \
             ${b:.6} budget (--budget-usd; ${:.6} spent before this stage, about \
             ${:.4}/h on this slot, ${:.6} of storage for what it had written; price catalog \
             {}). The job has failed and will not run again; to finish it, submit it again \
             with a larger --budget-usd",
            self.lease.stage,
            self.started.elapsed().as_secs_f64(),
            self.spent,
            self.rate * 3600.0,
            self.storage_usd(),
            self.cfg.catalog.version
        )
    }
}

/// SIGTERM the child (training writes a checkpoint), then SIGKILL after a grace period.
async fn terminate(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: signalling our own child process by pid.
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(90), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// The lease file of `lease`'s stage process ([`kiln_pipeline::stages::publish::Fence`]).
fn lease_file_of(work_dir: &std::path::Path, lease: &Lease) -> PathBuf {
    work_dir.join(format!("{}.lease.json", lease.stage))
}

/// Tell the stage process it may write until three quarters of the TTL after `from_ms` (the time
/// the claim or the accepted heartbeat was sent, so never later than the database's own expiry;
/// the quarter is the margin for a write already under way and for clock steps).
fn renew_lease_file(
    path: &std::path::Path,
    lease: &Lease,
    ttl: Duration,
    from_ms: u64,
) -> Result<()> {
    kiln_pipeline::stages::publish::LeaseFile {
        token: lease.token,
        valid_until_ms: from_ms + (ttl.as_millis() as u64) * 3 / 4,
        ttl_ms: Some(ttl.as_millis() as u64),
    }
    .write(path)
    .map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    })
}

async fn prepare(
    cfg: &WorkerConfig,
    ledger: &Ledger,
    c: &Claimed,
    work_dir: &std::path::Path,
    device: &str,
) -> Result<(i64, tokio::process::Child, PathBuf)> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(work_dir).map_err(io(work_dir))?;
    let job_file = work_dir.join("job.toml");
    std::fs::write(&job_file, &c.job.spec).map_err(io(&job_file))?;
    let done: Vec<DoneStage> = c
        .stages
        .iter()
        .filter(|s| s.state == "succeeded")
        .filter_map(|s| {
            Some(DoneStage {
                stage: s.stage.clone(),
                key: s.stage_key.clone()?,
                summary: s.summary.clone().unwrap_or_default(),
            })
        })
        .collect();
    let done_file = work_dir.join(format!("{}.done.json", c.lease.stage));
    std::fs::write(
        &done_file,
        serde_json::to_vec_pretty(&done).expect("serialises"),
    )
    .map_err(io(&done_file))?;
    let outcome = work_dir.join(format!("{}.outcome.json", c.lease.stage));
    let _ = std::fs::remove_file(&outcome);
    let lease_file = lease_file_of(work_dir, &c.lease);
    renew_lease_file(
        &lease_file,
        &c.lease,
        cfg.lease_ttl,
        kiln_pipeline::stages::publish::now_ms(),
    )?;
    ledger
        .ensure_job(
            &c.job.id,
            &c.job.name,
            &c.job.kind,
            &c.job.input,
            &c.job.output,
            &c.job.spec,
        )
        .await?;
    // Before the job's first attempt exists, so the estimate learns from other jobs only.
    first_estimate::record_on_first_claim(ledger, c, &cfg.catalog).await;
    let attempt = ledger
        .start_stage(&c.job.id, &c.lease.stage, device)
        .await?;
    let mut cmd = tokio::process::Command::new(&cfg.exe);
    cmd.arg("stage-exec")
        .arg("--job-file")
        .arg(&job_file)
        .arg("--job-id")
        .arg(&c.job.id)
        .arg("--stage")
        .arg(&c.lease.stage)
        .arg("--work-dir")
        .arg(work_dir)
        .arg("--done")
        .arg(&done_file)
        .arg("--outcome")
        .arg(&outcome)
        .arg("--device")
        .arg(device)
        .arg("--cache")
        .arg(&cfg.cache)
        // The database goes by environment, not argument: a PostgreSQL URL may hold a password,
        // and arguments are visible to every user of the machine.
        .env("KILN_DB", &cfg.db)
        .arg("--input")
        .arg(&c.job.input)
        .arg("--output")
        .arg(&c.job.output)
        .arg("--fence-token")
        .arg(c.lease.token.to_string())
        .arg("--lease-file")
        .arg(&lease_file)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(ns) = cfg.cache_share.namespace(&c.job.team) {
        cmd.arg("--cache-namespace").arg(ns);
    }
    // SAFETY: prctl in the forked child before exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(io(&cfg.exe))?;
    Ok((attempt, child, outcome))
}

async fn commit(
    queue: &Queue,
    ledger: &Ledger,
    lease: &Lease,
    ledger_attempt: i64,
    o: &kiln_pipeline::run::StageOutcome,
    lease_ttl: Duration,
) -> Ended {
    match complete_with_retries(queue, lease, o, lease_ttl).await {
        Ok(()) => {
            let state = if o.cache_hit { "cached" } else { "succeeded" };
            let _ = ledger
                .finish_stage(
                    ledger_attempt,
                    state,
                    Some(&o.key),
                    &o.usage,
                    Some(&o.summary),
                    None,
                )
                .await;
            if let Some(recipe) = &o.recipe {
                let _ = ledger.set_key_recipe(ledger_attempt, recipe).await;
            }
            if let Ok(job) = queue.job(&lease.job_id, None).await
                && job.state != "running"
            {
                let error = (job.state != "succeeded").then(|| job.state.clone());
                let _ = ledger.finish_job(&lease.job_id, error.as_deref()).await;
            }
            tracing::info!(job = %lease.job_id, stage = %lease.stage, cached = o.cache_hit, wall_s = o.usage.wall_s, "stage committed");
            Ended::Succeeded
        }
        Err(e) => {
            let msg = e.to_string();
            let _ = ledger
                .finish_stage(
                    ledger_attempt,
                    "failed",
                    Some(&o.key),
                    &o.usage,
                    Some(&o.summary),
                    Some(&msg),
                )
                .await;
            tracing::warn!(job = %lease.job_id, stage = %lease.stage, "{msg}");
            Ended::Lost
        }
    }
}

/// Commit a finished stage, retrying database errors (a restart, a dropped connection) with
/// backoff for as long as the lease could still be held, so a database blip at the end of a
/// stage costs no re-run. A lost lease is final at once.
async fn complete_with_retries(
    queue: &Queue,
    lease: &Lease,
    o: &kiln_pipeline::run::StageOutcome,
    lease_ttl: Duration,
) -> Result<()> {
    let deadline = std::time::Instant::now() + lease_ttl;
    let mut delay = Duration::from_millis(250);
    loop {
        match queue.complete(lease, &o.key, &o.summary).await {
            Err(e @ Error::Ledger { .. }) if std::time::Instant::now() + delay < deadline => {
                tracing::warn!(job = %lease.job_id, stage = %lease.stage, retry_in_s = delay.as_secs_f64(), "commit failed on a database error, retrying: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(8));
            }
            other => return other,
        }
    }
}

async fn report_failure(
    queue: &Queue,
    ledger: &Ledger,
    lease: &Lease,
    ledger_attempt: Option<(i64, &kiln_pipeline::meter::StageUsage)>,
    message: &str,
    fault: Fault,
    cfg: &WorkerConfig,
) -> Ended {
    if let Some((a, usage)) = ledger_attempt {
        let _ = ledger
            .finish_stage(a, "failed", None, usage, None, Some(message))
            .await;
    }
    match queue.fail(lease, message, fault, &cfg.retry).await {
        Ok(Failure::Retry { not_before }) => {
            tracing::warn!(job = %lease.job_id, stage = %lease.stage, retry_in_s = (not_before - crate::queue::now_ms()) as f64 / 1000.0, "stage failed, will retry: {message}");
        }
        Ok(f) => {
            tracing::error!(job = %lease.job_id, stage = %lease.stage, outcome = ?f, "stage failed: {message}");
            let _ = ledger.finish_job(&lease.job_id, Some(message)).await;
        }
        Err(e) => tracing::warn!(job = %lease.job_id, "{e}"),
    }
    Ended::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sku: &str, gpu_slot: Option<&str>) -> WorkerConfig {
        let catalog = crate::prices::PriceCatalog::default_catalog();
        WorkerConfig {
            id: "w".into(),
            name: "w".into(),
            gpus: 1,
            cpu_slots: 1,
            cache: "/nonexistent".into(),
            cache_share: CacheShare::Team,
            db: "/nonexistent/q.sqlite".into(),
            work_root: "/nonexistent".into(),
            lease_ttl: Duration::from_secs(60),
            heartbeat: Duration::from_secs(15),
            poll: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            exe: "kiln".into(),
            drain: true,
            gpu_slot: gpu_slot.map(|s| crate::gpu_slot::GpuSlot::parse(s, &catalog).unwrap()),
            sku: Some(sku.into()),
            catalog,
        }
    }

    #[test]
    fn each_team_gets_its_own_cache_folder_unless_the_cache_is_shared() {
        let team = CacheShare::Team;
        assert_eq!(team.namespace("art").as_deref(), Some("teams/art"));
        assert_eq!(team.namespace("geo_2-x").as_deref(), Some("teams/geo_2-x"));
        // Names that could leave their folder, or collide with an escaped one, are spelled in hex.
        assert_eq!(team.namespace("../a").as_deref(), Some("teams/_2e2e2f61"));
        assert_eq!(team.namespace("_61").as_deref(), Some("teams/_5f3631"));
        assert_eq!(team.namespace("").as_deref(), Some("teams/_"));
        assert_eq!(CacheShare::Global.namespace("art"), None);
        let mut cfg = config("H100", None);
        cfg.cache = "s3://b/cache/".into();
        assert_eq!(cfg.cache_url_for("art"), "s3://b/cache/teams/art");
        cfg.cache_share = "global".parse().unwrap();
        assert_eq!(cfg.cache_url_for("art"), "s3://b/cache/");
        let e = "everyone".parse::<CacheShare>().unwrap_err().to_string();
        assert!(e.contains("--cache-share") && e.contains("global"), "{e}");
    }

    /// An attempt that held a GPU for one hour on a worker declared `--gpus 1 --gpu-slot 0.5
    /// --sku H100`: recorded as 1800 GPU-seconds and charged $6.88 × 0.5 = $3.44 (H100 on-demand
    /// $6.88/GPU-h in the built-in catalog); the budget rate of the slot is $3.44/h too. A whole
    /// GPU is charged $6.88.
    #[test]
    fn a_running_stage_is_charged_the_storage_of_what_it_has_written_so_far() {
        let catalog = crate::prices::PriceCatalog::default_catalog();
        let work = tempfile::tempdir().unwrap();
        let partial = work.path().join("decimate.partial");
        std::fs::create_dir_all(&partial).unwrap();
        std::fs::write(partial.join("lod_0.glb"), vec![0u8; 3_000_000]).unwrap();
        // 3 MB on S3 Standard for 30 days: 0.003 GB × 30/30 × $0.023 = $0.000069.
        let usd = super::storage_so_far_usd(&catalog, work.path(), "decimate");
        assert!((usd - 0.000069).abs() < 1e-12, "{usd}");
        // Nothing written yet, and publish (projected before it starts): 0.
        assert_eq!(
            super::storage_so_far_usd(&catalog, work.path(), "tile"),
            0.0
        );
        assert_eq!(
            super::storage_so_far_usd(&catalog, work.path(), "publish"),
            0.0
        );
    }

    #[test]
    fn a_worker_on_a_half_gpu_slot_is_charged_half() {
        let gpu_slot = Slot {
            index: 0,
            gpu: Some(0),
            claims_gpu: true,
        };
        let hour_on_gpu = kiln_pipeline::meter::StageUsage {
            device: "cuda:0".into(),
            wall_s: 3600.0,
            gpu_s: 3600.0,
            device_name: Some("NVIDIA H100 80GB HBM3".into()),
            ..Default::default()
        };
        let cost_of = |cfg: &WorkerConfig| {
            let u = cfg.charged_usage(gpu_slot, hour_on_gpu.clone());
            let row = crate::ledger::StageRow {
                state: "succeeded".into(),
                device: u.device.clone(),
                wall_s: u.wall_s,
                gpu_s: u.gpu_s,
                device_name: u.device_name.clone(),
                gpu_slot: u.gpu_slot.clone(),
                ..Default::default()
            };
            (
                u.gpu_s,
                cfg.pricing().attempt(&row).usd,
                cfg.slot_usd_per_s(gpu_slot) * 3600.0,
            )
        };
        let (gpu_s, usd, rate) = cost_of(&config("H100", Some("0.5")));
        assert_eq!(gpu_s, 1800.0);
        assert!((usd - 3.44).abs() < 1e-12, "{usd}");
        assert!((rate - 3.44).abs() < 1e-12, "{rate}");
        let (gpu_s, usd, rate) = cost_of(&config("H100", None));
        assert_eq!(gpu_s, 3600.0);
        assert!((usd - 6.88).abs() < 1e-12 && (rate - 6.88).abs() < 1e-12);
        // A 1g.10gb MIG slice of an H100: 1/7 of $6.88 = $0.982857… per slot-hour.
        let (gpu_s, usd, _) = cost_of(&config("H100", Some("H100:1g.10gb")));
        assert!((gpu_s - 3600.0 / 7.0).abs() < 1e-9);
        assert!((usd - 6.88 / 7.0).abs() < 1e-12, "{usd}");
        // CPU stages on the GPU slot hold no GPU and are not relabelled.
        let cpu = kiln_pipeline::meter::StageUsage {
            device: "cuda:0".into(),
            wall_s: 10.0,
            cpu_s: 10.0,
            ..Default::default()
        };
        let cfg = config("H100", Some("0.5"));
        assert_eq!(cfg.charged_usage(gpu_slot, cpu.clone()), cpu);
    }

    /// PostgreSQL goes away as a finished stage commits (every connection cut, new ones refused,
    /// as during a restart) and comes back 1.5 s later: the commit is retried and lands once; the
    /// stage is not run again.
    #[tokio::test]
    async fn a_commit_during_a_database_outage_is_retried_and_lands_once() {
        let url = match std::env::var("KILN_TEST_POSTGRES_URL") {
            Ok(u) => u,
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("CI is set but KILN_TEST_POSTGRES_URL is not: .ci/run starts PostgreSQL")
            }
            Err(_) => return eprintln!("KILN_TEST_POSTGRES_URL unset: skipped"),
        };
        let db = crate::queue::tests::fresh_postgres_db(&url).await;
        let name = db.shown().rsplit('/').next().unwrap().to_string();
        let queue = Queue::with_db(db);
        queue
            .submit(&crate::queue::tests::job("j", "a", 0, &[("ingest", false)]))
            .await
            .unwrap();
        let ttl = Duration::from_secs(60);
        let c = queue
            .claim("w", true, ttl, &crate::queue::tests::NOW)
            .await
            .unwrap()
            .unwrap();
        // The outage, from an administrator's connection to the server's default database.
        use sqlx::Connection;
        let mut admin = sqlx::AnyConnection::connect(&url).await.unwrap();
        let run = |sql: String| sqlx::raw_sql(sqlx::AssertSqlSafe(sql));
        run(format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        run(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        let back = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            run(format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"))
                .execute(&mut admin)
                .await
                .unwrap();
        });
        let outcome = kiln_pipeline::run::StageOutcome {
            kind: kiln_pipeline::dag::StageKind::INGEST,
            key: "k".repeat(64),
            cache_hit: false,
            usage: Default::default(),
            summary: serde_json::json!({}),
            recipe: None,
        };
        let started = std::time::Instant::now();
        complete_with_retries(&queue, &c.lease, &outcome, ttl)
            .await
            .unwrap();
        back.await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(1400),
            "no outage seen"
        );
        let attempts = queue.attempts("j").await.unwrap();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(attempts[0].state, "succeeded");
        assert_eq!(queue.job("j", None).await.unwrap().state, "succeeded");
    }
}
