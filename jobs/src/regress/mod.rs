//! `kiln regress`: run the sample scenes of `datasets/baselines.toml`, compare each metric with its
//! baseline and tolerance, and write JUnit XML, a Markdown summary and an HTML report (with one
//! job report page per scene).
//!
//! Every scene runs from scratch in `<out>/work` (stage caches are keyed by parameters and inputs,
//! not by Kiln's code, so reusing them would hide a regression) and records its stage attempts in
//! `<out>/ledger.sqlite`, which the job pages' cost tables read. Outputs land in
//! `<out>/scenes/<scene>/output`, the job page in its `report/index.html` (where `kiln serve`
//! shows it).
//!
//! Modules: [`baselines`] (the file, and its in-place update), [`overrides`] (dotted-key job-file
//! overrides), [`measure`] (metrics from stage summaries), [`compare`] (verdicts), [`junit`] and
//! [`summary`] (report files).

pub mod baselines;
pub mod compare;
pub mod junit;
pub mod measure;
pub mod overrides;
pub mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use self::baselines::Baselines;
use self::compare::Check;
use crate::ledger::Ledger;
use crate::spec::JobSpec;
use crate::{Error, Result};

/// What to run and where to write.
pub struct RegressOptions<'a> {
    /// The baselines file (`datasets/baselines.toml`); job paths in it are relative to its folder.
    pub baselines: PathBuf,
    /// Use each scene's `quick` mode (small images, few steps) instead of `full`.
    pub quick: bool,
    /// Scene names to run; empty runs all, in file order.
    pub scenes: Vec<String>,
    /// Extra job-file overrides applied to every scene after the mode's own (`train.steps=150`).
    pub set: Vec<(String, toml::Value)>,
    /// Report folder (created): JUnit, Markdown, HTML, per-scene outputs, work dirs, ledger.
    pub out_dir: PathBuf,
    /// Rewrite the baselines file with the measured values (tolerances kept) instead of failing.
    pub update_baselines: bool,
    /// Maps `dataset://` URLs to local paths (and passes others through).
    pub resolve_input: &'a (dyn Fn(&str) -> std::result::Result<String, String> + Sync),
    /// Called when a scene starts: (scene name, index, count).
    pub on_scene: &'a (dyn Fn(&str, usize, usize) + Sync),
}

/// One scene's outcome.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SceneResult {
    pub name: String,
    /// The job id in the regress ledger (absent when the job could not start).
    pub job_id: Option<String>,
    /// Why the scene could not run or failed (job file, dataset, stage error).
    pub error: Option<String>,
    /// One check per baselined or measured metric.
    pub checks: Vec<Check>,
    /// Measured metrics, by name.
    pub measured: BTreeMap<String, f64>,
    /// Wall-clock seconds of the scene's job.
    pub wall_s: f64,
    /// The scene's published output folder.
    pub output_dir: PathBuf,
}

impl SceneResult {
    /// Failing checks plus 1 for a run error.
    #[must_use]
    pub fn failure_count(&self) -> usize {
        self.checks.iter().filter(|c| c.status.is_failure()).count()
            + usize::from(self.error.is_some())
    }
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RegressOutcome {
    /// `quick` or `full`.
    pub mode: String,
    pub scenes: Vec<SceneResult>,
    /// Files written: `junit.xml`, `summary.md`, `index.html`, `results.json`.
    pub junit: PathBuf,
    pub markdown: PathBuf,
    pub html: PathBuf,
    /// With `update_baselines`: the unified diff of the baselines file (empty when unchanged).
    pub baselines_diff: Option<String>,
}

impl RegressOutcome {
    /// One line per failure: scene, metric, baseline, new value (or the scene's run error).
    #[must_use]
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.scenes {
            if let Some(e) = &s.error {
                out.push(format!("{}: run failed: {e}", s.name));
            }
            out.extend(
                s.checks
                    .iter()
                    .filter(|c| c.status.is_failure())
                    .map(|c| format!("{} ({:?})", c.describe(), c.status).to_lowercase()),
            );
        }
        out
    }
}

