//! `kiln report`: a job's per-stage table and totals from the ledger, as text or JSON.

use serde::Serialize;

use crate::Result;
use crate::costing::{AttemptCost, BusySum, Pricing};
use crate::ledger::{JobRow, Ledger, StageRow};

/// Sums over a job's stage attempts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub wall_s: f64,
    pub cpu_s: f64,
    pub gpu_s: f64,
    /// GPU-hours = GPU-seconds / 3600.
    pub gpu_hours: f64,
    pub bytes_read: i64,
    pub bytes_written: i64,
    pub attempts: usize,
    pub failed_attempts: usize,
}

/// A job's report: the job row, every stage attempt and the totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobReport {
    pub job: JobRow,
    pub stages: Vec<StageRow>,
    pub totals: Totals,
    /// Allocated, busy and idle GPU-seconds per stage, in first-run order.
    pub gpu_by_stage: Vec<StageGpu>,
    /// What the stages warned about (a missing texture, a skipped camera, a clamped value), from
    /// the attempts that finished (computed or cached), in stage order.
    pub warnings: Vec<kiln_pipeline::warnings::StageWarning>,
}

/// GPU time of one stage over all its attempts.
///
/// `allocated_s` is what a cloud bills (GPUs held × wall time, GPU-equivalent on partial-GPU
/// slots); `busy_s` is Σ NVML utilisation × sampling interval; `idle_s` = allocated − busy. Busy
/// and idle are `None` ("not measured", JSON `null`) as soon as one attempt that held a GPU has
/// no measurement (no NVML on that machine, a MIG instance, an attempt killed before it reported):
/// a partial sum would pass for a measured figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageGpu {
    pub stage: String,
    pub attempts: usize,
    pub allocated_s: f64,
    pub busy_s: Option<f64>,
    pub idle_s: Option<f64>,
}

/// Per-stage GPU time of `rows` (stages in the order they first appear).
pub fn gpu_by_stage(rows: &[StageRow]) -> Vec<StageGpu> {
    let mut order: Vec<(String, usize, BusySum)> = Vec::new();
    for r in rows {
        let i = match order.iter().position(|(s, _, _)| *s == r.stage) {
            Some(i) => i,
            None => {
                order.push((r.stage.clone(), 0, BusySum::default()));
                order.len() - 1
            }
        };
        order[i].1 += 1;
        order[i].2.add_row(r);
    }
    order
        .into_iter()
        .map(|(stage, attempts, b)| StageGpu {
            stage,
            attempts,
            allocated_s: b.allocated_s,
            busy_s: b.busy_s(),
            idle_s: b.idle_s(),
        })
        .collect()
}

/// One stage's bill over all its attempts: its USD split and its GPU time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageCost {
    pub stage: String,
    /// Σ [`Pricing::attempt_to`] over the stage's attempts, the output at the job's recorded
    /// output place (compute = `gpu_usd + cpu_usd`; `usd` includes storage and egress; `waste_usd`
    /// is the part spent on attempts that produced nothing).
    pub cost: AttemptCost,
    /// Allocated, busy and idle GPU-seconds ([`gpu_by_stage`]).
    pub gpu: StageGpu,
}

/// Each stage's bill (stages in first-run order), priced by `p` exactly as `kiln report` prices
/// the job ([`Pricing::job_total`] over the stage's rows): the HTML page and the CLI share it.
pub fn stage_costs(r: &JobReport, p: &Pricing) -> Vec<StageCost> {
    r.gpu_by_stage
        .iter()
        .map(|g| {
            let rows: Vec<StageRow> = r
                .stages
                .iter()
                .filter(|s| s.stage == g.stage)
                .cloned()
                .collect();
            StageCost {
                stage: g.stage.clone(),
                cost: p.job_total(&rows, &r.job.output),
                gpu: g.clone(),
            }
        })
        .collect()
}

