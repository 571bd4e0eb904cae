//! `kiln regress`: run the sample scenes of `datasets/baselines.toml` and fail on any regression.

use std::path::PathBuf;

use kiln_jobs::regress::{self, RegressOptions, overrides};

/// Arguments of `kiln regress`.
#[derive(Debug, clap::Args)]
pub struct RegressArgs {
    /// Run each scene's quick variant (small images, few steps; minutes on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// Scenes to run, comma-separated [default: all in the baselines file].
    #[arg(long, value_delimiter = ',', value_name = "NAME,…")]
    pub scenes: Vec<String>,
    /// The baselines file; job paths in it are relative to its folder.
    #[arg(long, default_value = "datasets/baselines.toml", value_name = "PATH")]
    pub baselines: PathBuf,
    /// Report folder: junit.xml, summary.md, index.html, results.json, per-scene outputs and job
    /// pages, work dirs and the run's own ledger.
    #[arg(long, default_value = "out/regress", value_name = "DIR")]
    pub out: PathBuf,
    /// Override a job-file key in every scene, e.g. `--set train.steps=150` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// After a deliberate change: write the measured values into the baselines file (tolerances
    /// kept) and print the diff, instead of failing.
    #[arg(long)]
    pub update_baselines: bool,
}

/// Run, print the summary, and fail (exit 1) on any regression or scene error.
pub async fn run(args: RegressArgs) -> anyhow::Result<()> {
    let set = args
        .set
        .iter()
        .map(|s| overrides::parse_override(s))
        .collect::<Result<Vec<_>, _>>()?;
    let resolve = |loc: &str| kiln_datasets::resolve_location(loc).map_err(|e| e.to_string());
    let on_scene = |name: &str, i: usize, n: usize| {
        eprintln!("[{}/{n}] {name}", i + 1);
    };
    let opts = RegressOptions {
        baselines: args.baselines,
        quick: args.quick,
        scenes: args.scenes,
        set,
        out_dir: args.out,
        update_baselines: args.update_baselines,
        resolve_input: &resolve,
        on_scene: &on_scene,
    };
    let outcome = regress::run(&opts).await?;
    print!(
        "{}",
        regress::summary::markdown(&outcome.scenes, &outcome.mode)
    );
    if let Some(diff) = &outcome.baselines_diff {
        if diff.is_empty() {
            println!("baselines unchanged");
        } else {
            println!("baselines updated:\n{diff}");
        }
    }
    println!(
        "reports: {} | {} | {}",
        outcome.html.display(),
        outcome.markdown.display(),
        outcome.junit.display()
    );
    let failures = outcome.failures();
    if failures.is_empty() {
        return Ok(());
    }
    for f in &failures {
        eprintln!("REGRESSION {f}");
    }
    anyhow::bail!(
        "{} failing checks in {} (see {})",
        failures.len(),
        opts.baselines.display(),
        outcome.html.display()
    )
}
