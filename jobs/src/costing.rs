//! What ledger rows cost, in USD from a [`PriceCatalog`], and the rollups `kiln report` prints
//! per job, per team and per period.
//!
//! Model (shared/research/pipeline-anchors.md §3.5): an attempt on a GPU costs its allocated
//! GPU-seconds (GPUs held × wall time, the ledger's `gpu_s`) at its SKU's $/GPU-hour; an attempt on
//! the CPU costs its CPU-seconds at the catalog's $/vCPU-hour. Every attempt is charged, and those
//! that did not produce the stage's output (failed, lost, cancelled, handed back) are also summed
//! as waste.
//!
//! Billing rules (§3.5 `billed_gpu_s`): a GPU attempt's allocated time is billed by its SKU's
//! provider rule (`[billing.PROVIDER]`: increment and minimum, e.g. AWS per second with a 60 s
//! minimum, per-hour billing rounding up to whole hours) at on-demand and spot prices, as if each
//! attempt were its own lease: exact for a worker started per stage, an upper bound for one that
//! runs many stages on one lease. Committed capacity is amortised and charged exactly. CPU
//! attempts are priced on measured CPU-seconds (consumption, not a lease) and never rounded.
//!
//! Storage and egress ([`Pricing::attempt_to`], catalog `[placement]`): the output of a successful
//! stage attempt ([`stored_bytes`]: its output folder's size, one copy, whether or not a shared
//! stage cache holds another — `bytes_written` counts both, so it is not used where the size is
//! recorded) is charged as stored in the stage cache for `stage_cache_days`; the bytes `publish`
//! wrote to the job's output are charged as stored at the output's place for `published_days`,
//! and, when that place is not the workers' (a `[[destination]]` rule names the output URL), as
//! egress over the catalog's route from the workers' place to it. Egress is charged on every
//! publish attempt (bytes sent were sent, so a failed one's are waste); storage only on
//! successful ones (a failed attempt's partial output is deleted).

use serde::Serialize;

use crate::ledger::StageRow;
use crate::prices::{OutputPlace, PriceCatalog, Tier};

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
    /// Storage of what the attempt wrote, for its retention (module docs).
    pub storage_usd: f64,
    /// Egress of what a `publish` attempt sent to another place.
    pub egress_usd: f64,
    /// `gpu_usd + cpu_usd + storage_usd + egress_usd`.
    pub usd: f64,
    /// `usd` when the attempt produced nothing (every state but `succeeded` and `cached`).
    pub waste_usd: f64,
}

