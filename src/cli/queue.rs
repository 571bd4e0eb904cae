//! `kiln submit`, `kiln jobs`, `kiln cancel`: the queue from the command line, straight to its
//! database (the SQLite file of this machine, or the shared PostgreSQL of a fleet).

use std::path::PathBuf;

use anyhow::Context;
use kiln_jobs::queue::{CancelOutcome, Queue};
use kiln_jobs::submit::SubmitOptions;

use super::DbArgs;

/// Arguments of `kiln submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The job file (TOML); see datasets/jobs/*.toml.
    pub job: PathBuf,
    /// The submitting team (scopes listing and cancelling; team limits apply).
    #[arg(long, env = "KILN_TEAM", default_value = "default")]
    pub team: String,
    /// Higher runs first; equal priorities run oldest first.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i64,
    /// Failed or lost attempts of one stage before the job is dead-lettered.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: i64,
    /// Override the job file's output URL or path.
    #[arg(long, value_name = "URL")]
    pub output: Option<String>,
    /// Stop the job before it would spend more than this many US dollars (price catalog rates).
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<f64>,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Queue the job: check the file, find its stages (listing the input, as `kiln plan` does), and
/// print the job id.
pub async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("cannot read job file {}", args.job.display()))?;
    let opts = SubmitOptions {
        team: args.team,
        priority: args.priority,
        max_attempts: args.max_attempts,
        output: args.output,
        budget_usd: args.budget_usd,
    };
    let base = std::env::current_dir().context("current directory")?;
    let job = kiln_jobs::submit::prepare(&text, &args.job, &base, &opts)
        .await
        .with_context(|| format!("{}: cannot queue (nothing was queued)", args.job.display()))?;
    let queue = Queue::open(&args.db.target()).await?;
    queue.submit(&job).await?;
    println!("{}", job.id);
    eprintln!(
        "queued in {}; `kiln worker` runs it, `kiln jobs {}` follows it",
        queue.db().shown(),
        job.id
    );
    Ok(())
}

/// Arguments of `kiln jobs`.
#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Show this job's stages, attempts and events instead of the list.
    pub job: Option<String>,
    /// Only this team's jobs.
    #[arg(long, env = "KILN_TEAM")]
    pub team: Option<String>,
    /// Only jobs in this state (queued, running, succeeded, failed, cancelled, dead).
    #[arg(long)]
    pub state: Option<String>,
    /// At most this many jobs, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArgs,
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// List jobs, or show one.
pub async fn jobs(args: JobsArgs) -> anyhow::Result<()> {
    let queue = Queue::open(&args.db.target()).await?;
    if let Some(id) = &args.job {
        let job = queue.job(id, args.team.as_deref()).await?;
        let stages = queue.stages(id).await?;
        let attempts = queue.attempts(id).await?;
        let events = queue.events(id, 0).await?;
        if args.json {
            let doc = serde_json::json!({"job": job, "stages": stages, "attempts": attempts, "events": events});
            println!("{}", serde_json::to_string_pretty(&doc)?);
            return Ok(());
        }
        println!(
            "{} ({}, team {}, priority {}): {}{}",
            job.id,
            job.kind,
            job.team,
            job.priority,
            job.state,
            job.error
                .as_deref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        );
        println!("  input {}\n  output {}", job.input, job.output);
        for s in &stages {
            println!(
                "  {:<12} {:<10} attempts {}{}",
                s.stage,
                s.state,
                s.attempts,
                s.lease_worker
                    .as_deref()
                    .map(|w| format!(", held by {w}"))
                    .unwrap_or_default()
            );
        }
        if !attempts.is_empty() {
            println!("attempts:");
        }
        for a in &attempts {
            println!(
                "  {} {:<12} #{} token {} {:<9} {}{}",
                time(a.started_at),
                a.stage,
                a.attempt,
                a.token,
                a.state,
                a.worker,
                a.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
        }
        println!("events:");
        for e in &events {
            println!("  {} {:<16} {}", time(e.at), e.kind, e.message);
        }
        return Ok(());
    }
    let list = queue
        .jobs(args.team.as_deref(), args.state.as_deref(), args.limit)
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if list.is_empty() {
        println!("no jobs in {}", queue.db().shown());
    }
    for j in &list {
        println!(
            "{:<40} {:<10} {:<12} {:>4}  {}",
            j.id,
            j.state,
            j.team,
            j.priority,
            time(j.submitted_at)
        );
    }
    Ok(())
}

/// Arguments of `kiln cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The job id (`kiln jobs` lists them).
    pub job: String,
    /// Only cancel when the job is this team's.
    #[arg(long, env = "KILN_TEAM")]
    pub team: Option<String>,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Cancel a job.
pub async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let queue = Queue::open(&args.db.target()).await?;
    match queue.cancel(&args.job, args.team.as_deref()).await? {
        CancelOutcome::Cancelled => println!("{}: cancelled", args.job),
        CancelOutcome::Requested => println!(
            "{}: cancel requested; the running stage stops at its worker's next heartbeat",
            args.job
        ),
        CancelOutcome::AlreadyFinished => {
            let j = queue.job(&args.job, None).await?;
            println!("{}: already finished ({})", args.job, j.state);
        }
    }
    Ok(())
}
