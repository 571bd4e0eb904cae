//! `kiln bench scale`: one whole job at 1×, 4×, 16× … of a generated input, each run as its own
//! `kiln run` process, with wall time, CPU time and peak memory (the child's `ru_maxrss` from
//! `wait4`) per size, and the growth exponents between sizes (issue 43 item 6: "cost grows no
//! faster than the work" is checked by these exponents: 1.0 is linear, 0 is bounded).
//!
//! Inputs come from [`kiln_pipeline::synth`]: a photogrammetry-like textured city mesh
//! (`--kind mesh`, `base` triangles at 1×) or an aerial splat scene (`--kind splats`, `base`
//! splats at 1×, SH `--sh-degree`). Each size runs in a fresh `KILN_HOME`, so nothing is reused
//! from a cache.
//!
//! `--peer` runs the field's tool on the same input right after each Kiln run (alternating),
//! measured the same way: gltfpack (`node $KILN_GLTFPACK`, meshoptimizer's simplifier) for
//! meshes, splat-transform (`$KILN_SPLAT_TRANSFORM`, PlayCanvas) decimation for splats, each as
//! one level (½) and as a chain of three (½, ¼, ⅛, the levels an LOD tree needs); the table
//! prints Kiln's CPU time as a ratio to the chain's. The peers only simplify: Kiln's job also
//! tiles, bounds every geometricError and writes the tileset.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use serde::Serialize;

/// What `kiln bench scale` generates and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleKind {
    /// A textured city mesh (`kind = "mesh"` job).
    Mesh,
    /// An aerial splat scene (`kind = "splats"` job).
    Splats,
}