/// Bytes of one stored copy of the output of stage attempt `row`: the `stored_bytes` its
/// summary records ([`kiln_pipeline::run::STORED_BYTES`]), else, for rows written before that was
/// recorded and for `publish`, `bytes_written` (which, for an older attempt run by a worker with
/// a stage cache, counts the output twice: the work folder and the upload).
pub fn stored_bytes(row: &StageRow) -> u64 {
    row.summary
        .as_ref()
        .and_then(kiln_pipeline::run::stored_bytes)
        .unwrap_or_else(|| u64::try_from(row.bytes_written).unwrap_or(0))
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

    /// The SKU GPU row `row` is charged at (a partial-GPU slot's own SKU when its `gpu_slot`
    /// names one); `None` for a row that held no GPU.
    pub fn priced_sku(&self, row: &StageRow) -> Option<String> {
        if row.gpu_s.is_nan() || row.gpu_s <= 0.0 {
            return None;
        }
        let slot = crate::gpu_slot::GpuSlot::of_row(row.gpu_slot.as_deref(), self.catalog);
        Some(slot.and_then(|s| s.sku).unwrap_or_else(|| self.sku_of(row)))
    }

    /// Why GPU row `row` was charged at a SKU its device does not name: its device (as NVML or
    /// the driver reported it) is not in the catalog, so it is priced as `--sku` or the dearest
    /// GPU. `None` for CPU rows and recognised devices.
    pub fn sku_note(&self, row: &StageRow) -> Option<String> {
        let sku = self.priced_sku(row)?;
        let slot = crate::gpu_slot::GpuSlot::of_row(row.gpu_slot.as_deref(), self.catalog);
        let recognised = row
            .device_name
            .as_deref()
            .and_then(|n| crate::estimate::sku_for_device_name(self.catalog, n))
            .is_some();
        if recognised || slot.is_some_and(|s| s.sku.is_some()) {
            return None;
        }
        let device = row.device_name.as_deref().unwrap_or("not recorded");
        Some(match &self.fallback_sku {
            Some(_) => format!("priced as {sku} (--sku; unknown device {device})"),
            None => format!(
                "priced as the dearest GPU, {sku} (unknown device {device}; --sku NAME prices it \
                 as a catalog SKU)"
            ),
        })
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

    /// $/GPU-equivalent-hour of a GPU row: its SKU's rate, or for a row on part of a GPU
    /// (`gpu_slot`, whose `gpu_s` is already × the slot's fraction) the rate of
    /// [`crate::gpu_slot::GpuSlot::gpu_hour_usd`] (a MIG profile's published price ÷ fraction where
    /// the catalog has one). Spot falls back to on-demand as in [`Pricing::gpu_rate`].
    pub fn gpu_rate_of(&self, row: &StageRow) -> f64 {
        let slot = crate::gpu_slot::GpuSlot::of_row(row.gpu_slot.as_deref(), self.catalog);
        let sku = slot
            .as_ref()
            .and_then(|s| s.sku.clone())
            .unwrap_or_else(|| self.sku_of(row));
        slot.and_then(|s| {
            s.gpu_hour_usd(self.catalog, &sku, self.tier)
                .or_else(|| s.gpu_hour_usd(self.catalog, &sku, Tier::OnDemand))
        })
        .unwrap_or_else(|| self.gpu_rate(&sku))
    }

    /// $/vCPU-hour at this tier (on-demand when no spot price).
    pub fn cpu_rate(&self) -> f64 {
        self.catalog
            .vcpu_hour_usd(self.tier)
            .or_else(|| self.catalog.vcpu_hour_usd(Tier::OnDemand))
            .unwrap_or(0.0)
    }

    /// The tier a GPU row of `sku` is really priced at: this one where the catalog has its
    /// price, else on-demand (as [`Pricing::gpu_rate`] falls back).
    fn billing_tier(&self, sku: &str) -> Tier {
        if self.catalog.gpu_hour_usd(sku, self.tier).is_ok() {
            self.tier
        } else {
            Tier::OnDemand
        }
    }

    /// Billed GPU-seconds of `row` (module docs): the attempt's GPU share `f = gpu_s / wall_s`
    /// (1 for one GPU, 0.5 for half a GPU, 2 for two; 1 without a wall time) times the billed
    /// seconds of a lease of `gpu_s / f` seconds by the SKU's provider rule.
    pub fn billed_gpu_s(&self, row: &StageRow) -> f64 {
        if row.gpu_s.is_nan() || row.gpu_s <= 0.0 {
            return 0.0;
        }
        let share = if row.wall_s > 0.0 {
            row.gpu_s / row.wall_s
        } else {
            1.0
        };
        let sku = self.sku_of(row);
        let lease_s = row.gpu_s / share;
        share
            * self
                .catalog
                .billed_gpu_seconds(&sku, lease_s, self.billing_tier(&sku))
    }

    /// USD of `row` as [`Pricing::attempt_to`] with its output at the workers' place (no
    /// egress; a `publish` attempt's bytes stored in the workers' storage class).
    pub fn attempt(&self, row: &StageRow) -> AttemptCost {
        let here = self.catalog.placement.as_ref().map(|p| OutputPlace {
            place: p.workers.clone(),
            storage_class: p.storage_class.clone(),
            route: None,
        });
        self.attempt_to(row, here.as_ref())
    }

    /// USD of `row`: billed GPU-seconds × SKU rate (GPU rows) or CPU-seconds × vCPU rate (CPU
    /// rows), plus storage and egress (module docs) with the job's output at `output` (from
    /// [`PriceCatalog::output_place`](crate::prices::PriceCatalog::output_place); `None`:
    /// the catalog has no `[placement]`, storage and egress are 0).
    pub fn attempt_to(&self, row: &StageRow, output: Option<&OutputPlace>) -> AttemptCost {
        let mut c = self.compute(row);
        if let (Some(out), Some(p)) = (output, self.catalog.placement.as_ref()) {
            let written = u64::try_from(row.bytes_written).unwrap_or(0);
            let succeeded = row.state == "succeeded";
            if row.stage == "publish" {
                if succeeded {
                    c.storage_usd = self
                        .catalog
                        .storage_usd_for_days(&out.storage_class, written, p.published_days)
                        .unwrap_or(0.0);
                }
                c.egress_usd = out
                    .route
                    .as_ref()
                    .map_or(0.0, |r| written as f64 / 1e9 * r.gb_usd);
            } else if succeeded {
                c.storage_usd = self
                    .catalog
                    .storage_usd_for_days(&p.storage_class, stored_bytes(row), p.stage_cache_days)
                    .unwrap_or(0.0);
            }
        }
        c.usd = c.gpu_usd + c.cpu_usd + c.storage_usd + c.egress_usd;
        let productive = matches!(row.state.as_str(), "succeeded" | "cached");
        c.waste_usd = if productive { 0.0 } else { c.usd };
        c
    }

    /// GPU and CPU USD of `row` (no storage, egress, sums or waste).
    fn compute(&self, row: &StageRow) -> AttemptCost {
        let on_gpu = row.device.starts_with("cuda") || row.gpu_s > 0.0;
        let gpu_usd = if on_gpu {
            self.billed_gpu_s(row) / 3600.0 * self.gpu_rate_of(row)
        } else {
            0.0
        };
        // A GPU machine's CPU time is in its GPU price (§3.1: CoreWeave, AWS instance prices).
        let cpu_usd = if on_gpu {
            0.0
        } else {
            row.cpu_s / 3600.0 * self.cpu_rate()
        };
        AttemptCost {
            gpu_usd,
            cpu_usd,
            ..Default::default()
        }
    }

    /// Sum of [`Pricing::attempt`] over `rows`.
    pub fn total(&self, rows: &[StageRow]) -> AttemptCost {
        sum(rows.iter().map(|r| self.attempt(r)))
    }

    /// Sum of [`Pricing::attempt_to`] over a job's `rows`, its output recorded as `output` (a URL
    /// or path; its place from the catalog's `[[destination]]` rules).
    pub fn job_total(&self, rows: &[StageRow], output: &str) -> AttemptCost {
        let place = self.catalog.output_place(output);
        sum(rows.iter().map(|r| self.attempt_to(r, place.as_ref())))
    }
}

/// Field-wise sum of attempt costs.
fn sum(costs: impl Iterator<Item = AttemptCost>) -> AttemptCost {
    costs.fold(AttemptCost::default(), |a, c| AttemptCost {
        gpu_usd: a.gpu_usd + c.gpu_usd,
        cpu_usd: a.cpu_usd + c.cpu_usd,
        storage_usd: a.storage_usd + c.storage_usd,
        egress_usd: a.egress_usd + c.egress_usd,
        usd: a.usd + c.usd,
        waste_usd: a.waste_usd + c.waste_usd,
    })
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
    /// Busy GPU-seconds (NVML); `None` ("not measured") when any attempt that held a GPU has no
    /// measurement — never counted as 0.
    pub gpu_busy_s: Option<f64>,
    /// Idle GPU-seconds = allocated − busy; `None` whenever `gpu_busy_s` is.
    pub gpu_idle_s: Option<f64>,
    pub gpu_hours: f64,
    pub bytes_read: i64,
    pub bytes_written: i64,
    pub usd: f64,
    pub waste_usd: f64,
    /// Compute USD: GPU and CPU time (in `usd`).
    pub compute_usd: f64,
    /// Storage USD (stage cache and published output; in `usd`).
    pub storage_usd: f64,
    /// Egress USD of outputs sent to another place (in `usd`).
    pub egress_usd: f64,
    /// Bytes sent to another place (publish attempts whose output is not at the workers' place).
    pub egress_bytes: i64,
    /// The GPU SKUs the line's GPU attempts were charged at (`+`-separated; empty without GPU
    /// time).
    pub gpu_sku: String,
    /// GPU-seconds billed ([`Pricing::billed_gpu_s`]: the provider's increment and minimum per
    /// attempt; may exceed `gpu_s`).
    pub billed_gpu_s: f64,
    /// The job's budget (`kiln submit --budget-usd`), on a job line of a job that has one; else
    /// `None` (an empty CSV cell).
    pub budget_usd: Option<f64>,
    /// Whether the job cost more than `budget_usd` (`usd > budget_usd`); `None` without a budget.
    pub over_budget: Option<bool>,
    /// Σ measured busy seconds and the count of GPU attempts without a measurement (the inputs
    /// of `gpu_busy_s`, kept so lines can be added).
    #[serde(skip)]
    busy: BusySum,
}

/// Busy GPU-seconds summed over attempts, remembering whether any GPU attempt was unmeasured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BusySum {
    /// Σ allocated GPU-seconds of the attempts added.
    pub allocated_s: f64,
    /// Σ busy GPU-seconds of the measured attempts.
    pub measured_s: f64,
    /// Attempts that held a GPU (`gpu_s > 0`) but have no busy figure.
    pub unmeasured: usize,
}

