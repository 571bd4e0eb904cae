//! `kiln submit`, `kiln jobs`, `kiln cancel`: the queue from the command line, either straight to
//! its database (the SQLite file of this machine, or the shared PostgreSQL of a fleet), or through
//! the HTTP API of a `kiln serve` (`--api URL --token T`), with the same output either way.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use kiln_jobs::api;
use kiln_jobs::queue::{Attempt, CancelOutcome, Event, Queue, QueuedJob, QueuedStage};
use kiln_jobs::submit::SubmitOptions;

use super::DbArgs;

/// Where the queue is reached over HTTP instead of the database.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// Talk to the HTTP API of `kiln serve` at this base URL (e.g. http://kiln-api:8080) instead
    /// of the database; the token decides the team.
    #[arg(long, value_name = "URL", env = "KILN_API")]
    pub api: Option<String>,
    /// The team bearer token for --api (from `kiln token create`).
    #[arg(long, value_name = "TOKEN", env = "KILN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// A resolved API endpoint: base URL and token.
struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl ApiArgs {
    /// `Some` when `--api` is given; it then needs a token.
    fn resolve(&self) -> anyhow::Result<Option<Api>> {
        let Some(url) = &self.api else {
            return Ok(None);
        };
        let Some(token) = self.token.clone().filter(|t| !t.is_empty()) else {
            bail!("--api needs a token: pass --token or set KILN_TOKEN (`kiln token create`)")
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("HTTP client")?;
        Ok(Some(Api {
            base: url.trim_end_matches('/').to_string(),
            token,
            http,
        }))
    }
}

impl Api {
    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// Send `req` with the token; the body of a 2xx answer, else an error with the API's message.
    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Vec<u8>> {
        let res = req
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("cannot reach the Kiln API at {}", self.base))?;
        let status = res.status();
        let body = res
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {}", self.base))?;
        if !status.is_success() {
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(String::from))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            bail!("{} answered {status}: {message}", self.base);
        }
        Ok(body.to_vec())
    }

    async fn get(&self, path: &str) -> anyhow::Result<Vec<u8>> {
        self.send(self.http.get(self.url(path))).await
    }

    /// The events of job `id`: the SSE stream until it ends (finished jobs) or goes quiet for
    /// [`EVENTS_IDLE`] (running jobs: everything so far has arrived by then).
    async fn events(&self, id: &str) -> anyhow::Result<Vec<Event>> {
        let url = self.url(&format!("/jobs/{id}/events"));
        let mut res = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("cannot reach the Kiln API at {}", self.base))?;
        if !res.status().is_success() {
            bail!("{} answered {} for {url}", self.base, res.status());
        }
        let mut text = String::new();
        while let Ok(chunk) = tokio::time::timeout(EVENTS_IDLE, res.chunk()).await {
            match chunk.with_context(|| format!("reading {url}"))? {
                Some(c) => text.push_str(&String::from_utf8_lossy(&c)),
                None => break,
            }
        }
        Ok(parse_sse_events(&text))
    }
}

/// How long `kiln jobs ID --api` waits for more events of a running job.
const EVENTS_IDLE: Duration = Duration::from_millis(1500);

/// The `data:` lines of an SSE text that hold queue events (others are skipped).
fn parse_sse_events(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Event>(d.trim()).ok())
        .collect()
}

/// Arguments of `kiln submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The job file (TOML); see datasets/jobs/*.toml. With --api, relative local paths in it
    /// resolve on the server.
    pub job: PathBuf,
    /// The submitting team (scopes listing and cancelling; team limits apply). With --api the
    /// token decides the team.
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
    /// A key naming this submission (e.g. a UUID, or your pipeline's run id): submitting again
    /// with the same key and team queues nothing and prints the first job's id, so a retried
    /// submit never runs the job twice. Sent as the `Idempotency-Key` header with --api.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Queue the job: check the file, find its stages (listing the input, as `kiln plan` does), and
/// print the job id.
pub async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("cannot read job file {}", args.job.display()))?;
    if let Some(api) = args.api.resolve()? {
        let body = serde_json::json!({
            "job": text,
            "priority": args.priority,
            "max_attempts": args.max_attempts,
            "output": args.output,
            "budget_usd": args.budget_usd,
        });
        let mut req = api
            .http
            .post(api.url("/jobs"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body)?);
        if let Some(key) = &args.idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        let answer = api.send(req).await.with_context(|| {
            format!("{}: cannot queue (nothing was queued)", args.job.display())
        })?;
        let job: QueuedJob = serde_json::from_slice(&answer).context("unexpected answer")?;
        println!("{}", job.id);
        eprintln!(
            "queued at {} for team {}; `kiln worker` runs it, `kiln jobs {} --api {}` follows it",
            api.base, job.team, job.id, api.base
        );
        return Ok(());
    }
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
    let (id, created) = match &args.idempotency_key {
        Some(key) => {
            kiln_jobs::submit::check_idempotency_key(key)?;
            let s = queue.submit_once(&job, key).await?;
            (s.id, s.created)
        }
        None => {
            queue.submit(&job).await?;
            (job.id.clone(), true)
        }
    };
    println!("{id}");
    if created {
        eprintln!(
            "queued in {}; `kiln worker` runs it, `kiln jobs {id}` follows it",
            queue.db().shown()
        );
    } else {
        eprintln!("already queued as {id} with this --idempotency-key; nothing new was queued");
    }
    Ok(())
}

/// Arguments of `kiln jobs`.
#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Show this job's stages, attempts and events instead of the list.
    pub job: Option<String>,
    /// Only this team's jobs (with --api: always the token's team).
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
    #[command(flatten)]
    pub api: ApiArgs,
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// One job with everything `kiln jobs ID` shows.
struct JobDetail {
    job: QueuedJob,
    stages: Vec<QueuedStage>,
    attempts: Vec<Attempt>,
    events: Vec<Event>,
}

