//! `kiln report JOB_ID`: the per-stage ledger table and totals (`--json` for machines), or with
//! `--html DIR` a self-contained HTML page with the job's pictures (see `kiln_jobs::job_page`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kiln_jobs::costing::{self, CostLine, Pricing};
use kiln_jobs::prices::{OutputPlace, PriceCatalog, Tier};
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
    /// Price model: `on-demand` (list prices, each GPU attempt billed by its provider's
    /// increment and minimum), `spot` (interruptible prices, same billing rules) or `committed`
    /// (also spelt `reserved`: reserved capacity, amortised: allocated seconds exactly). A SKU without a price for the
    /// model is priced on-demand.
    #[arg(long, value_name = "MODE", default_value = "on-demand", value_parser = parse_tier)]
    pub pricing: Tier,
    /// Same as `--pricing spot` (kept for scripts written before --pricing).
    #[arg(long, hide = true, conflicts_with = "pricing")]
    pub spot: bool,
    /// Compare the estimates recorded when jobs ran with what they cost: mean absolute
    /// percentage error per stage kind over the period's jobs that have one (with --since,
    /// --until, --team, --json, --csv).
    #[arg(long, conflicts_with_all = ["job_id", "list", "html"])]
    pub estimate_error: bool,
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
        tier: if args.spot { Tier::Spot } else { args.pricing },
        fallback_sku: args.sku.clone(),
    };
    if args.estimate_error {
        return estimate_error_report(&ledger, &args, &pricing).await;
    }
    let Some(id) = args.job_id.clone() else {
        return period_report(&ledger, &args, &pricing).await;
    };
    let r = report::job_report(&ledger, &id).await?;
    if let Some(dest) = &args.html {
        let output_dir = match &args.output_dir {
            Some(p) => p.clone(),
            None => local_output_dir(&r.job.output)?,
        };
        let page = job_page::write_job_page_priced(&r, &pricing, &output_dir, dest)
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
    let cost = pricing.job_total(&r.stages, &r.job.output);
    let place = catalog.output_place(&r.job.output);
    let (team, budget) = ledger.job_team_and_budget(&r.job.id).await?;
    let job_line = CostLine::for_job_to(
        &r.job.id,
        &team,
        &r.job.state,
        &r.job.output,
        &r.stages,
        &pricing,
    )
    .with_budget(budget);
    if args.json {
        let mut doc = serde_json::to_value(&r)?;
        let line = job_line.clone();
        doc["team"] = team.clone().into();
        doc["cost"] = serde_json::json!({
            "usd": cost.usd,
            "gpu_usd": cost.gpu_usd,
            "cpu_usd": cost.cpu_usd,
            "storage_usd": cost.storage_usd,
            "egress_usd": cost.egress_usd,
            "egress_bytes": line.egress_bytes,
            "waste_usd": cost.waste_usd,
            "budget_usd": line.budget_usd,
            "over_budget": line.over_budget,
            "output_place": place,
            "attempts": attempt_costs(&r.stages, &pricing, place.as_ref()),
            "price_catalog": catalog.version,
            "tier": pricing.tier,
            "pricing": pricing.tier.name(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if args.csv {
        // One line per stage (busy and idle GPU-seconds per stage), then the job's.
        let mut lines = stage_lines(&r, &team, &pricing);
        lines.push(job_line);
        print!("{}", cost_csv(&lines)?);
    } else {
        print!("{}", report::render_table(&r));
        print!("{}", cost_table(&r.stages, &pricing, place.as_ref()));
        println!(
            "cost ${:.4} (GPU ${:.4}, CPU ${:.4}, storage ${:.6}, egress ${:.6}; waste ${:.4}), price catalog {} {}",
            cost.usd,
            cost.gpu_usd,
            cost.cpu_usd,
            cost.storage_usd,
            cost.egress_usd,
            cost.waste_usd,
            catalog.version,
            pricing.tier
        );
        println!("{}", place_line(&catalog, place.as_ref()));
        if let Some(line) = budget_line(&job_line) {
            println!("{line}");
        }
    }
    Ok(())
}

/// The job's budget and whether it went over, one line; `None` without a budget.
fn budget_line(line: &CostLine) -> Option<String> {
    let b = line.budget_usd?;
    Some(if line.over_budget == Some(true) {
        format!(
            "budget ${b:.6}: OVER BUDGET by ${:.6} ({:.0} % over; a stage's output is priced \
             only once it is written, see docs/cost.md)",
            line.usd - b,
            (line.usd / b - 1.0) * 100.0
        )
    } else {
        format!("budget ${b:.6}: within budget (${:.6} left)", b - line.usd)
    })
}

/// `--pricing MODE`.
fn parse_tier(text: &str) -> Result<Tier, String> {
    text.parse()
}

/// Each attempt's cost split, for `--json` (`cost.attempts`, in the order of `stages`).
fn attempt_costs(
    rows: &[kiln_jobs::ledger::StageRow],
    pricing: &Pricing<'_>,
    place: Option<&OutputPlace>,
) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| {
            let c = pricing.attempt_to(r, place);
            serde_json::json!({
                "stage": r.stage,
                "attempt": r.attempt,
                "sku": pricing.priced_sku(r),
                "billed_gpu_s": pricing.billed_gpu_s(r),
                "pricing_note": pricing.sku_note(r),
                "gpu_usd": c.gpu_usd,
                "cpu_usd": c.cpu_usd,
                "storage_usd": c.storage_usd,
                "egress_usd": c.egress_usd,
                "usd": c.usd,
                "waste_usd": c.waste_usd,
            })
        })
        .collect()
}

/// The per-attempt USD table of a job: compute (GPU or CPU), storage and egress columns and
/// their totals.
fn cost_table(
    rows: &[kiln_jobs::ledger::StageRow],
    pricing: &Pricing<'_>,
    place: Option<&OutputPlace>,
) -> String {
    let mut out = format!(
        "{:<10} {:>3} {:<10} {:>9} {:>12} {:>12} {:>12} {:>12}\n",
        "stage", "try", "SKU", "billed s", "compute USD", "storage USD", "egress USD", "USD"
    );
    let mut total = kiln_jobs::costing::AttemptCost::default();
    let mut notes = Vec::new();
    for r in rows {
        let c = pricing.attempt_to(r, place);
        let sku = pricing.priced_sku(r);
        out.push_str(&format!(
            "{:<10} {:>3} {:<10} {:>9} {:>12.6} {:>12.6} {:>12.6} {:>12.6}\n",
            r.stage,
            r.attempt,
            sku.as_deref().unwrap_or("cpu"),
            if sku.is_some() {
                format!("{:.1}", pricing.billed_gpu_s(r))
            } else {
                "-".to_string()
            },
            c.gpu_usd + c.cpu_usd,
            c.storage_usd,
            c.egress_usd,
            c.usd
        ));
        if let Some(n) = pricing.sku_note(r) {
            notes.push(format!("note: {} attempt {}: {n}\n", r.stage, r.attempt));
        }
        total.gpu_usd += c.gpu_usd;
        total.cpu_usd += c.cpu_usd;
        total.storage_usd += c.storage_usd;
        total.egress_usd += c.egress_usd;
        total.usd += c.usd;
    }
    out.push_str(&format!(
        "{:<10} {:>3} {:<10} {:>9} {:>12.6} {:>12.6} {:>12.6} {:>12.6}\n",
        "total",
        rows.len(),
        "",
        "",
        total.gpu_usd + total.cpu_usd,
        total.storage_usd,
        total.egress_usd,
        total.usd
    ));
    out.extend(notes);
    out
}

/// Where the output is and how storage and egress were priced, one line.
fn place_line(catalog: &PriceCatalog, place: Option<&OutputPlace>) -> String {
    match (place, catalog.placement.as_ref()) {
        (Some(p), Some(pl)) => format!(
            "storage: stage cache in {} for {} days, published output in {} for {} days; output at {}: {}",
            pl.storage_class,
            pl.stage_cache_days,
            p.storage_class,
            pl.published_days,
            p.place,
            p.route.as_ref().map_or_else(
                || "same place as the workers, no egress".to_string(),
                |r| format!("egress {}", r.describe())
            )
        ),
        _ => format!(
            "storage and egress: not priced (price catalog {} has no [placement])",
            catalog.file
        ),
    }
}

async fn period_report(
    ledger: &Ledger,
    args: &ReportArgs,
    pricing: &Pricing<'_>,
) -> anyhow::Result<()> {
    let (since, until) = period_bounds(args)?;
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
        let (_, budget) = ledger.job_team_and_budget(&job.id).await?;
        lines.push(
            CostLine::for_job_to(&job.id, &team, &job.state, &job.output, &rows, pricing)
                .with_budget(budget),
        );
    }
    if args.by == By::Team {
        lines = costing::by_team(&lines);
    }
    let mut total = CostLine::default();
    total.key = "total".into();
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
    print!("{}", period_table(&lines, &total, args.by));
    println!(
        "prices: catalog {} ({}), {}; USD includes storage and egress",
        pricing.catalog.version, pricing.catalog.file, pricing.tier
    );
    Ok(())
}

/// The period report's text table: one line per job (or team) and the total; busy and idle
/// GPU-seconds read `not measured` where any GPU attempt had no NVML figure (never 0).
fn period_table(lines: &[CostLine], total: &CostLine, by: By) -> String {
    let mut out = format!(
        "{:<40} {:<10} {:<10} {:>5} {:>6} {:>10} {:>9} {:>12} {:>12} {:>11} {:>11} {:>11} {:>10}\n",
        if by == By::Team { "team" } else { "job" },
        "team",
        "state",
        "tries",
        "waste",
        "CPU s",
        "GPU-h",
        "busy GPU-s",
        "idle GPU-s",
        "storage USD",
        "egress USD",
        "USD",
        "waste USD"
    );
    for l in lines.iter().chain(std::iter::once(total)) {
        out.push_str(&format!(
            "{:<40} {:<10} {:<10} {:>5} {:>6} {:>10.1} {:>9.4} {:>12} {:>12} {:>11.6} {:>11.6} {:>11.4} {:>10.4}\n",
            l.key,
            l.team,
            l.state,
            l.attempts,
            l.wasted_attempts,
            l.cpu_s,
            l.gpu_hours,
            report::measured(l.gpu_busy_s),
            report::measured(l.gpu_idle_s),
            l.storage_usd,
            l.egress_usd,
            l.usd,
            l.waste_usd
        ));
    }
    out
}

/// `--since` and `--until` as UTC bounds, each parsed by [`utc_bound`].
fn period_bounds(args: &ReportArgs) -> anyhow::Result<(Option<String>, Option<String>)> {
    let bound =
        |flag: &str, t: &Option<String>| t.as_deref().map(|t| utc_bound(flag, t)).transpose();
    Ok((
        bound("--since", &args.since)?,
        bound("--until", &args.until)?,
    ))
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

/// Cost lines as CSV (header row first). Every numeric column holds a number or nothing: busy
/// and idle GPU-seconds that were not measured, and `budget_usd`/`over_budget` of lines without a
/// budget, are empty cells (a spreadsheet reads them as blank, not 0, in its sums; the table says
/// `not measured` and JSON `null`).
fn cost_csv(lines: &[CostLine]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for l in lines {
        w.serialize(l)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// One cost line per stage of a job (key = stage name, state = its last attempt's).
fn stage_lines(r: &report::JobReport, team: &str, pricing: &Pricing<'_>) -> Vec<CostLine> {
    r.gpu_by_stage
        .iter()
        .map(|g| {
            let rows: Vec<_> = r
                .stages
                .iter()
                .filter(|s| s.stage == g.stage)
                .cloned()
                .collect();
            let state = rows.last().map_or("", |s| s.state.as_str());
            CostLine::for_job_to(&g.stage, team, state, &r.job.output, &rows, pricing)
        })
        .collect()
}

/// `kiln report --estimate-error`: per stage kind, the MAPE of recorded estimates against the
/// ledger's costs ([`kiln_jobs::estimate_error`]).
async fn estimate_error_report(
    ledger: &Ledger,
    args: &ReportArgs,
    pricing: &Pricing<'_>,
) -> anyhow::Result<()> {
    use kiln_jobs::estimate::RecordedEstimate;
    use kiln_jobs::estimate_error;
    let (since, until) = period_bounds(args)?;
    let (mut compared, mut without) = (Vec::new(), 0usize);
    for (job, team) in ledger
        .jobs_between(since.as_deref(), until.as_deref())
        .await?
    {
        if args.team.as_ref().is_some_and(|t| *t != team) {
            continue;
        }
        let Some(v) = ledger.estimate(&job.id).await? else {
            without += 1;
            continue;
        };
        let Ok(rec) = serde_json::from_value::<RecordedEstimate>(v) else {
            without += 1;
            continue;
        };
        let rows = ledger.stages(&job.id).await?;
        compared.extend(estimate_error::compare_job(&job.id, &rec, &rows, pricing));
    }
    let errors = estimate_error::by_stage(&compared);
    if args.json {
        let doc = serde_json::json!({
            "price_catalog": pricing.catalog.version,
            "pricing": pricing.tier.name(),
            "compares": "compute only (GPU and CPU USD; storage and egress are not estimated)",
            "jobs_without_estimate": without,
            "stages": errors,
            "comparisons": compared,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if args.csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        for e in &errors {
            w.serialize(e)?;
        }
        print!("{}", String::from_utf8(w.into_inner()?)?);
        return Ok(());
    }
    println!(
        "{:<12} {:>5} {:>9} {:>14} {:>14} {:>8}",
        "stage", "stages", "MAPE %", "estimated USD", "actual USD", "skipped"
    );
    for e in &errors {
        println!(
            "{:<12} {:>5} {:>9} {:>14.6} {:>14.6} {:>8}",
            e.stage,
            e.stages,
            e.mape_pct.map_or("-".to_string(), |m| format!("{m:.1}")),
            e.estimated_usd,
            e.actual_usd,
            e.skipped
        );
    }
    println!(
        "compute only (GPU and CPU time: `kiln plan` does not estimate storage or egress, so both sides leave them out); {} jobs compared; {without} jobs have no recorded estimate (recorded by `kiln run`, and for queued jobs by the worker that claims their first stage, since ledger migration 7); stages = stages of that kind compared (one per job); MAPE = mean |estimated − actual| / actual over stages whose compute cost > 0; skipped = cached or free stages; prices: catalog {} ({})",
        compared
            .iter()
            .map(|c| &c.job_id)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        pricing.catalog.version,
        pricing.tier.name()
    );
    Ok(())
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

    /// On-demand prices, unknown GPUs priced as an H100.
    fn on_demand_h100(catalog: &PriceCatalog) -> Pricing<'_> {
        Pricing {
            catalog,
            tier: Tier::OnDemand,
            fallback_sku: Some("H100".into()),
        }
    }

    /// A successful 100 s train attempt on one GPU, `busy` GPU-seconds measured (None: no NVML).
    fn train_on_gpu(busy: Option<f64>) -> kiln_jobs::ledger::StageRow {
        kiln_jobs::ledger::StageRow {
            stage: "train".into(),
            state: "succeeded".into(),
            device: "cuda:0".into(),
            wall_s: 100.0,
            gpu_s: 100.0,
            gpu_busy_s: busy,
            ..Default::default()
        }
    }

    #[test]
    fn csv_leaves_unmeasured_gpu_time_empty_and_has_compute_usd_team_and_budget() {
        let catalog = PriceCatalog::default_catalog();
        let p = on_demand_h100(&catalog);
        let gpu = train_on_gpu;
        // 100 s allocated, 64 busy: idle 36. Without NVML: empty cells in both columns.
        let measured = CostLine::for_job("m", "art", "succeeded", &[gpu(Some(64.0))], &p)
            .with_budget(Some(0.1));
        let unmeasured = CostLine::for_job("u", "", "succeeded", &[gpu(None)], &p);
        let text = cost_csv(&[measured, unmeasured]).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let h = r.headers().unwrap().clone();
        let col = |name: &str| h.iter().position(|x| x == name).unwrap();
        let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
        assert_eq!(&rows[0][col("gpu_busy_s")], "64.0");
        assert_eq!(&rows[0][col("gpu_idle_s")], "36.0");
        assert_eq!(&rows[1][col("gpu_busy_s")], "");
        assert_eq!(&rows[1][col("gpu_idle_s")], "");
        // 100 s of an H100 at $6.88/GPU-h (AWS, per second, 60 s minimum) = $0.191111.
        let compute: f64 = rows[0][col("compute_usd")].parse().unwrap();
        assert!((compute - 100.0 / 3600.0 * 6.88).abs() < 1e-9, "{compute}");
        assert_eq!(&rows[0][col("team")], "art");
        // $0.191 against a $0.10 budget: over.
        assert_eq!(&rows[0][col("budget_usd")], "0.1");
        assert_eq!(&rows[0][col("over_budget")], "true");
        assert_eq!(&rows[1][col("budget_usd")], "");
    }

    #[test]
    fn the_storage_line_names_the_stage_cache_class_and_the_published_class_apart() {
        let text = format!(
            "{}\n[[destination]]\nurl_prefix = \"s3://tiles/\"\nplace = \"cloudflare:auto\"\nstorage_class = \"r2\"\n",
            include_str!("../../jobs/src/prices/default.toml")
        );
        let catalog = PriceCatalog::from_toml_str(&text, "r2.toml").unwrap();
        let place = catalog.output_place("s3://tiles/fox");
        let l = place_line(&catalog, place.as_ref());
        assert!(
            l.contains("stage cache in s3-standard for 30 days")
                && l.contains("published output in r2 for 30 days"),
            "{l}"
        );
    }

    #[test]
    fn the_cost_table_shows_sku_and_billed_seconds_and_says_when_a_device_is_unknown() {
        let catalog = PriceCatalog::default_catalog();
        let p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        let gpu = |name: &str, s: f64| kiln_jobs::ledger::StageRow {
            stage: "train".into(),
            attempt: 1,
            state: "succeeded".into(),
            device: "cuda:0".into(),
            device_name: Some(name.into()),
            wall_s: s,
            gpu_s: s,
            ..Default::default()
        };
        // A 30 s H100 attempt is billed AWS's 60 s minimum: 60/3600 × $6.88 = $0.114667.
        let h100 = gpu("NVIDIA H100 80GB HBM3", 30.0);
        assert_eq!(p.priced_sku(&h100).as_deref(), Some("H100"));
        assert_eq!(p.billed_gpu_s(&h100), 60.0);
        assert_eq!(p.sku_note(&h100), None);
        // An RTX 4090 is not in the catalog: the dearest GPU (H200, $7.90/h), 60 s minimum.
        let rtx = gpu("NVIDIA GeForce RTX 4090", 10.0);
        let t = cost_table(&[h100, rtx], &p, None);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].contains("SKU") && lines[0].contains("billed s"),
            "{t}"
        );
        assert!(
            lines[1].contains("H100") && lines[1].contains("60.0"),
            "{t}"
        );
        assert!(lines[1].contains("0.114667"), "{t}");
        assert!(
            lines[2].contains("H200") && lines[2].contains("0.131667"),
            "{t}"
        );
        assert!(
            t.contains("priced as the dearest GPU, H200 (unknown device NVIDIA GeForce RTX 4090"),
            "{t}"
        );
    }

    #[test]
    fn the_budget_line_flags_a_job_that_went_over() {
        let mut over = CostLine::default();
        over.usd = 0.001063;
        let over = over.with_budget(Some(0.0008));
        let l = budget_line(&over).unwrap();
        // 0.001063 − 0.0008 = 0.000263; 0.001063 / 0.0008 − 1 = 32.9 %.
        assert!(
            l.contains("OVER BUDGET by $0.000263") && l.contains("33 % over"),
            "{l}"
        );
        let within = CostLine::default().with_budget(Some(1.0));
        assert!(budget_line(&within).unwrap().contains("within budget"));
        assert_eq!(budget_line(&CostLine::default()), None);
    }

    #[test]
    fn the_period_table_shows_busy_and_idle_gpu_seconds_or_not_measured() {
        let catalog = PriceCatalog::default_catalog();
        let p = on_demand_h100(&catalog);
        let gpu = train_on_gpu;
        // Job m: 100 s allocated, 64 busy, idle 36; job u: no NVML. The total cannot be measured.
        let lines = [
            CostLine::for_job("m", "art", "succeeded", &[gpu(Some(64.0))], &p),
            CostLine::for_job("u", "art", "succeeded", &[gpu(None)], &p),
        ];
        let mut total = CostLine::default();
        total.key = "total".into();
        for l in &lines {
            total.add(l);
        }
        let text = period_table(&lines, &total, By::Job);
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("busy GPU-s") && header.contains("idle GPU-s"),
            "{header}"
        );
        let line = |key: &str| {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(key))
                .unwrap()
                .to_string()
        };
        let m: Vec<String> = line("m").split_whitespace().map(String::from).collect();
        assert_eq!((m[7].as_str(), m[8].as_str()), ("64.0", "36.0"), "{text}");
        assert_eq!(line("u").matches("not measured").count(), 2, "{text}");
        assert_eq!(line("total").matches("not measured").count(), 2, "{text}");
    }

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