impl BusySum {
    /// Add one attempt. An attempt that held no GPU (`gpu_s = 0`) and has no figure was busy 0 s
    /// of 0 allocated: nothing to measure, so it does not make the sum unmeasured.
    pub fn add_row(&mut self, r: &StageRow) {
        self.allocated_s += r.gpu_s;
        match r.gpu_busy_s {
            Some(b) => self.measured_s += b,
            None if r.gpu_s > 0.0 => self.unmeasured += 1,
            None => {}
        }
    }

    /// Add another sum.
    pub fn add(&mut self, o: &BusySum) {
        self.allocated_s += o.allocated_s;
        self.measured_s += o.measured_s;
        self.unmeasured += o.unmeasured;
    }

    /// Busy GPU-seconds, `None` when any GPU attempt was not measured.
    pub fn busy_s(&self) -> Option<f64> {
        (self.unmeasured == 0).then_some(self.measured_s)
    }

    /// Idle GPU-seconds = allocated − busy (≥ 0), `None` when busy is.
    pub fn idle_s(&self) -> Option<f64> {
        self.busy_s().map(|b| (self.allocated_s - b).max(0.0))
    }
}

impl CostLine {
    /// This job line with its budget and whether it went over it.
    pub fn with_budget(mut self, budget_usd: Option<f64>) -> CostLine {
        self.budget_usd = budget_usd;
        self.over_budget = budget_usd.map(|b| self.usd > b);
        self
    }

