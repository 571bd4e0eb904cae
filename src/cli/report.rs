//! `kiln report JOB_ID`: the per-stage ledger table and totals (`--json` for machines), or with
//! `--html DIR` a self-contained HTML page with the job's pictures (see `kiln_jobs::job_page`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kiln_jobs::costing::{self, CostLine, Pricing};
use kiln_jobs::prices::{PriceCatalog, Tier};
use kiln_jobs::{job_page, ledger::Ledger, report};

use super::DbArgs;

/// Arguments of `kiln report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Job id as printed by `kiln run` or `kiln submit`. Without it (and without --list): the
    /// cost of every job in a period, per job or per team.
    pub job_id: Option<String>,
    /// List recorded jobs instead.
    #[arg(long)]
    pub list: bool,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "html")]
    pub json: bool,
    /// Write a self-contained HTML report (images embedded) to DIR/index.html: held-out view
    /// triptychs and training curves, LOD renders, a tile map and the cost table.
    #[arg(long, value_name = "DIR", conflicts_with = "list")]
    pub html: Option<PathBuf>,
    /// Read the job's outputs from this local folder instead of the job's recorded output
    /// (for outputs published to S3 and copied down, or moved since).
    #[arg(long, value_name = "PATH", requires = "html")]
    pub output_dir: Option<PathBuf>,
    /// Period report: only this team's jobs (`local` = jobs run with `kiln run`).
    #[arg(long, conflicts_with = "job_id")]
    pub team: Option<String>,
    /// Period report: jobs created at or after this UTC time (RFC 3339 or a date, 2026-11-01).
    #[arg(long, value_name = "TIME", conflicts_with = "job_id")]
    pub since: Option<String>,
    /// Period report: jobs created before this UTC time (RFC 3339 or a date).
    #[arg(long, value_name = "TIME", conflicts_with = "job_id")]
    pub until: Option<String>,
    /// Period report: one line per job, or per team.
    #[arg(long, value_enum, default_value_t = By::Job, conflicts_with = "job_id")]
    pub by: By,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with_all = ["json", "html"])]
    pub csv: bool,
    /// Price catalog TOML [default: the built-in one; see `kiln plan --prices`].
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Price GPU rows whose device is not in the catalog as this SKU [default: the dearest].
    #[arg(long)]
    pub sku: Option<String>,
    /// Spot prices instead of on-demand (on-demand where the catalog has no spot price).
    #[arg(long)]
    pub spot: bool,
    #[command(flatten)]
    pub db: DbArgs,
}

/// One line per job or per team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Job,
    Team,
}

