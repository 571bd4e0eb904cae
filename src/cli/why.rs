//! `kiln why JOB STAGE`: why a stage ran again — what changed in its content key against an
//! earlier run of the same job name (or `--against JOB`). The logic is `kiln_jobs::why`.

use anyhow::{Context, bail};
use kiln_jobs::ledger::{Ledger, StageRow};
use kiln_pipeline::dag::KeyRecipe;

use super::DbArgs;

/// Arguments of `kiln why`.
#[derive(Debug, clap::Args)]
pub struct WhyArgs {
    /// The job id (`kiln report --list`, `kiln jobs`).
    pub job: String,
    /// The stage (ingest, reconstruct, train, decimate, tile, publish).
    pub stage: String,
    /// Compare with this job instead of the latest earlier job with the same name.
    #[arg(long, value_name = "JOB")]
    pub against: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArgs,
}

fn recipe_of(rows: &[StageRow], stage: &str) -> Option<(String, KeyRecipe)> {
    rows.iter().rev().find_map(|r| {
        let recipe = serde_json::from_value(r.key_recipe.clone()?).ok()?;
        (r.stage == stage).then(|| (r.stage_key.clone().unwrap_or_default(), recipe))
    })
}

/// Print what changed.
pub async fn run(args: WhyArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect_existing(&args.db.target()).await?;
    let job = ledger.job(&args.job).await?;
    let rows = ledger.stages(&args.job).await?;
    let Some((key, recipe)) = recipe_of(&rows, &args.stage) else {
        bail!(
            "job {} has no recorded key for stage `{}` (stages with keys: {}); it did not reach that stage, or ran before Kiln recorded keys",
            args.job,
            args.stage,
            rows.iter()
                .filter(|r| r.key_recipe.is_some())
                .map(|r| r.stage.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let other = match &args.against {
        Some(o) => {
            let rows = ledger.stages(o).await?;
            let r = recipe_of(&rows, &args.stage).with_context(|| {
                format!("job {o} has no recorded key for stage `{}`", args.stage)
            })?;
            Some((o.clone(), r))
        }
        None => {
            let mut found = None;
            for j in ledger.jobs().await? {
                if j.name != job.name || j.id == job.id || j.created_at >= job.created_at {
                    continue;
                }
                if let Some(r) = recipe_of(&ledger.stages(&j.id).await?, &args.stage) {
                    found = Some((j.id, r));
                    break;
                }
            }
            found
        }
    };
    let Some((other_id, (other_key, other_recipe))) = other else {
        println!(
            "{} {}: key {} — no earlier `{}` job with this stage to compare with; it ran because nothing had this key yet",
            args.job,
            args.stage,
            &key[..key.len().min(12)],
            job.name
        );
        return Ok(());
    };
    let changes = kiln_jobs::why::diff(&other_recipe, &recipe);
    if args.json {
        let doc = serde_json::json!({
            "job": args.job, "stage": args.stage, "key": key,
            "against": other_id, "against_key": other_key, "changes": changes,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{} {}: key {} vs {} in {}",
        args.job,
        args.stage,
        &key[..key.len().min(12)],
        &other_key[..other_key.len().min(12)],
        other_id
    );
    if changes.is_empty() {
        println!("  nothing changed: same key, so the output is reused (a cache hit)");
    }
    for line in kiln_jobs::why::describe(&changes, &args.job) {
        println!("  {line}");
    }
    Ok(())
}