    fn add_sku(&mut self, sku: &str) {
        if !self.gpu_sku.split('+').any(|s| s == sku) {
            if !self.gpu_sku.is_empty() {
                self.gpu_sku.push('+');
            }
            self.gpu_sku.push_str(sku);
        }
    }

    fn set_gpu_busy(&mut self) {
        self.gpu_busy_s = self.busy.busy_s();
        self.gpu_idle_s = self.busy.idle_s();
    }

    /// The line of one job from its ledger rows.
    pub fn for_job(id: &str, team: &str, state: &str, rows: &[StageRow], p: &Pricing) -> CostLine {
        let here = p.catalog.placement.as_ref().map(|pl| OutputPlace {
            place: pl.workers.clone(),
            storage_class: pl.storage_class.clone(),
            route: None,
        });
        Self::for_job_at(id, team, state, rows, p, here.as_ref())
    }

    /// The line of one job whose output is recorded as `output` (a URL or path): as
    /// [`CostLine::for_job`] with storage and egress at the output's place
    /// ([`Pricing::attempt_to`]).
    pub fn for_job_to(
        id: &str,
        team: &str,
        state: &str,
        output: &str,
        rows: &[StageRow],
        p: &Pricing,
    ) -> CostLine {
        let place = p.catalog.output_place(output);
        Self::for_job_at(id, team, state, rows, p, place.as_ref())
    }