/// Run the selected scenes and write the reports.
///
/// With `update_baselines`, measured values of scenes that ran replace the file's baselines (so
/// only run errors count as failures in the outcome's checks, which are made against the new
/// values).
///
/// # Errors
/// [`Error::Io`] / [`Error::Spec`] for an unreadable or invalid baselines file, an unknown scene in
/// `scenes`, or report files that cannot be written. A scene that fails to run is not an error
/// here: it is recorded in its [`SceneResult::error`].
pub async fn run(opts: &RegressOptions<'_>) -> Result<RegressOutcome> {
    let baselines = Baselines::from_file(&opts.baselines)?;
    let base_dir = opts
        .baselines
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    for want in &opts.scenes {
        if !baselines.scenes.iter().any(|s| &s.name == want) {
            return Err(Error::Field {
                path: opts.baselines.clone(),
                field: "--scenes".into(),
                expected: format!(
                    "one of {}",
                    baselines
                        .scenes
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                found: want.clone(),
            });
        }
    }
    if baselines.scenes.is_empty() {
        return Err(Error::Baselines {
            path: opts.baselines.clone(),
            message: "no [[scene]] tables: nothing to run".into(),
        });
    }
    let mode_name = if opts.quick { "quick" } else { "full" };
    // Job files and overrides are checked for every selected scene before anything runs, so a
    // typo in `--set` or a missing job file is one configuration error, not a failed scene.
    for scene in baselines
        .scenes
        .iter()
        .filter(|s| opts.scenes.is_empty() || opts.scenes.contains(&s.name))
    {
        let mode = if opts.quick {
            &scene.quick
        } else {
            &scene.full
        };
        scene_job(opts, &base_dir, scene, mode, Path::new("out"))?;
    }
    let out_dir = std::path::absolute(&opts.out_dir).map_err(|source| Error::Io {
        path: opts.out_dir.clone(),
        source,
    })?;
    std::fs::create_dir_all(&out_dir).map_err(|source| Error::Io {
        path: out_dir.clone(),
        source,
    })?;
    let ledger = Ledger::open(&out_dir.join("ledger.sqlite")).await?;
    let selected: Vec<_> = baselines
        .scenes
        .iter()
        .filter(|s| opts.scenes.is_empty() || opts.scenes.contains(&s.name))
        .collect();
    let mut results = Vec::new();
    for (i, scene) in selected.iter().enumerate() {
        (opts.on_scene)(&scene.name, i, selected.len());
        let mode = if opts.quick {
            &scene.quick
        } else {
            &scene.full
        };
        let mut result = run_scene(opts, &ledger, &out_dir, &base_dir, scene, mode).await;
        result.checks = compare::compare(&scene.name, &mode.metrics, &result.measured);
        if mode.metrics.is_empty() && !opts.update_baselines && result.error.is_none() {
            // A scene with nothing to compare must not pass silently.
            result.error = Some(format!(
                "no {mode_name} baselines for scene `{}` in {}; record them with \
                 `kiln regress{} --baselines {} --scenes {} --update-baselines`",
                scene.name,
                opts.baselines.display(),
                if opts.quick { " --quick" } else { "" },
                opts.baselines.display(),
                scene.name
            ));
        }
        results.push(result);
    }

    let mut baselines_diff = None;
    if opts.update_baselines {
        let old = std::fs::read_to_string(&opts.baselines).map_err(|source| Error::Io {
            path: opts.baselines.clone(),
            source,
        })?;
        let values: BTreeMap<String, BTreeMap<String, f64>> = results
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| (r.name.clone(), r.measured.clone()))
            .collect();
        let new = baselines::update_text(&old, &opts.baselines, mode_name, &values)?;
        let diff = similar::TextDiff::from_lines(&old, &new)
            .unified_diff()
            .header("baselines (old)", "baselines (new)")
            .to_string();
        if new != old {
            write_file(&opts.baselines, new.as_bytes())?;
            // Re-check against what was just written, so the reports show the new baselines.
            let updated = Baselines::from_toml(&new, &opts.baselines)?;
            for r in &mut results {
                if let Some(s) = updated.scenes.iter().find(|s| s.name == r.name) {
                    let mode = if opts.quick { &s.quick } else { &s.full };
                    r.checks = compare::compare(&r.name, &mode.metrics, &r.measured);
                }
            }
        }
        baselines_diff = Some(diff);
    }

    let junit = out_dir.join("junit.xml");
    write_file(&junit, junit::junit_xml(&results).as_bytes())?;
    let markdown = out_dir.join("summary.md");
    write_file(&markdown, summary::markdown(&results, mode_name).as_bytes())?;
    let html = out_dir.join("index.html");
    let has_report = |name: &str| {
        out_dir
            .join("scenes")
            .join(name)
            .join("output/report/index.html")
            .is_file()
    };
    write_file(
        &html,
        summary::html(&results, mode_name, &has_report).as_bytes(),
    )?;
    let outcome = RegressOutcome {
        mode: mode_name.into(),
        scenes: results,
        junit,
        markdown,
        html,
        baselines_diff,
    };
    let json = serde_json::to_vec_pretty(&outcome).unwrap_or_default();
    write_file(&out_dir.join("results.json"), &json)?;
    Ok(outcome)
}

