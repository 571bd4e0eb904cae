//! The clap definitions of every subcommand (what the user typed, no I/O) and the dispatcher.

mod bench;
mod bench_scale;
mod check;
mod convert;
mod datasets;
mod eval;
mod plan;
mod queue;
mod regress;
mod report;
mod run;
mod selftest;
mod serve;
mod token;
mod why;
mod worker;

use clap::{Parser, Subcommand, ValueEnum};

/// Kiln: 3D captures and meshes → streamable OGC 3D Tiles, with a per-job GPU-hour ledger.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job file (TOML): ingest → train (capture) or decimate (mesh) → tile → publish.
    Run(run::RunArgs),
    /// Show a job's stages (with `reconstruct` when the capture has no poses) without running it.
    Plan(plan::PlanArgs),
    /// Print a job's per-stage ledger (device, wall/CPU/GPU seconds, bytes) and totals.
    Report(report::ReportArgs),
    /// List or verify the sample datasets.
    Datasets(datasets::DatasetsArgs),
    /// Run the sample scenes of datasets/baselines.toml and fail on any metric regression.
    Regress(regress::RegressArgs),
    /// Serve the job list and a CesiumJS viewer of each job's tileset beside its report.
    Serve(serve::ServeArgs),
    /// Convert a splat file between formats (.ply, .compressed.ply, .spz, .splat, .glb, .sog).
    Convert(convert::ConvertArgs),
    /// Render a tileset's cuts (or a splat file) from a capture's held-out cameras or an orbit and
    /// score them against the photos and the full splats (PSNR/SSIM, splats, bytes).
    Eval(eval::EvalArgs),
    /// Check a 3D Tiles tileset: structure, geometricError, content inside bounding volumes,
    /// budgets, extension declarations, SPZ versions (exit 1 on any error).
    Check(check::CheckArgs),
    /// Compare the CUDA kernels (on a GPU, or on the host emulator) with the CPU rasterizer:
    /// images, every gradient and a few training steps; JSON out, exit 1 on mismatch.
    Selftest(selftest::SelftestArgs),
    /// Queue a job file for workers (`kiln worker`); prints the job id.
    Submit(queue::SubmitArgs),
    /// List queued jobs, or show one job's stages, attempts and events.
    Jobs(queue::JobsArgs),
    /// Cancel a queued or running job (a running stage stops at its next heartbeat).
    Cancel(queue::CancelArgs),
    /// Create, list or revoke the HTTP API's team bearer tokens.
    Token(token::TokenArgs),
    /// Claim and run queued stages until SIGTERM (one stage per GPU slot).
    Worker(worker::WorkerArgs),
    /// Limit how many of a team's stages run at once across all workers.
    TeamLimit(queue::TeamLimitArgs),
    /// Why a stage ran again: what changed in its content key since an earlier run of the job.
    Why(why::WhyArgs),
    /// (internal) Run one claimed stage for `kiln worker`.
    #[command(hide = true)]
    StageExec(worker::StageExecArgs),
    /// Benchmarks: `kiln bench train` (steps/s and ms per step part on any device), `kiln bench
    /// scale` (whole jobs at 1×, 4×, 16× generated input sizes: time, peak memory, growth).
    Bench(bench::BenchArgs),
}

impl Command {
    /// Whether the command keeps network connections open while it works (object storage,
    /// PostgreSQL, HTTP), so that SIGPIPE must stay ignored (see `main`).
    pub fn holds_connections(&self) -> bool {
        matches!(
            self,
            Command::Run(_)
                | Command::Regress(_)
                | Command::Serve(_)
                | Command::Worker(_)
                | Command::StageExec(_)
                | Command::Submit(_)
        )
    }
}

/// Where the ledger and queue live: `--db`, else `$KILN_DB`, else `$KILN_HOME/ledger.sqlite`.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// The ledger and queue database: an SQLite file, or a postgres:// URL shared by many
    /// machines [default: $KILN_DB or <data dir>/kiln/ledger.sqlite].
    #[arg(
        long,
        visible_alias = "queue",
        value_name = "PATH|URL",
        env = "KILN_DB",
        // `--help` would print `[env: KILN_DB=postgres://user:PASSWORD@…]` otherwise.
        hide_env_values = true
    )]
    pub db: Option<String>,
}

impl DbArgs {
    fn target(&self) -> String {
        self.db.clone().unwrap_or_else(|| {
            kiln_jobs::ledger::default_path()
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// Install the tracing subscriber (`RUST_LOG` filters the log; default `info`) and the layer
/// that records each stage's warnings into its summary, whatever the log's filter
/// ([`kiln_pipeline::warnings`]).
pub fn init_logging(format: &LogFormat) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        // sqlx warns about unknown connection parameters with their values (a misspelt
        // `password=`): never log them, whatever RUST_LOG asks.
        .add_directive(
            "sqlx_postgres::options=error"
                .parse()
                .expect("a valid directive"),
        );
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| UserTermsWriter(std::io::stderr()));
    let log = match format {
        LogFormat::Text => log.boxed(),
        LogFormat::Json => log.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(kiln_pipeline::warnings::layer())
        .init();
}

/// A log writer that names the user's own input locations instead of a job's work-directory
/// copies of them ([`kiln_pipeline::input_alias`]).
struct UserTermsWriter<W>(W);

impl<W: std::io::Write> std::io::Write for UserTermsWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => {
                let named = kiln_pipeline::input_alias::in_user_terms(text);
                self.0.write_all(named.as_bytes())?;
            }
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Run the chosen subcommand.
pub async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(a) => run::run(a).await,
        Command::Plan(a) => plan::run(a).await,
        Command::Report(a) => report::run(a).await,
        Command::Datasets(a) => datasets::run(a),
        Command::Regress(a) => regress::run(a).await,
        Command::Serve(a) => serve::run(a).await,
        Command::Convert(a) => convert::run(a),
        Command::Check(a) => check::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Selftest(a) => selftest::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Submit(a) => queue::submit(a).await,
        Command::Jobs(a) => queue::jobs(a).await,
        Command::Cancel(a) => queue::cancel(a).await,
        Command::Token(a) => token::run(a).await,
        Command::Worker(a) => worker::run(a).await,
        Command::StageExec(a) => worker::stage_exec(a).await,
        Command::Why(a) => why::run(a).await,
        Command::TeamLimit(a) => queue::team_limit(a).await,
    }
}