    fn for_job_at(
        id: &str,
        team: &str,
        state: &str,
        rows: &[StageRow],
        p: &Pricing,
        place: Option<&OutputPlace>,
    ) -> CostLine {
        let mut l = CostLine {
            key: id.into(),
            team: team.into(),
            state: state.into(),
            ..Default::default()
        };
        for r in rows {
            let c = p.attempt_to(r, place);
            l.compute_usd += c.gpu_usd + c.cpu_usd;
            l.billed_gpu_s += p.billed_gpu_s(r);
            if let Some(sku) = p.priced_sku(r) {
                l.add_sku(&sku);
            }
            l.storage_usd += c.storage_usd;
            l.egress_usd += c.egress_usd;
            if r.stage == "publish" && place.is_some_and(|pl| pl.route.is_some()) {
                l.egress_bytes += r.bytes_written;
            }
            l.attempts += 1;
            l.wasted_attempts += usize::from(!matches!(r.state.as_str(), "succeeded" | "cached"));
            l.wall_s += r.wall_s;
            l.cpu_s += r.cpu_s;
            l.gpu_s += r.gpu_s;
            l.busy.add_row(r);
            l.bytes_read += r.bytes_read;
            l.bytes_written += r.bytes_written;
            l.usd += c.usd;
            l.waste_usd += c.waste_usd;
        }
        l.gpu_hours = l.gpu_s / 3600.0;
        l.set_gpu_busy();
        l
    }