/// Arguments of `kiln bench scale`.
#[derive(Debug, clap::Args)]
pub struct BenchScaleArgs {
    /// Input to generate: mesh (triangles) or splats.
    #[arg(long, value_enum, default_value_t = ScaleKind::Mesh)]
    pub kind: ScaleKind,
    /// Triangles or splats at 1× (≥ 1).
    #[arg(long, default_value_t = 250_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub base: u64,
    /// Size factors, comma-separated, ascending (each ≥ 1).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub factors: Vec<u64>,
    /// SH degree of generated splat scenes (0–3).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: u32,
    /// TOML appended to every job file (e.g. `[tile]` settings), as written in a job file.
    #[arg(long, default_value = "")]
    pub job_extra: String,
    /// Working folder, kept (inputs, jobs, logs, outputs) [default: a temporary folder].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Also run the peer tool on each input (gltfpack for meshes, splat-transform for splats;
    /// `KILN_GLTFPACK` = gltfpack's `cli.js`, `KILN_SPLAT_TRANSFORM` = its launcher, as
    /// `.ci/run` exports them).
    #[arg(long)]
    pub peer: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One size's whole-job figures.
#[derive(Debug, Serialize)]
struct ScaleRow {
    factor: u64,
    /// Triangles or splats in the generated input.
    items: u64,
    input_bytes: u64,
    wall_s: f64,
    /// User + system CPU seconds of the `kiln run` process and its threads.
    cpu_s: f64,
    /// Peak resident memory of the `kiln run` process, MiB (`ru_maxrss`).
    peak_mib: f64,
    items_per_cpu_s: f64,
    /// The peer tool on the same input, with `--peer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    peer: Option<PeerRow>,
}

/// The peer tool's figures on one input.
#[derive(Debug, Serialize)]
struct PeerRow {
    tool: &'static str,
    /// CPU seconds of one level (½).
    one_level_cpu_s: f64,
    /// CPU seconds of the chain ½, ¼, ⅛ (three runs).
    chain_cpu_s: f64,
    /// The largest peak resident memory of those runs, MiB.
    peak_mib: f64,
    /// Kiln's whole-job CPU time ÷ the chain's.
    kiln_over_chain: f64,
}

/// The whole benchmark's result.
#[derive(Debug, Serialize)]
struct ScaleReport {
    kind: ScaleKind,
    cpu_threads: usize,
    rows: Vec<ScaleRow>,
    /// Log-log slope of CPU time against items, first size to last.
    cpu_exponent: Option<f64>,
    /// Log-log slope of peak memory against items, first size to last.
    memory_exponent: Option<f64>,
}

/// Run the benchmark.
pub fn run(a: &BenchScaleArgs) -> anyhow::Result<()> {
    check_factors(&a.factors)?;
    if a.peer {
        peer_program(a.kind)?;
    }
    let (work, _tmp) = super::bench::work_dir_or_temporary(a.work_dir.as_deref())?;
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let work = std::fs::canonicalize(&work)?;
    let mut rows = Vec::new();
    for &factor in &a.factors {
        let items = a.base * factor;
        let dir = work.join(format!("x{factor}"));
        std::fs::create_dir_all(&dir)?;
        let input = generate(a, items, &dir)?;
        let job = write_job(a, &input, &dir)?;
        let mut row = run_job(&job, &dir, factor, items, &input)?;
        if a.peer {
            row.peer = Some(run_peer(a.kind, &input, &dir, row.cpu_s)?);
        }
        if !a.json {
            eprintln!(
                "{factor}×: {} items, {:.1} s wall, {:.1} CPU-s, peak {:.0} MiB",
                row.items, row.wall_s, row.cpu_s, row.peak_mib
            );
        }
        rows.push(row);
    }
    let report = ScaleReport {
        kind: a.kind,
        cpu_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_exponent: exponent(&rows, |r| r.cpu_s),
        memory_exponent: exponent(&rows, |r| r.peak_mib),
        rows,
    };
    print_report(&report, a.json)
}

fn check_factors(factors: &[u64]) -> anyhow::Result<()> {
    if factors.is_empty() || factors.contains(&0) || !factors.is_sorted_by(|x, y| x < y) {
        bail!("--factors {factors:?}: give ascending sizes, each at least 1 (e.g. 1,4,16)");
    }
    Ok(())
}

/// Generate the input of `items` triangles or splats in `dir`; its path.
fn generate(a: &BenchScaleArgs, items: u64, dir: &Path) -> anyhow::Result<PathBuf> {
    let items = usize::try_from(items).context("--base × factor does not fit this machine")?;
    match a.kind {
        ScaleKind::Mesh => {
            let path = dir.join("city.glb");
            let mesh = kiln_pipeline::synth::city_mesh(items);
            let bytes = kiln_formats::mesh::write_glb(&mesh)?;
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        }
        ScaleKind::Splats => {
            let path = dir.join("aerial.ply");
            let splats = kiln_pipeline::synth::aerial_splats(items, a.sh_degree);
            kiln_formats::splats::ply::write(&path, &splats)?;
            Ok(path)
        }
    }
}

/// A job file for `input` in `dir`, with `--job-extra` appended.
fn write_job(a: &BenchScaleArgs, input: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let kind = match a.kind {
        ScaleKind::Mesh => "mesh",
        ScaleKind::Splats => "splats",
    };
    let text = format!(
        "name = \"scale\"\nkind = \"{kind}\"\ninput = {}\noutput = {}\n{}\n",
        toml_string(&input.display().to_string()),
        toml_string(&dir.join("out").display().to_string()),
        a.job_extra.replace("\\n", "\n")
    );
    let job = dir.join("job.toml");
    std::fs::write(&job, text)?;
    Ok(job)
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Run `kiln run job` as a child process in a fresh `KILN_HOME` under `dir`, its output in
/// `dir/run.log`; its figures.
fn run_job(
    job: &Path,
    dir: &Path,
    factor: u64,
    items: u64,
    input: &Path,
) -> anyhow::Result<ScaleRow> {
    let log_path = dir.join("run.log");
    let log = std::fs::File::create(&log_path)?;
    let exe = std::env::current_exe().context("finding the kiln binary")?;
    let start = Instant::now();
    let child = Command::new(exe)
        .arg("run")
        .arg(job)
        .env("KILN_HOME", dir.join("home"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting kiln run")?;
    let (status, usage) = wait_with_usage(child)?;
    let wall_s = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!(
            "the {factor}× job ({}) failed ({status}); see {}",
            job.display(),
            log_path.display()
        );
    }
    let cpu_s = usage.cpu_s;
    Ok(ScaleRow {
        factor,
        items,
        input_bytes: std::fs::metadata(input).map_or(0, |m| m.len()),
        wall_s,
        cpu_s,
        peak_mib: usage.max_rss_kib as f64 / 1024.0,
        items_per_cpu_s: items as f64 / cpu_s.max(1e-9),
        peer: None,
    })
}

/// The peer tool of `kind` and its program, from the environment.
fn peer_program(kind: ScaleKind) -> anyhow::Result<(&'static str, std::ffi::OsString)> {
    let (tool, variable) = match kind {
        ScaleKind::Mesh => ("gltfpack", "KILN_GLTFPACK"),
        ScaleKind::Splats => ("splat-transform", "KILN_SPLAT_TRANSFORM"),
    };
    let program = std::env::var_os(variable).with_context(|| {
        format!("--peer needs {variable} (the {tool} that .ci/run installs, see docs/scale.md)")
    })?;
    Ok((tool, program))
}

/// The peer tool on `input` (into `dir`): one level and the chain ½, ¼, ⅛.
fn run_peer(kind: ScaleKind, input: &Path, dir: &Path, kiln_cpu_s: f64) -> anyhow::Result<PeerRow> {
    let (tool, program) = peer_program(kind)?;
    let mut runs = Vec::new();
    for (ratio, percent) in [("0.5", "50%"), ("0.25", "25%"), ("0.125", "12.5%")] {
        let mut command = match kind {
            ScaleKind::Mesh => {
                let mut c = Command::new("node");
                c.arg(&program).arg("-i").arg(input);
                c.arg("-o").arg(dir.join(format!("peer-{ratio}.glb")));
                c.args(["-si", ratio]);
                c
            }
            ScaleKind::Splats => {
                let mut c = Command::new(&program);
                c.args(["-q", "-w", "-g", "cpu"])
                    .arg(input)
                    .args(["-d", percent]);
                c.arg(dir.join(format!("peer-{ratio}.ply")));
                c
            }
        };
        let log = std::fs::File::create(dir.join(format!("peer-{ratio}.log")))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {tool}"))?;
        let (status, usage) = wait_with_usage(child)?;
        if !status.success() {
            bail!(
                "{tool} failed on {} ({status}); see {}",
                input.display(),
                dir.display()
            );
        }
        runs.push(usage);
    }
    let chain_cpu_s: f64 = runs.iter().map(|u| u.cpu_s).sum();
    Ok(PeerRow {
        tool,
        one_level_cpu_s: runs[0].cpu_s,
        chain_cpu_s,
        peak_mib: runs.iter().map(|u| u.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
        kiln_over_chain: kiln_cpu_s / chain_cpu_s.max(1e-9),
    })
}

/// A child's resource use as `wait4` reports it.
struct Usage {
    cpu_s: f64,
    max_rss_kib: i64,
}

/// Wait for `child` and read its own resource use (not that of other children).
fn wait_with_usage(
    child: std::process::Child,
) -> anyhow::Result<(std::process::ExitStatus, Usage)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = libc::pid_t::try_from(child.id()).context("child pid")?;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data, valid when zeroed.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for (`child` is never waited through std:
    // it is dropped after this, which does not wait); `status` and `ru` are valid for writes.
    let r = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut ru) };
    drop(child);
    if r != pid {
        bail!("waiting for kiln run: {}", std::io::Error::last_os_error());
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok((
        std::process::ExitStatus::from_raw(status),
        Usage {
            cpu_s: secs(ru.ru_utime) + secs(ru.ru_stime),
            max_rss_kib: ru.ru_maxrss,
        },
    ))
}

/// Log-log slope of `value` against items from the first row to the last; `None` with fewer
/// than two sizes.
fn exponent(rows: &[ScaleRow], value: impl Fn(&ScaleRow) -> f64) -> Option<f64> {
    let (first, last) = (rows.first()?, rows.last()?);
    if rows.len() < 2 || value(first) <= 0.0 {
        return None;
    }
    Some((value(last) / value(first)).ln() / (last.items as f64 / first.items as f64).ln())
}

fn print_report(r: &ScaleReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    let what = match r.kind {
        ScaleKind::Mesh => "triangles",
        ScaleKind::Splats => "splats",
    };
    println!(
        "kiln bench scale --kind {}: whole `kiln run` per size, {} CPU threads",
        serde_json::to_value(r.kind)?.as_str().unwrap_or("?"),
        r.cpu_threads
    );
    println!(
        "{:>6} {:>12} {:>10} {:>9} {:>9} {:>9} {:>14}",
        "size", what, "input MB", "wall s", "CPU s", "peak MiB", "per CPU-s"
    );
    for row in &r.rows {
        println!(
            "{:>5}× {:>12} {:>10.1} {:>9.1} {:>9.1} {:>9.0} {:>14.0}",
            row.factor,
            row.items,
            row.input_bytes as f64 / 1e6,
            row.wall_s,
            row.cpu_s,
            row.peak_mib,
            row.items_per_cpu_s
        );
        if let Some(p) = &row.peer {
            println!(
                "       {}: one level {:.1} CPU-s, chain ½ ¼ ⅛ {:.1} CPU-s, peak {:.0} MiB; \
                 Kiln's job ÷ chain = {:.1}×",
                p.tool, p.one_level_cpu_s, p.chain_cpu_s, p.peak_mib, p.kiln_over_chain
            );
        }
    }
    if let (Some(t), Some(m)) = (r.cpu_exponent, r.memory_exponent) {
        println!(
            "growth exponents, first size to last (1 = linear, 0 = bounded): CPU time {t:.2}, peak memory {m:.2}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(items: u64, cpu_s: f64, peak_mib: f64) -> ScaleRow {
        ScaleRow {
            factor: 1,
            items,
            input_bytes: 0,
            wall_s: cpu_s,
            cpu_s,
            peak_mib,
            items_per_cpu_s: 0.0,
            peer: None,
        }
    }

    /// By hand: CPU ×16 over 16× items is exponent 1; memory ×2 over 16× is log 2 / log 16 = ¼.
    #[test]
    fn exponents_are_log_log_slopes() {
        let rows = [
            row(1000, 2.0, 100.0),
            row(4000, 8.0, 141.0),
            row(16_000, 32.0, 200.0),
        ];
        assert!((exponent(&rows, |r| r.cpu_s).unwrap() - 1.0).abs() < 1e-12);
        assert!((exponent(&rows, |r| r.peak_mib).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(exponent(&rows[..1], |r| r.cpu_s), None);
    }

    #[test]
    fn factors_must_ascend_from_one_or_more() {
        assert!(check_factors(&[1, 4, 16]).is_ok());
        for bad in [&[][..], &[0, 4], &[4, 1], &[1, 1]] {
            assert!(check_factors(bad).is_err(), "{bad:?}");
        }
    }
}