/// Run one scene's job fresh; failures become `error` (never abort the other scenes).
async fn run_scene(
    opts: &RegressOptions<'_>,
    ledger: &Ledger,
    out_dir: &Path,
    base_dir: &Path,
    scene: &baselines::Scene,
    mode: &baselines::Mode,
) -> SceneResult {
    let scene_dir = out_dir.join("scenes").join(&scene.name);
    let mut result = SceneResult {
        name: scene.name.clone(),
        output_dir: scene_dir.join("output"),
        ..SceneResult::default()
    };
    let started = std::time::Instant::now();
    match run_scene_job(opts, ledger, out_dir, base_dir, scene, mode, &mut result).await {
        Ok(()) => {}
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            tracing::error!(scene = %scene.name, "{msg}");
            result.error = Some(msg);
        }
    }
    result.wall_s = started.elapsed().as_secs_f64();
    if let Some(id) = &result.job_id
        && result.output_dir.is_dir()
    {
        match crate::report::job_report(ledger, id).await {
            Ok(report) => {
                if let Err(e) = crate::job_page::write_job_page(
                    &report,
                    &result.output_dir,
                    &result.output_dir.join("report"),
                ) {
                    tracing::warn!(scene = %scene.name, "job page not written: {e}");
                }
            }
            Err(e) => tracing::warn!(scene = %scene.name, "job report not read: {e}"),
        }
    }
    result
}

async fn run_scene_job(
    opts: &RegressOptions<'_>,
    ledger: &Ledger,
    out_dir: &Path,
    base_dir: &Path,
    scene: &baselines::Scene,
    mode: &baselines::Mode,
    result: &mut SceneResult,
) -> Result<()> {
    let (job_path, text, spec) = scene_job(opts, base_dir, scene, mode, &result.output_dir)?;
    let work_root = out_dir.join("work");
    let work_dir = work_root.join(&spec.name);
    if work_dir.exists() {
        std::fs::remove_dir_all(&work_dir).map_err(|source| Error::Io {
            path: work_dir.clone(),
            source,
        })?;
    }
    if result.output_dir.exists() {
        std::fs::remove_dir_all(&result.output_dir).map_err(|source| Error::Io {
            path: result.output_dir.clone(),
            source,
        })?;
    }
    let job_id = crate::runner::new_job_id(&spec.name);
    let plan = spec.plan(&job_id, &work_root, &job_path, opts.resolve_input)?;
    result.job_id = Some(job_id);
    let outcome = crate::runner::run_job(&plan, &text, ledger).await?;
    result.measured = measure::measure(&outcome.stages);
    result
        .measured
        .extend(measure::measure_delivered_mesh(&result.output_dir));
    Ok(())
}

/// A scene's job file with the mode's and the command line's overrides and `output` applied:
/// (job path, job text, parsed spec).
///
/// # Errors
/// [`Error::Baselines`] naming the scene's `job` field when the file is missing or the overrides
/// make it invalid.
fn scene_job(
    opts: &RegressOptions<'_>,
    base_dir: &Path,
    scene: &baselines::Scene,
    mode: &baselines::Mode,
    output_dir: &Path,
) -> Result<(PathBuf, String, JobSpec)> {
    let job_path = base_dir.join(&scene.job);
    let text = std::fs::read_to_string(&job_path).map_err(|e| Error::Baselines {
        path: opts.baselines.clone(),
        message: format!(
            "scene `{}`: job = \"{}\" (resolved to {}): {e}",
            scene.name,
            scene.job.display(),
            job_path.display()
        ),
    })?;
    let mut set: Vec<(String, toml::Value)> = mode
        .set
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    set.extend(opts.set.iter().cloned());
    let describe = |set: &[(String, toml::Value)]| {
        set.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let described = describe(&set);
    let overridden = |e: Error| Error::Baselines {
        path: opts.baselines.clone(),
        message: format!(
            "scene `{}`: job {} with overrides [{described}] (from the baselines file and \
             --set) is invalid: {e}",
            scene.name,
            job_path.display(),
        ),
    };
    set.push((
        "output".into(),
        toml::Value::String(output_dir.to_string_lossy().into_owned()),
    ));
    let text = overrides::apply(&text, &job_path, &set).map_err(overridden)?;
    let spec = JobSpec::from_toml(&text, &job_path).map_err(overridden)?;
    Ok((job_path, text, spec))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    kiln_formats::atomic_write::write_atomic(path, bytes).map_err(|e| Error::Io {
        path: path.into(),
        source: std::io::Error::other(e),
    })
}
