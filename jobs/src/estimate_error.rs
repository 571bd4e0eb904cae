//! How far `kiln plan`'s estimates were from what jobs cost (`kiln report --estimate-error`).
//!
//! For every job whose estimate was recorded ([`crate::estimate::RecordedEstimate`], kept when
//! the job ran), each stage's estimate is priced the way the stage actually ran, and compared
//! with the stage's cost in the ledger:
//!
//! - estimated USD: on a GPU (any attempt held one) the reference GPU-seconds ÷ the relative speed
//!   of the SKU it ran on, at that row's rate ([`Pricing::gpu_rate_of`], so partial-GPU slots
//!   count at their share); on CPUs the estimated vCPU-seconds at the vCPU rate. No billing
//!   minimum (it belongs to a machine, not a stage).
//! - actual USD: the compute part (GPU + CPU, as billed: provider increments and minimums
//!   included) of every attempt of the stage ([`Pricing::attempt`]), failed ones included — the
//!   bill; an estimate that ignores retries shows up as error, which is the point. Storage and
//!   egress are left out on both sides (`kiln plan` does not estimate them).
//! - absolute percentage error |estimated − actual| / actual. Stages taken from the cache (every
//!   attempt `cached`: the estimate is for running them) or whose actual cost is 0 have no error
//!   and are counted as `skipped`.
//!
//! Per stage kind the mean absolute percentage error (MAPE, in percent) is the mean of those.

use serde::Serialize;

use crate::costing::Pricing;
use crate::estimate::{RecordedEstimate, relative_speed};
use crate::ledger::StageRow;

/// One stage of one job: estimate against bill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageComparison {
    pub job_id: String,
    pub stage: String,
    /// `history`, `model` or `unknown`: what the estimate was based on.
    pub basis: String,
    pub estimated_usd: f64,
    pub actual_usd: f64,
    /// |estimated − actual| / actual; `None` when the stage was cached or cost 0.
    pub ape: Option<f64>,
}

/// The error over all jobs, for one stage kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageError {
    pub stage: String,
    /// Stages of this kind (one per job) with a defined error.
    pub stages: usize,
    /// Mean absolute percentage error, percent; `None` when `stages` is 0.
    pub mape_pct: Option<f64>,
    /// Σ estimated and Σ actual USD over those jobs.
    pub estimated_usd: f64,
    pub actual_usd: f64,
    /// Stages with an actual cost of 0 (cached, not run): no error defined.
    pub skipped: usize,
}

/// Compare one job's recorded estimate with its ledger rows (stages in the estimate's order;
/// stages the estimate has but the ledger does not are left out).
pub fn compare_job(
    job_id: &str,
    recorded: &RecordedEstimate,
    rows: &[StageRow],
    pricing: &Pricing,
) -> Vec<StageComparison> {
    let mut out = Vec::new();
    for st in &recorded.stages {
        let attempts: Vec<&StageRow> = rows.iter().filter(|r| r.stage == st.stage).collect();
        if attempts.is_empty() {
            continue;
        }
        // Reused from the stage cache: the estimate is for running the stage, so no error.
        let ran = attempts.iter().any(|r| r.state != "cached");
        // Compute only: the estimate models GPU and CPU time, not storage or egress.
        let actual_usd: f64 = attempts
            .iter()
            .map(|r| {
                let c = pricing.attempt(r);
                c.gpu_usd + c.cpu_usd
            })
            .sum();
        let gpu_row = attempts
            .iter()
            .rev()
            .find(|r| r.gpu_s > 0.0 || r.device.starts_with("cuda"));
        let estimated_usd = match (gpu_row, st.reference_gpu_s) {
            (Some(r), Some(reference_s)) => {
                let sku = pricing.sku_of(r);
                let speed = relative_speed(pricing.catalog, &sku).unwrap_or(1.0);
                reference_s / speed / 3600.0 * pricing.gpu_rate_of(r)
            }
            _ => st.vcpu_s / 3600.0 * pricing.cpu_rate(),
        };
        out.push(StageComparison {
            job_id: job_id.to_string(),
            stage: st.stage.clone(),
            basis: st.basis.clone(),
            estimated_usd,
            actual_usd,
            ape: (ran && actual_usd > 0.0).then(|| (estimated_usd - actual_usd).abs() / actual_usd),
        });
    }
    out
}

