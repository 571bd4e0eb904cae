//! `kiln report JOB_ID`: the per-stage ledger table and totals (`--json` for machines).

use kiln_jobs::{ledger::Ledger, report};

use super::DbArgs;

/// Arguments of `kiln report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Job id as printed by `kiln run` (omit with --list).
    #[arg(required_unless_present = "list")]
    pub job_id: Option<String>,
    /// List recorded jobs instead.
    #[arg(long)]
    pub list: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Print the report.
pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let ledger = Ledger::open(&args.db.path()).await?;
    if args.list {
        let jobs = ledger.jobs().await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&jobs)?);
        } else {
            for j in jobs {
                println!("{}  {:<8} {:<10} {}", j.id, j.kind, j.state, j.created_at);
            }
        }
        return Ok(());
    }
    let id = args.job_id.unwrap_or_default();
    let r = report::job_report(&ledger, &id).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", report::render_table(&r));
    }
    Ok(())
}