/// The whole job's bill in the shape of one [`StageCost`] (`stage` = `total`): every attempt
/// priced by [`Pricing::job_total`], GPU time summed over every attempt (busy `None` when any GPU
/// attempt was not measured).
pub fn job_cost(r: &JobReport, p: &Pricing) -> StageCost {
    let mut busy = BusySum::default();
    for row in &r.stages {
        busy.add_row(row);
    }
    StageCost {
        stage: "total".into(),
        cost: p.job_total(&r.stages, &r.job.output),
        gpu: StageGpu {
            stage: "total".into(),
            attempts: r.stages.len(),
            allocated_s: busy.allocated_s,
            busy_s: busy.busy_s(),
            idle_s: busy.idle_s(),
        },
    }
}

/// Seconds to one decimal, or `not measured`.
pub fn measured(v: Option<f64>) -> String {
    v.map_or_else(|| "not measured".to_string(), |v| format!("{v:.1}"))
}

/// Build the report of job `id`.
///
/// # Errors
/// [`crate::Error::NoSuchJob`], [`crate::Error::Ledger`].
pub async fn job_report(ledger: &Ledger, id: &str) -> Result<JobReport> {
    let job = ledger.job(id).await?;
    let stages = ledger.stages(id).await?;
    Ok(JobReport {
        totals: totals(&stages),
        gpu_by_stage: gpu_by_stage(&stages),
        warnings: warnings(&stages),
        job,
        stages,
    })
}

/// The warnings of the attempts that finished (`succeeded` or `cached`), in stage order.
pub fn warnings(stages: &[StageRow]) -> Vec<kiln_pipeline::warnings::StageWarning> {
    kiln_pipeline::warnings::of_job(
        stages
            .iter()
            .filter(|s| matches!(s.state.as_str(), "succeeded" | "cached"))
            .filter_map(|s| Some((s.stage.as_str(), s.summary.as_ref()?))),
    )
}

/// Sum the attempts.
pub fn totals(stages: &[StageRow]) -> Totals {
    let mut t = Totals::default();
    for s in stages {
        t.wall_s += s.wall_s;
        t.cpu_s += s.cpu_s;
        t.gpu_s += s.gpu_s;
        t.bytes_read += s.bytes_read;
        t.bytes_written += s.bytes_written;
        t.attempts += 1;
        if s.state == "failed" {
            t.failed_attempts += 1;
        }
    }
    t.gpu_hours = t.gpu_s / 3600.0;
    t
}

/// The report as a fixed-width text table.
pub fn render_table(r: &JobReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "job {}  ({} {}, {})\n  input  {}\n  output {}\n",
        r.job.id, r.job.kind, r.job.name, r.job.state, r.job.input, r.job.output
    ));
    if let Some(e) = &r.job.error {
        out.push_str(&format!("  error  {e}\n"));
    }
    out.push_str(&format!(
        "{:<10} {:>3} {:<9} {:<7} {:>9} {:>9} {:>7} {:>12} {:>12}\n",
        "stage", "try", "state", "device", "wall s", "cpu s", "gpu s", "read B", "written B"
    ));
    for s in &r.stages {
        out.push_str(&format!(
            "{:<10} {:>3} {:<9} {:<7} {:>9.2} {:>9.2} {:>7.1} {:>12} {:>12}\n",
            s.stage,
            s.attempt,
            s.state,
            s.device,
            s.wall_s,
            s.cpu_s,
            s.gpu_s,
            s.bytes_read,
            s.bytes_written
        ));
    }
    let t = &r.totals;
    out.push_str(&format!(
        "{:<10} {:>3} {:<9} {:<7} {:>9.2} {:>9.2} {:>7.1} {:>12} {:>12}\n",
        "total", t.attempts, "", "", t.wall_s, t.cpu_s, t.gpu_s, t.bytes_read, t.bytes_written
    ));
    out.push_str(&format!("GPU-hours {:.4}\n", t.gpu_hours));
    out.push_str(&render_gpu_by_stage(&r.gpu_by_stage));
    if !r.warnings.is_empty() {
        out.push_str(&format!("warnings ({}):\n", r.warnings.len()));
        for w in &r.warnings {
            out.push_str(&format!("  {:<10} {}\n", w.stage, w.message));
        }
    }
    for s in &r.stages {
        if let Some(sum) = &s.summary {
            out.push_str(&format!("{}: {}\n", s.stage, sum));
        }
    }
    out
}