/// MAPE per stage kind over `comparisons`, stages in first-seen order.
pub fn by_stage(comparisons: &[StageComparison]) -> Vec<StageError> {
    let mut out: Vec<(StageError, f64)> = Vec::new();
    for c in comparisons {
        let i = match out.iter().position(|(e, _)| e.stage == c.stage) {
            Some(i) => i,
            None => {
                out.push((
                    StageError {
                        stage: c.stage.clone(),
                        stages: 0,
                        mape_pct: None,
                        estimated_usd: 0.0,
                        actual_usd: 0.0,
                        skipped: 0,
                    },
                    0.0,
                ));
                out.len() - 1
            }
        };
        let (e, sum_ape) = &mut out[i];
        match c.ape {
            Some(ape) => {
                e.stages += 1;
                *sum_ape += ape;
                e.estimated_usd += c.estimated_usd;
                e.actual_usd += c.actual_usd;
            }
            None => e.skipped += 1,
        }
    }
    out.into_iter()
        .map(|(mut e, sum)| {
            e.mape_pct = (e.stages > 0).then(|| 100.0 * sum / e.stages as f64);
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::RecordedStage;
    use crate::ledger::Ledger;
    use crate::prices::{PriceCatalog, Tier};
    use kiln_pipeline::meter::StageUsage;

    fn recorded(ingest_vcpu_s: f64, train_ref_gpu_s: f64) -> serde_json::Value {
        serde_json::to_value(RecordedEstimate {
            catalog_version: "t".into(),
            reference_sku: "A100-40GB".into(),
            stages: vec![
                RecordedStage {
                    stage: "ingest".into(),
                    vcpu_s: ingest_vcpu_s,
                    reference_gpu_s: None,
                    basis: "model".into(),
                },
                RecordedStage {
                    stage: "train".into(),
                    vcpu_s: 1e6,
                    reference_gpu_s: Some(train_ref_gpu_s),
                    basis: "model".into(),
                },
            ],
        })
        .unwrap()
    }

    async fn stage(l: &Ledger, job: &str, stage: &str, state: &str, usage: StageUsage) {
        let a = l.start_stage(job, stage, &usage.device).await.unwrap();
        l.finish_stage(a, state, None, &usage, None, None)
            .await
            .unwrap();
    }

    fn cpu(cpu_s: f64) -> StageUsage {
        StageUsage {
            device: "cpu".into(),
            wall_s: cpu_s,
            cpu_s,
            ..Default::default()
        }
    }

    fn a100(gpu_s: f64) -> StageUsage {
        StageUsage {
            device: "cuda:0".into(),
            wall_s: gpu_s,
            gpu_s,
            device_name: Some("NVIDIA A100-SXM4-40GB".into()),
            ..Default::default()
        }
    }

    /// A hand-built ledger of three jobs, read back through the ledger:
    /// - job a: ingest estimated 10 vCPU-s, cost 8 → APE 2/8 = 0.25; train estimated 200
    ///   reference GPU-s on the reference A100-40GB (speed 1), cost 250 → 50/250 = 0.2.
    /// - job b: ingest estimated 10, cost 12.5 → 2.5/12.5 = 0.2; train estimated 200, a failed
    ///   attempt of 300 s and a successful one of 100 s → 400 s billed → 200/400 = 0.5 (both
    ///   attempts are over AWS's 60 s minimum, so no rounding).
    /// - job c: ingest taken from the cache (1 ms of CPU, but cached: skipped); no train; job d
    ///   has no estimate.
    ///
    /// MAPE ingest = (25 % + 20 %) / 2 = 22.5 %; train = (20 % + 50 %) / 2 = 35 %. USD: the
    /// same ratios, since both sides use one rate per stage (A100-40GB $2.745/GPU-h, vCPU
    /// $0.03825/h): train a estimated 200/3600 × 2.745 = $0.1525.
    #[tokio::test]
    async fn mape_per_stage_over_a_hand_built_ledger() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger::open(&d.path().join("l.sqlite")).await.unwrap();
        for id in ["a", "b", "c", "d"] {
            l.start_job(id, id, "capture", "in", "out", "{}")
                .await
                .unwrap();
        }
        l.record_estimate("a", &recorded(10.0, 200.0))
            .await
            .unwrap();
        l.record_estimate("b", &recorded(10.0, 200.0))
            .await
            .unwrap();
        l.record_estimate("c", &recorded(10.0, 200.0))
            .await
            .unwrap();
        stage(&l, "a", "ingest", "succeeded", cpu(8.0)).await;
        stage(&l, "a", "train", "succeeded", a100(250.0)).await;
        stage(&l, "b", "ingest", "succeeded", cpu(12.5)).await;
        stage(&l, "b", "train", "failed", a100(300.0)).await;
        stage(&l, "b", "train", "succeeded", a100(100.0)).await;
        stage(&l, "c", "ingest", "cached", cpu(0.001)).await;
        stage(&l, "d", "ingest", "succeeded", cpu(99.0)).await;

        let catalog = PriceCatalog::default_catalog();
        let pricing = Pricing {
            catalog: &catalog,
            tier: Tier::OnDemand,
            fallback_sku: None,
        };
        let mut all = Vec::new();
        for job in l.jobs().await.unwrap() {
            let Some(v) = l.estimate(&job.id).await.unwrap() else {
                continue;
            };
            let rec: RecordedEstimate = serde_json::from_value(v).unwrap();
            all.extend(compare_job(
                &job.id,
                &rec,
                &l.stages(&job.id).await.unwrap(),
                &pricing,
            ));
        }
        let e = by_stage(&all);
        assert_eq!(e.len(), 2, "{e:?}");
        let ingest = e.iter().find(|s| s.stage == "ingest").unwrap();
        assert_eq!((ingest.stages, ingest.skipped), (2, 1));
        assert!((ingest.mape_pct.unwrap() - 22.5).abs() < 1e-9, "{ingest:?}");
        let train = e.iter().find(|s| s.stage == "train").unwrap();
        assert_eq!((train.stages, train.skipped), (2, 0));
        assert!((train.mape_pct.unwrap() - 35.0).abs() < 1e-9, "{train:?}");
        let a_train = all
            .iter()
            .find(|c| c.job_id == "a" && c.stage == "train")
            .unwrap();
        assert!(
            (a_train.estimated_usd - 0.1525).abs() < 1e-12,
            "{a_train:?}"
        );
    }
}
