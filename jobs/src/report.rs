//! `kiln report`: a job's per-stage table and totals from the ledger, as text or JSON.

use serde::Serialize;

use crate::Result;
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
        job,
        stages,
    })
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
    for s in &r.stages {
        if let Some(sum) = &s.summary {
            out.push_str(&format!("{}: {}\n", s.stage, sum));
        }
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
