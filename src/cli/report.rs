//! `kiln report JOB_ID`: the per-stage ledger table and totals (`--json` for machines), or with
//! `--html DIR` a self-contained HTML page with the job's pictures (see `kiln_jobs::job_page`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kiln_jobs::{job_page, ledger::Ledger, report};

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
    #[command(flatten)]
    pub db: DbArgs,
}

/// Print the report.
pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&args.db.target()).await?;
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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", report::render_table(&r));
    }
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
