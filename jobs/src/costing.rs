//! What ledger rows cost, in USD from a [`PriceCatalog`], and the rollups `kiln report` prints
//! per job, per team and per period.
//!
//! Model (shared/research/pipeline-anchors.md §3.5): an attempt on a GPU costs its allocated
//! GPU-seconds (GPUs held × wall time, the ledger's `gpu_s`) at its SKU's $/GPU-hour; an attempt on
//! the CPU costs its CPU-seconds at the catalog's $/vCPU-hour. Every attempt is charged, and those
//! that did not produce the stage's output (failed, lost, cancelled, handed back) are also summed
//! as waste. The per-lease billing minimum of §3.1 is not applied per attempt: Kiln's workers hold
//! machines across many stages, so the minimum belongs to the machine, not the stage.

use serde::Serialize;

use crate::ledger::StageRow;
use crate::prices::{PriceCatalog, Tier};

/// How to price GPU rows whose device name matches no catalog SKU.
#[derive(Debug, Clone)]
pub struct Pricing<'a> {
    pub catalog: &'a PriceCatalog,
    pub tier: Tier,
    /// SKU for GPU rows without a recognisable device name (`--sku`); `None` prices them at the
    /// catalog's dearest GPU, so an unknown GPU is never under-charged.
    pub fallback_sku: Option<String>,
}

/// USD of one attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct AttemptCost {
    pub gpu_usd: f64,
    pub cpu_usd: f64,
    /// `gpu_usd + cpu_usd`.
    pub usd: f64,
    /// `usd` when the attempt produced nothing (every state but `succeeded` and `cached`).
    pub waste_usd: f64,
}

impl Pricing<'_> {
    /// The SKU a GPU row is priced as.
    pub fn sku_of(&self, row: &StageRow) -> String {
        row.device_name
            .as_deref()
            .and_then(|n| crate::estimate::sku_for_device_name(self.catalog, n))
            .map(String::from)
            .or_else(|| self.fallback_sku.clone())
            .unwrap_or_else(|| self.dearest_sku())
    }

    fn dearest_sku(&self) -> String {
        self.catalog
            .sku
            .iter()
            .max_by(|a, b| {
                a.1.gpu_hour_usd_on_demand
                    .total_cmp(&b.1.gpu_hour_usd_on_demand)
            })
            .map(|(k, _)| k.clone())
            .unwrap_or_default()
    }

    /// $/hour of one GPU of `sku` at this tier (spot falls back to on-demand where the catalog
    /// has no spot price).
    pub fn gpu_rate(&self, sku: &str) -> f64 {
        self.catalog
            .gpu_hour_usd(sku, self.tier)
            .or_else(|_| self.catalog.gpu_hour_usd(sku, Tier::OnDemand))
            .unwrap_or(0.0)
    }

    /// $/vCPU-hour at this tier (on-demand when no spot price).
    pub fn cpu_rate(&self) -> f64 {
        self.catalog
            .vcpu_hour_usd(self.tier)
            .or_else(|| self.catalog.vcpu_hour_usd(Tier::OnDemand))
            .unwrap_or(0.0)
    }

    /// USD of `row`: GPU-seconds × SKU rate + (CPU-seconds × vCPU rate on CPU devices).
    pub fn attempt(&self, row: &StageRow) -> AttemptCost {
        let on_gpu = row.device.starts_with("cuda") || row.gpu_s > 0.0;
        let gpu_usd = if on_gpu {
            row.gpu_s / 3600.0 * self.gpu_rate(&self.sku_of(row))
        } else {
            0.0
        };
        // A GPU machine's CPU time is in its GPU price (§3.1: CoreWeave, AWS instance prices).
        let cpu_usd = if on_gpu {
            0.0
        } else {
            row.cpu_s / 3600.0 * self.cpu_rate()
        };
        let usd = gpu_usd + cpu_usd;
        let productive = matches!(row.state.as_str(), "succeeded" | "cached");
        AttemptCost {
            gpu_usd,
            cpu_usd,
            usd,
            waste_usd: if productive { 0.0 } else { usd },
        }
    }

    /// Sum of [`Pricing::attempt`] over `rows`.
    pub fn total(&self, rows: &[StageRow]) -> AttemptCost {
        rows.iter()
            .map(|r| self.attempt(r))
            .fold(AttemptCost::default(), |a, c| AttemptCost {
                gpu_usd: a.gpu_usd + c.gpu_usd,
                cpu_usd: a.cpu_usd + c.cpu_usd,
                usd: a.usd + c.usd,
                waste_usd: a.waste_usd + c.waste_usd,
            })
    }
}

/// One line of a period report: a job, or the sum over a team.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostLine {
    /// Job id, or the team for team lines.
    pub key: String,
    pub team: String,
    pub state: String,
    pub attempts: usize,
    /// Attempts that produced nothing (retried, lost, cancelled, handed back).
    pub wasted_attempts: usize,
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Allocated GPU-seconds.
    pub gpu_s: f64,
    /// Busy GPU-seconds where NVML measured them.
    pub gpu_busy_s: f64,
    pub gpu_hours: f64,
    pub bytes_read: i64,
    pub bytes_written: i64,
    pub usd: f64,
    pub waste_usd: f64,
}