    /// Add `other` into `self` (for team and total lines).
    pub fn add(&mut self, other: &CostLine) {
        self.attempts += other.attempts;
        self.wasted_attempts += other.wasted_attempts;
        self.wall_s += other.wall_s;
        self.cpu_s += other.cpu_s;
        self.gpu_s += other.gpu_s;
        self.busy.add(&other.busy);
        self.set_gpu_busy();
        self.gpu_hours = self.gpu_s / 3600.0;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.usd += other.usd;
        self.waste_usd += other.waste_usd;
        self.compute_usd += other.compute_usd;
        self.billed_gpu_s += other.billed_gpu_s;
        for sku in other.gpu_sku.split('+').filter(|s| !s.is_empty()) {
            self.add_sku(sku);
        }
        self.storage_usd += other.storage_usd;
        self.egress_usd += other.egress_usd;
        self.egress_bytes += other.egress_bytes;
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

    const DEFAULT_TOML: &str = include_str!("prices/default.toml");

    fn written(stage: &str, state: &str, bytes: i64) -> StageRow {
        StageRow {
            stage: stage.into(),
            attempt: 1,
            state: state.into(),
            device: "cpu".into(),
            bytes_written: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn a_publish_to_another_region_is_charged_storage_and_egress_by_route() {
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"s3://tiles-eu/\"\nplace = \"aws:eu-west-1\"\n"
        );
        let catalog = PriceCatalog::from_toml_str(&text, "eu.toml").unwrap();
        let p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        // A 2 GB tile output, a publish that failed after sending 0.5 GB, one that sent 1 GB.
        let rows = [
            written("tile", "succeeded", 2_000_000_000),
            written("publish", "failed", 500_000_000),
            written("publish", "succeeded", 1_000_000_000),
        ];
        let t = p.job_total(&rows, "s3://tiles-eu/fox");
        // Stage cache: 2 GB × 30/30 month × $0.023 = $0.046; published: 1 GB × $0.023 = $0.023.
        assert!((t.storage_usd - 0.069).abs() < 1e-12, "{t:?}");
        // us-east-1 → eu-west-1 at $0.02/GB: (0.5 + 1) GB = $0.03, the failed half is waste.
        assert!((t.egress_usd - 0.03).abs() < 1e-12, "{t:?}");
        assert!((t.waste_usd - 0.01).abs() < 1e-12, "{t:?}");
        assert!((t.usd - 0.099).abs() < 1e-12, "{t:?}");
        let line = CostLine::for_job_to("j", "art", "succeeded", "s3://tiles-eu/fox", &rows, &p);
        assert!((line.egress_usd - 0.03).abs() < 1e-12 && (line.storage_usd - 0.069).abs() < 1e-12);
        assert_eq!(line.egress_bytes, 1_500_000_000);
        assert!((line.usd - 0.099).abs() < 1e-12, "{line:?}");
        // The same job published beside the workers: storage only.
        let home = p.job_total(&rows, "s3://tiles-us/fox");
        assert_eq!(home.egress_usd, 0.0);
        assert!((home.storage_usd - 0.069).abs() < 1e-12, "{home:?}");
    }

    #[test]
    fn stage_storage_is_charged_once_whether_a_worker_uploaded_a_cache_copy_or_not() {
        let catalog = PriceCatalog::default_catalog();
        let p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        let stored = serde_json::json!({ "stored_bytes": 30_428_567u64 });
        // `kiln run`: the 30,428,567-byte decimate output written once.
        let run = StageRow {
            summary: Some(stored.clone()),
            ..written("decimate", "succeeded", 30_428_567)
        };
        // `kiln worker` with a stage cache: the work folder and the upload, 2 × 30,428,567.
        let worker = StageRow {
            summary: Some(stored),
            ..written("decimate", "succeeded", 60_857_134)
        };
        // 0.030428567 GB × 30/30 month × $0.023/GB-month (S3 Standard) = $0.000699857041.
        let want = 0.030_428_567 * 0.023;
        for row in [run, worker] {
            let c = p.attempt(&row);
            assert!((c.storage_usd - want).abs() < 1e-15, "{c:?}");
        }
        // A row from before the size was recorded: bytes_written.
        let old = written("decimate", "succeeded", 1_000_000_000);
        assert!((p.attempt(&old).storage_usd - 0.023).abs() < 1e-15);
    }

    #[test]
    fn gpu_attempts_are_billed_by_their_providers_increment_and_minimum() {
        // The T4 rented from a provider billing whole hours; the H200 from AWS (1 s, 60 s min).
        let text = DEFAULT_TOML.replace(
            "[sku.T4]\nprovider = \"AWS\"",
            "[sku.T4]\nprovider = \"HourlyCloud\"",
        ) + "\n[billing.HourlyCloud]\nbasis = \"test\"\nanchor = \"test\"\nas_of = \"2026-12-02\"\n\
             confidence = \"?\"\ngranularity_s = 3600.0\nminimum_s = 0.0\n";
        let catalog = PriceCatalog::from_toml_str(&text, "hourly.toml").unwrap();
        let p = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        // 61 s on a T4: one whole hour, $0.526.
        let t4 = row("succeeded", "cuda:0", Some("Tesla T4"), 0.0, 61.0);
        assert_eq!(p.billed_gpu_s(&t4), 3600.0);
        assert!((p.attempt(&t4).gpu_usd - 0.526).abs() < 1e-12);
        // Half a T4 for 61 s (gpu_s = 30.5): half of one billed hour.
        let half = StageRow {
            wall_s: 61.0,
            gpu_s: 30.5,
            ..t4.clone()
        };
        assert_eq!(p.billed_gpu_s(&half), 1800.0);
        // 5 s on an H200: AWS's 60 s minimum at $7.9/h; committed has no H200 rounding.
        let h200 = row("succeeded", "cuda:0", Some("NVIDIA H200"), 0.0, 5.0);
        assert_eq!(p.billed_gpu_s(&h200), 60.0);
        assert!((p.attempt(&h200).gpu_usd - 60.0 * 7.9 / 3600.0).abs() < 1e-12);
        let committed = Pricing {
            tier: Tier::Committed,
            ..p.clone()
        };
        assert_eq!(committed.billed_gpu_s(&h200), 5.0);
        assert!((committed.attempt(&h200).gpu_usd - 5.0 * 5.408 / 3600.0).abs() < 1e-12);
        // CPU attempts are consumption: never rounded (3 CPU-s at $0.03825/vCPU-h).
        let cpu = row("succeeded", "cpu", None, 3.0, 0.0);
        assert!((p.attempt(&cpu).cpu_usd - 3.0 * 0.03825 / 3600.0).abs() < 1e-15);
    }
}