/// Print the report.
pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect_existing(&args.db.target()).await?;
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
    let catalog = match &args.prices {
        Some(p) => PriceCatalog::from_file(p)?,
        None => PriceCatalog::default_catalog(),
    };
    if let Some(s) = &args.sku {
        catalog.sku(s)?;
    }
    let pricing = Pricing {
        catalog: &catalog,
        tier: if args.spot {
            Tier::Spot
        } else {
            Tier::OnDemand
        },
        fallback_sku: args.sku.clone(),
    };
    let Some(id) = args.job_id.clone() else {
        return period_report(&ledger, &args, &pricing).await;
    };
    let r = report::job_report(&ledger, &id).await?;
    if let Some(dest) = &args.html {
        let output_dir = match &args.output_dir {
            Some(p) => p.clone(),
            None => local_output_dir(&r.job.output)?,
        };
        let page = job_page::write_job_page(&r, &output_dir, dest)
            .with_context(|| format!("writing the HTML report of job {id}"))?;
        for n in &page.notes {
            eprintln!("note: {n}");
        }
        println!(
            "wrote {} ({} images embedded)",
            page.index.display(),
            page.images
        );
        return Ok(());
    }
    let cost = pricing.total(&r.stages);
    if args.json {
        let mut doc = serde_json::to_value(&r)?;
        doc["cost"] = serde_json::json!({
            "usd": cost.usd,
            "gpu_usd": cost.gpu_usd,
            "cpu_usd": cost.cpu_usd,
            "waste_usd": cost.waste_usd,
            "price_catalog": catalog.version,
            "tier": pricing.tier,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if args.csv {
        let line = CostLine::for_job(&r.job.id, "", &r.job.state, &r.stages, &pricing);
        print!("{}", cost_csv(&[line])?);
    } else {
        print!("{}", report::render_table(&r));
        println!(
            "cost ${:.4} (GPU ${:.4}, CPU ${:.4}; waste ${:.4}), price catalog {} {}",
            cost.usd,
            cost.gpu_usd,
            cost.cpu_usd,
            cost.waste_usd,
            catalog.version,
            if args.spot { "spot" } else { "on-demand" }
        );
    }
    Ok(())
}

async fn period_report(
    ledger: &Ledger,
    args: &ReportArgs,
    pricing: &Pricing<'_>,
) -> anyhow::Result<()> {
    let since = args
        .since
        .as_deref()
        .map(|t| utc_bound("--since", t))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|t| utc_bound("--until", t))
        .transpose()?;
    if let (Some(a), Some(b)) = (&since, &until)
        && a >= b
    {
        bail!("--since {a} is not before --until {b}: the period is empty");
    }
    let mut lines = Vec::new();
    for (job, team) in ledger
        .jobs_between(since.as_deref(), until.as_deref())
        .await?
    {
        if args.team.as_ref().is_some_and(|t| *t != team) {
            continue;
        }
        let rows = ledger.stages(&job.id).await?;
        lines.push(CostLine::for_job(
            &job.id, &team, &job.state, &rows, pricing,
        ));
    }
    if args.by == By::Team {
        lines = costing::by_team(&lines);
    }
    let mut total = CostLine {
        key: "total".into(),
        ..Default::default()
    };
    for l in &lines {
        total.add(l);
    }
    if args.json {
        let doc = serde_json::json!({
            "since": args.since,
            "until": args.until,
            "team": args.team,
            "by": if args.by == By::Team { "team" } else { "job" },
            "price_catalog": pricing.catalog.version,
            "tier": pricing.tier,
            "lines": lines,
            "total": total,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if args.csv {
        print!("{}", cost_csv(&lines)?);
        return Ok(());
    }
    println!(
        "{:<40} {:<10} {:<10} {:>5} {:>6} {:>10} {:>9} {:>11} {:>10}",
        if args.by == By::Team { "team" } else { "job" },
        "team",
        "state",
        "tries",
        "waste",
        "CPU s",
        "GPU-h",
        "USD",
        "waste USD"
    );
    for l in lines.iter().chain(std::iter::once(&total)) {
        println!(
            "{:<40} {:<10} {:<10} {:>5} {:>6} {:>10.1} {:>9.4} {:>11.4} {:>10.4}",
            l.key,
            l.team,
            l.state,
            l.attempts,
            l.wasted_attempts,
            l.cpu_s,
            l.gpu_hours,
            l.usd,
            l.waste_usd
        );
    }
    println!(
        "prices: catalog {} ({}), {}",
        pricing.catalog.version,
        pricing.catalog.file,
        if pricing.tier == Tier::Spot {
            "spot"
        } else {
            "on-demand"
        }
    );
    Ok(())
}

/// `text` (RFC 3339 with any offset, or a date `YYYY-MM-DD` meaning its UTC midnight) as the
/// ledger's UTC timestamp format, so that text order is time order.
fn utc_bound(flag: &str, text: &str) -> anyhow::Result<String> {
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight").and_utc())
        })
        .map_err(|_| {
            anyhow::anyhow!(
                "{flag} {text}: expected a date (2026-11-01) or an RFC 3339 time (2026-11-01T12:00:00Z, 2026-11-01T14:00:00+02:00)"
            )
        })?;
    Ok(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// Cost lines as CSV (header row first).
fn cost_csv(lines: &[CostLine]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for l in lines {
        w.serialize(l)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// The local folder of a job's recorded `output` (a path, possibly relative to where `kiln run`
/// ran, or a `file://` URL).
///
/// # Errors
/// When the output is a remote URL (`s3://`, …) or the folder does not exist here, with what to do.
fn local_output_dir(output: &str) -> anyhow::Result<PathBuf> {
    let path = match output.split_once("://") {
        Some(("file", rest)) => PathBuf::from(rest),
        Some((scheme, _)) => bail!(
            "the job's output `{output}` is not a local folder ({scheme}://); copy it to a local \
             folder and pass --output-dir PATH"
        ),
        None => PathBuf::from(output),
    };
    if !path.is_dir() {
        let hint = if Path::new(&path).is_relative() {
            " (relative paths are resolved against the current folder; run this where `kiln run` \
             ran, or pass --output-dir PATH)"
        } else {
            " (pass --output-dir PATH if it was moved)"
        };
        bail!(
            "the job's output folder `{}` does not exist{hint}",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_outputs_are_refused_with_a_hint() {
        let e = local_output_dir("s3://bucket/out/fox")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a local folder") && e.contains("--output-dir"),
            "{e}"
        );
    }

    #[test]
    fn missing_relative_outputs_say_where_they_were_looked_for() {
        let e = local_output_dir("no/such/out").unwrap_err().to_string();
        assert!(e.contains("no/such/out") && e.contains("relative"), "{e}");
    }

    #[test]
    fn file_urls_and_paths_resolve_to_local_folders() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().display().to_string();
        assert_eq!(local_output_dir(&p).unwrap(), dir.path());
        assert_eq!(
            local_output_dir(&format!("file://{p}")).unwrap(),
            dir.path()
        );
    }
}