impl CostLine {
    /// The line of one job from its ledger rows.
    pub fn for_job(id: &str, team: &str, state: &str, rows: &[StageRow], p: &Pricing) -> CostLine {
        let mut l = CostLine {
            key: id.into(),
            team: team.into(),
            state: state.into(),
            ..Default::default()
        };
        for r in rows {
            let c = p.attempt(r);
            l.attempts += 1;
            l.wasted_attempts += usize::from(!matches!(r.state.as_str(), "succeeded" | "cached"));
            l.wall_s += r.wall_s;
            l.cpu_s += r.cpu_s;
            l.gpu_s += r.gpu_s;
            l.gpu_busy_s += r.gpu_busy_s.unwrap_or(0.0);
            l.bytes_read += r.bytes_read;
            l.bytes_written += r.bytes_written;
            l.usd += c.usd;
            l.waste_usd += c.waste_usd;
        }
        l.gpu_hours = l.gpu_s / 3600.0;
        l
    }

    /// Add `other` into `self` (for team and total lines).
    pub fn add(&mut self, other: &CostLine) {
        self.attempts += other.attempts;
        self.wasted_attempts += other.wasted_attempts;
        self.wall_s += other.wall_s;
        self.cpu_s += other.cpu_s;
        self.gpu_s += other.gpu_s;
        self.gpu_busy_s += other.gpu_busy_s;
        self.gpu_hours = self.gpu_s / 3600.0;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.usd += other.usd;
        self.waste_usd += other.waste_usd;
    }
}

/// Per-team sums of `jobs`, sorted by team.
pub fn by_team(jobs: &[CostLine]) -> Vec<CostLine> {
    let mut teams: std::collections::BTreeMap<String, CostLine> = Default::default();
    for j in jobs {
        let t = teams.entry(j.team.clone()).or_insert_with(|| CostLine {
            key: j.team.clone(),
            team: j.team.clone(),
            ..Default::default()
        });
        t.add(j);
    }
    teams.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str, device: &str, name: Option<&str>, cpu_s: f64, gpu_s: f64) -> StageRow {
        StageRow {
            stage: "train".into(),
            attempt: 1,
            state: state.into(),
            device: device.into(),
            cpu_s,
            gpu_s,
            wall_s: gpu_s.max(cpu_s),
            device_name: name.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn gpu_attempts_cost_gpu_hours_at_their_sku_and_failed_ones_are_waste() {
        let catalog = PriceCatalog::default_catalog();
        let p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        let h200 = catalog.sku("H200").unwrap().gpu_hour_usd_on_demand;
        let vcpu = catalog.cpu.vcpu_hour_usd_on_demand;
        // Half an hour on an H200 that succeeded, 6 minutes of one that was lost, and 2 CPU-hours.
        let rows = [
            row("succeeded", "cuda:0", Some("NVIDIA H200"), 900.0, 1800.0),
            row("failed", "cuda:0", Some("NVIDIA H200"), 300.0, 360.0),
            row("succeeded", "cpu", None, 7200.0, 0.0),
        ];
        let t = p.total(&rows);
        let expect_gpu = 0.6 * h200;
        assert!((t.gpu_usd - expect_gpu).abs() < 1e-9, "{t:?}");
        assert!((t.cpu_usd - 2.0 * vcpu).abs() < 1e-9, "{t:?}");
        assert!((t.waste_usd - 0.1 * h200).abs() < 1e-9, "{t:?}");
        let line = CostLine::for_job("j", "art", "succeeded", &rows, &p);
        assert_eq!((line.attempts, line.wasted_attempts), (3, 1));
        assert!((line.gpu_hours - 0.6).abs() < 1e-12);
    }

    #[test]
    fn unknown_gpus_are_priced_at_the_fallback_or_the_dearest_sku() {
        let catalog = PriceCatalog::default_catalog();
        let mut p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        let r = row("succeeded", "cuda:0", Some("Mystery GPU"), 0.0, 3600.0);
        let dearest = catalog
            .sku
            .values()
            .map(|s| s.gpu_hour_usd_on_demand)
            .fold(0.0, f64::max);
        assert!((p.attempt(&r).usd - dearest).abs() < 1e-9);
        p.fallback_sku = Some("T4".into());
        let t4 = catalog.sku("T4").unwrap().gpu_hour_usd_on_demand;
        assert!((p.attempt(&r).usd - t4).abs() < 1e-9);
    }

    #[test]
    fn team_lines_sum_their_jobs() {
        let a = CostLine {
            key: "j1".into(),
            team: "art".into(),
            attempts: 2,
            gpu_s: 3600.0,
            usd: 2.0,
            ..Default::default()
        };
        let b = CostLine {
            key: "j2".into(),
            team: "art".into(),
            attempts: 1,
            gpu_s: 1800.0,
            usd: 1.0,
            waste_usd: 1.0,
            ..Default::default()
        };
        let c = CostLine {
            key: "j3".into(),
            team: "ops".into(),
            usd: 5.0,
            ..Default::default()
        };
        let teams = by_team(&[a, b, c]);
        assert_eq!(teams.len(), 2);
        assert_eq!(teams[0].key, "art");
        assert_eq!(
            (teams[0].attempts, teams[0].usd, teams[0].waste_usd),
            (3, 3.0, 1.0)
        );
        assert!((teams[0].gpu_hours - 1.5).abs() < 1e-12);
    }
}