/// The per-stage GPU table: allocated, busy and idle GPU-seconds (stages that held no GPU are
/// left out; nothing is printed when no stage did).
pub fn render_gpu_by_stage(stages: &[StageGpu]) -> String {
    let gpu: Vec<&StageGpu> = stages
        .iter()
        .filter(|s| s.allocated_s > 0.0 || s.busy_s.is_some_and(|b| b > 0.0))
        .collect();
    if gpu.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{:<10} {:>5} {:>14} {:>14} {:>14}\n",
        "stage", "tries", "alloc GPU-s", "busy GPU-s", "idle GPU-s"
    );
    for s in gpu {
        out.push_str(&format!(
            "{:<10} {:>5} {:>14.1} {:>14} {:>14}\n",
            s.stage,
            s.attempts,
            s.allocated_s,
            measured(s.busy_s),
            measured(s.idle_s)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(stage: &str, state: &str, wall: f64, cpu: f64, gpu: f64) -> StageRow {
        StageRow {
            stage: stage.into(),
            attempt: 1,
            state: state.into(),
            device: "cpu".into(),
            wall_s: wall,
            cpu_s: cpu,
            gpu_s: gpu,
            bytes_read: 100,
            bytes_written: 50,
            summary: None,
            error: None,
            ..Default::default()
        }
    }

    fn gpu_row(stage: &str, gpu_s: f64, busy: Option<f64>) -> StageRow {
        StageRow {
            device: "cuda:0".into(),
            gpu_busy_s: busy,
            ..row(stage, "succeeded", gpu_s, 0.0, gpu_s)
        }
    }

    #[test]
    fn busy_and_idle_per_stage_and_unmeasured_stages_say_so() {
        // train: two measured attempts, 600 s allocated with 450 busy and 300 with 120 busy:
        // busy 570, idle 900 − 570 = 330. render: one measured attempt (100 s, 80 busy) and one
        // without NVML: not measured, never 80. ingest held no GPU: busy 0, idle 0.
        let rows = [
            row("ingest", "succeeded", 2.0, 1.5, 0.0),
            gpu_row("train", 600.0, Some(450.0)),
            gpu_row("train", 300.0, Some(120.0)),
            gpu_row("render", 100.0, Some(80.0)),
            gpu_row("render", 50.0, None),
        ];
        let g = gpu_by_stage(&rows);
        let names: Vec<&str> = g.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(names, ["ingest", "train", "render"]);
        assert_eq!((g[0].busy_s, g[0].idle_s), (Some(0.0), Some(0.0)));
        assert_eq!((g[1].attempts, g[1].allocated_s), (2, 900.0));
        assert_eq!((g[1].busy_s, g[1].idle_s), (Some(570.0), Some(330.0)));
        assert_eq!(g[2].allocated_s, 150.0);
        assert_eq!((g[2].busy_s, g[2].idle_s), (None, None));
        let table = render_gpu_by_stage(&g);
        assert!(
            table.contains("570.0") && table.contains("330.0"),
            "{table}"
        );
        let render_line = table.lines().find(|l| l.starts_with("render")).unwrap();
        assert_eq!(render_line.matches("not measured").count(), 2, "{table}");
        assert!(!table.contains("ingest"), "{table}");
        // JSON: null, not 0.
        let v = serde_json::to_value(&g[2]).unwrap();
        assert!(v["busy_s"].is_null() && v["idle_s"].is_null(), "{v}");
    }

    #[test]
    fn totals_sum_every_attempt_and_convert_gpu_seconds_to_hours() {
        let t = totals(&[
            row("a", "succeeded", 1.0, 2.0, 3600.0),
            row("b", "failed", 0.5, 0.25, 1800.0),
        ]);
        assert_eq!(t.wall_s, 1.5);
        assert_eq!(t.cpu_s, 2.25);
        assert_eq!(t.gpu_hours, 1.5);
        assert_eq!(t.bytes_read, 200);
        assert_eq!((t.attempts, t.failed_attempts), (2, 1));
    }
}