/// List jobs, or show one.
pub async fn jobs(args: JobsArgs) -> anyhow::Result<()> {
    const STATES: [&str; 6] = [
        "queued",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "dead",
    ];
    if let Some(s) = &args.state
        && !STATES.contains(&s.as_str())
    {
        anyhow::bail!("--state {s}: expected one of {}", STATES.join(", "));
    }
    if args.limit < 1 {
        anyhow::bail!("--limit {}: expected at least 1", args.limit);
    }
    let api = args.api.resolve()?;
    if let Some(id) = &args.job {
        let d = match &api {
            Some(api) => {
                let body = api.get(&format!("/jobs/{id}")).await?;
                let d: api::jobs::JobDetail =
                    serde_json::from_slice(&body).context("unexpected answer")?;
                JobDetail {
                    job: d.job,
                    stages: d.stages,
                    attempts: d.attempts,
                    events: api.events(id).await?,
                }
            }
            None => {
                let queue = Queue::open_existing(&args.db.target()).await?;
                JobDetail {
                    job: queue.job(id, args.team.as_deref()).await?,
                    stages: queue.stages(id).await?,
                    attempts: queue.attempts(id).await?,
                    events: queue.events(id, 0).await?,
                }
            }
        };
        print_job(&d, args.json)?;
        return Ok(());
    }
    let (list, shown) = match &api {
        Some(api) => {
            let mut path = format!("/jobs?limit={}", args.limit);
            if let Some(s) = &args.state {
                path.push_str(&format!("&state={s}"));
            }
            let body = api.get(&path).await?;
            let l: api::jobs::JobList =
                serde_json::from_slice(&body).context("unexpected answer")?;
            (l.jobs, api.base.clone())
        }
        None => {
            let queue = Queue::open_existing(&args.db.target()).await?;
            let l = queue
                .jobs(args.team.as_deref(), args.state.as_deref(), args.limit)
                .await?;
            (l, queue.db().shown().to_string())
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if list.is_empty() {
        println!("no jobs in {shown}");
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

fn print_job(d: &JobDetail, json: bool) -> anyhow::Result<()> {
    let (job, stages, attempts, events) = (&d.job, &d.stages, &d.attempts, &d.events);
    if json {
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
    for s in stages {
        println!(
            "  {:<12} {:<10} attempts {}{}",
            s.stage,
            s.state,
            s.attempts,
            s.lease_worker
                .as_deref()
                .map(|w| match s.lease_expires_at {
                    Some(t) if t < kiln_jobs::queue::now_ms() => format!(
                        ", held by {w}, whose lease expired {:.0} s ago (the next worker to poll retakes it)",
                        (kiln_jobs::queue::now_ms() - t) as f64 / 1000.0
                    ),
                    _ => format!(", held by {w}"),
                })
                .unwrap_or_default()
        );
    }
    if !attempts.is_empty() {
        println!("attempts:");
    }
    for a in attempts {
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
    for e in events {
        println!("  {} {:<16} {}", time(e.at), e.kind, e.message);
    }
    Ok(())
}

/// Arguments of `kiln cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The job id (`kiln jobs` lists them).
    pub job: String,
    /// Only cancel when the job is this team's (with --api: always the token's team).
    #[arg(long, env = "KILN_TEAM")]
    pub team: Option<String>,
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Cancel a job.
pub async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let (outcome, state) = match args.api.resolve()? {
        Some(api) => {
            let body = api
                .send(
                    api.http
                        .post(api.url(&format!("/jobs/{}/cancel", args.job))),
                )
                .await?;
            let a: api::jobs::CancelResponse =
                serde_json::from_slice(&body).context("unexpected answer")?;
            let outcome = match a.outcome.as_str() {
                "cancelled" => CancelOutcome::Cancelled,
                "requested" => CancelOutcome::Requested,
                _ => CancelOutcome::AlreadyFinished,
            };
            (outcome, a.state)
        }
        None => {
            let queue = Queue::open_existing(&args.db.target()).await?;
            let outcome = queue.cancel(&args.job, args.team.as_deref()).await?;
            (outcome, queue.job(&args.job, None).await?.state)
        }
    };
    match outcome {
        CancelOutcome::Cancelled => println!("{}: cancelled", args.job),
        CancelOutcome::Requested => println!(
            "{}: cancel requested; the running stage stops at its worker's next heartbeat",
            args.job
        ),
        CancelOutcome::AlreadyFinished => {
            println!("{}: already finished ({state})", args.job);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_data_lines_parse_to_events_and_other_lines_are_skipped() {
        let text = "id: 1\nevent: submitted\ndata: {\"id\":1,\"job_id\":\"j\",\"at\":5,\"kind\":\"submitted\",\"message\":\"m\"}\n\n: keep-alive\n\nevent: error\ndata: {\"error\":\"x\"}\n\n";
        let events = parse_sse_events(text);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "submitted");
    }
}

/// Arguments of `kiln team-limit`.
#[derive(Debug, clap::Args)]
pub struct TeamLimitArgs {
    /// The team.
    pub team: String,
    /// Most stages of this team running at once, across all workers (0 pauses the team).
    pub max_running: i64,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Set a team's concurrency limit.
pub async fn team_limit(args: TeamLimitArgs) -> anyhow::Result<()> {
    if args.team.trim().is_empty() {
        anyhow::bail!("the team name is empty");
    }
    let queue = Queue::open(&args.db.target()).await?;
    queue.set_team_limit(&args.team, args.max_running).await?;
    println!(
        "team {}: at most {} stages running at once",
        args.team, args.max_running
    );
    Ok(())
}
