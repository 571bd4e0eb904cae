//! Before a job runs: estimated GPU-hours and USD per stage and per SKU (`kiln plan`).
//!
//! **This is a rough model.** Its purpose is to tell a user "a few cents" from "tens of dollars"
//! before they start a job, not to quote a bill. It works in two steps:
//!
//! 1. **Seconds per stage on reference hardware.** Each stage of the plan gets vCPU-seconds (when
//!    it runs on the CPU) and, for `train`, GPU-seconds on the reference GPU
//!    ([`REFERENCE_GPU_SKU`]). When the ledger has successful attempts of the same stage on the
//!    same kind of job, the *median* rate of those attempts is scaled to this job
//!    ([`Basis::History`], with the number of rows used):
//!    - `train`: seconds per *pixel-step* (steps × pixels per training view; steps come from the
//!      train row's summary, the view size from the same job's ingest summary). GPU rows are first
//!      converted to the reference GPU with [`relative_speed`]; CPU rows give vCPU-seconds.
//!    - every other stage: vCPU-seconds per byte the stage read, times this job's input bytes
//!      (this assumes each stage reads about as many bytes as the job's input: close for
//!      `ingest` and `tile` of a splats job, an overestimate for `publish`).
//!
//!    Without history the constants below are used ([`Basis::Model`]); each says where it comes
//!    from. `reconstruct` (COLMAP) has no model and is reported as [`Basis::Unknown`] with 0 s.
//! 2. **Money per SKU.** GPU-seconds on SKU *s* = reference GPU-seconds ÷ [`relative_speed`]
//!    (*s*), billed at least the catalog's `billing_minimum_s` (one lease for the GPU stages);
//!    every non-GPU stage is charged at the catalog's vCPU rate, as if run on a separate CPU
//!    worker (pipeline-anchors.md §3.5 `cpu_$`). The `cpu` row runs the whole job, training
//!    included, on CPUs. Spot totals exist only where the catalog has both a GPU and a CPU spot
//!    rate.
//!
//! What the model leaves out: per-step fixed overheads on the GPU (kernel launches, host round
//! trips; they dominate small views, so small jobs are underestimated, although the billing
//! minimum usually covers them), the growth of the splat count during training, queueing, image
//! pulls and data staging, storage and egress, failed attempts. No Kiln training run on a GPU is
//! recorded yet, so the GPU constant comes from a published gsplat figure, not from Kiln.
//!
//! The estimating functions are pure: the caller gathers the plan's shape and the ledger rows
//! ([`local_bytes`] and [`capture_train_shape`] are the two helpers that read the local input).

use std::path::{Path, PathBuf};

use serde::Serialize;

use kiln_pipeline::stages::summary::{IngestSummary, StageSummary};

use crate::ledger::StageRow;
use crate::prices::{PriceCatalog, PriceError};

/// The GPU whose speed is 1.0 in [`relative_speed`], and on which [`MODEL_GPU_S_PER_PIXEL_STEP`]
/// was measured.
pub const REFERENCE_GPU_SKU: &str = "A100-40GB";

/// Fallback model for `train` on a GPU: GPU-seconds per pixel-step on the reference GPU
/// (≈ 2.25e-8 s).
///
/// Source: gsplat's MCMC strategy with a 1 M splat cap trains Mip-NeRF 360 (7 scenes) for 30 000
/// steps in 15.42 min on an A100 (research note splat-anchors.md §1, from gsplat
/// `docs/source/tests/eval.rst`): 0.03084 s per step. Its views are about 1.37 Mpx on average
/// (outdoor scenes at ¼ and indoor at ½ of the original resolution, gsplat's benchmark
/// settings; the view size is our assumption, not re-checked). Assumes Kiln's CUDA path reaches
/// gsplat's throughput, which has not been measured; per-step overheads are not modelled.
pub const MODEL_GPU_S_PER_PIXEL_STEP: f64 = 0.03084 / 1.37e6;

/// Fallback model for `train` on CPUs: vCPU-seconds per pixel-step (≈ 1.40e-5 s).
///
/// Source: `datasets/baselines.toml`, scene fox, full mode: 3.49002 steps/s at 152×270 px
/// (41 040 px) views on the 2-core CI machine, ending at 56 204 splats: 2 vCPU ÷ 3.49002 steps/s
/// ÷ 41 040 px (both cores counted busy for the whole stage).
pub const MODEL_CPU_VCPU_S_PER_PIXEL_STEP: f64 = 2.0 / 3.49002 / 41_040.0;

/// Fallback model for every CPU stage but `reconstruct`: vCPU-seconds per byte of job input.
///
/// Source: the avocado example in `docs/running.md` (`kiln report`): each of ingest, decimate,
/// tile and publish used ≤ 0.06 CPU-s for an 8.3 MB input (≤ 7.2e-9 s/B), rounded up to 1e-8 s/B.
pub const MODEL_CPU_STAGE_VCPU_S_PER_BYTE: f64 = 1e-8;

/// Stages that use a GPU when one is leased (the others always run on CPUs).
pub const GPU_STAGES: &[&str] = &["train"];

/// The name of the CPU-only row in [`Estimate::skus`].
pub const CPU_SKU: &str = "cpu";

/// What is known about the job before it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobShape {
    /// Job kind as in the ledger (`capture`, `mesh`, `splats`); history of other kinds is ignored.
    pub kind: String,
    /// Stage names in run order (`ingest`, `train`, …).
    pub stages: Vec<String>,
    /// Bytes of the job's input (file, or all files under a folder); 0 when unknown (remote).
    pub input_bytes: u64,
    /// Capture jobs: the training workload; `None` for other jobs or when unknown.
    pub train: Option<TrainShape>,
}

/// The training workload of a capture job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrainShape {
    /// Optimizer steps (one view per step).
    pub steps: u64,
    /// Pixels of one training view after ingest's downscale (width × height).
    pub pixels_per_view: u64,
}

impl TrainShape {
    /// Steps × pixels per view: the unit training time is scaled by.
    pub fn pixel_steps(&self) -> f64 {
        self.steps as f64 * self.pixels_per_view as f64
    }
}

/// One past job from the ledger: its kind and its stage attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryJob {
    pub kind: String,
    pub stages: Vec<StageRow>,
}

/// Where a stage's seconds come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Basis {
    /// The median rate of `rows` successful ledger attempts, scaled to this job.
    History { rows: usize },
    /// A fallback constant of this module (`source` names it).
    Model { source: String },
    /// No figure: counted as 0 s.
    Unknown { reason: String },
}

impl std::fmt::Display for Basis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Basis::History { rows } => write!(f, "history ({rows} rows)"),
            Basis::Model { source } => write!(f, "model ({source})"),
            Basis::Unknown { reason } => write!(f, "unknown ({reason})"),
        }
    }
}

/// Seconds of one stage on reference hardware.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEstimate {
    pub stage: String,
    /// True for stages that use a GPU when one is leased ([`GPU_STAGES`]).
    pub gpu_stage: bool,
    /// vCPU-seconds when the stage runs on CPUs (always for non-GPU stages; the `cpu` row for
    /// GPU stages).
    pub vcpu_s: f64,
    pub vcpu_basis: Basis,
    /// GPU stages: GPU-seconds on the reference GPU ([`REFERENCE_GPU_SKU`]).
    pub reference_gpu_s: Option<f64>,
    pub gpu_basis: Option<Basis>,
}

/// The job's cost on one SKU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkuEstimate {
    /// Catalog SKU name, or [`CPU_SKU`] for the CPU-only row.
    pub sku: String,
    /// This SKU's speed relative to the reference GPU (`None` on the `cpu` row).
    pub relative_speed: Option<f64>,
    /// Estimated GPU-seconds of the GPU stages on this SKU, before the billing minimum.
    pub gpu_s: f64,
    /// GPU-hours billed: max(`gpu_s`, billing minimum) / 3600, 0 without GPU stages.
    pub gpu_hours: f64,
    /// vCPU-hours of the stages run on CPUs.
    pub vcpu_hours: f64,
    /// USD on-demand: GPU-hours × $/GPU-hour + vCPU-hours × $/vCPU-hour.
    pub usd_on_demand: f64,
    /// USD at spot rates; `None` when the catalog lacks the SKU's or the CPU's spot rate (and
    /// GPU-hours are needed).
    pub usd_spot: Option<f64>,
    /// Where `gpu_s` comes from: history on this very SKU (median GPU-seconds per pixel-step of
    /// its successful attempts, no speed conversion), or `None` = the reference estimate ÷
    /// `relative_speed`.
    #[serde(default)]
    pub gpu_basis: Option<Basis>,
    /// For a partial-GPU slot (`H100:1g.10gb`, `H100:0.5`): its share of the GPU. `gpu_s` is
    /// then seconds on the slot (GPU seconds ÷ fraction, assuming throughput scales with the
    /// share) and `gpu_hours` GPU-equivalent hours billed (slot hours × fraction).
    #[serde(default)]
    pub slot_fraction: Option<f64>,
}

/// The estimate of one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The price catalog's `version`.
    pub catalog_version: String,
    pub reference_sku: String,
    /// Per stage, in plan order.
    pub stages: Vec<StageEstimate>,
    /// Per SKU, in the order asked.
    pub skus: Vec<SkuEstimate>,
}

/// Speed of `sku` relative to [`REFERENCE_GPU_SKU`]: √(FP32 TFLOPS ratio × memory bandwidth
/// ratio), from the catalog's datasheet figures.
///
/// An assumption, not a measurement: splat training mixes compute-bound blending with
/// bandwidth-bound sorting and gradient scatter, so both ratios are weighted equally (geometric
/// mean). With the built-in catalog: T4 0.29, L4 0.55, A10G 0.79, L40S 1.62, A100-80GB 1.15,
/// H100 2.72, H200 3.26.
///
/// # Errors
/// [`PriceError::UnknownSku`] for `sku` or a catalog without the reference SKU.
pub fn relative_speed(catalog: &PriceCatalog, sku: &str) -> Result<f64, PriceError> {
    let s = catalog.sku(sku)?;
    let r = catalog.sku(REFERENCE_GPU_SKU)?;
    Ok(
        ((s.fp32_tflops / r.fp32_tflops) * (s.memory_bandwidth_gbs / r.memory_bandwidth_gbs))
            .sqrt(),
    )
}

/// The catalog SKU a GPU's reported name (`NVIDIA A100-SXM4-80GB`, `Tesla T4`) is: every
/// `-`-separated part of the SKU name must be a token of the device name (tokens split at
/// anything not alphanumeric, compared case-insensitively); the longest SKU name wins (`L40S`
/// over `L4`). `None` when no SKU matches.
pub fn sku_for_device_name<'a>(catalog: &'a PriceCatalog, device_name: &str) -> Option<&'a str> {
    let tokens: Vec<String> = device_name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(|t| t.to_ascii_uppercase())
        .collect();
    catalog
        .sku
        .keys()
        .filter(|k| {
            k.split('-')
                .all(|part| tokens.iter().any(|t| *t == part.to_ascii_uppercase()))
        })
        .max_by_key(|k| k.len())
        .map(|k| k.as_str())
}

/// Median of `v` (mean of the middle two for an even count); `None` when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The vCPU-seconds of a row: `cpu_s`, or `wall_s` when no CPU time was measured.
fn vcpu_seconds(r: &StageRow) -> f64 {
    if r.cpu_s > 0.0 { r.cpu_s } else { r.wall_s }
}

/// Pixel-steps of a job's train attempt `train`: steps from its summary, view size from the job's
/// ingest summary (`width`, `height`).
fn history_pixel_steps(job: &HistoryJob, train: &StageRow) -> Option<f64> {
    let summary = StageSummary::parse_logged(&train.stage, train.summary.as_ref()?)?;
    let steps = summary.train()?.steps as f64;
    let ingest = job.stages.iter().rev().find(|r| {
        r.stage == "ingest"
            && matches!(r.state.as_str(), "succeeded" | "cached")
            && r.summary.is_some()
    })?;
    let IngestSummary::Capture(capture) =
        StageSummary::parse_logged(&ingest.stage, ingest.summary.as_ref()?)?
            .ingest()?
            .clone()
    else {
        return None;
    };
    let px = f64::from(capture.width?) * f64::from(capture.height?);
    (steps > 0.0 && px > 0.0).then_some(steps * px)
}

/// Rates of a non-GPU stage from history: vCPU-seconds per byte read.
fn cpu_stage_rates(stage: &str, kind: &str, history: &[HistoryJob]) -> Vec<f64> {
    history
        .iter()
        .filter(|j| j.kind == kind)
        .flat_map(|j| j.stages.iter())
        .filter(|r| r.stage == stage && r.state == "succeeded" && r.bytes_read > 0)
        .map(|r| vcpu_seconds(r) / r.bytes_read as f64)
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect()
}

/// Rates of `train` from history: (reference GPU-seconds per pixel-step from GPU rows whose
/// device maps to a catalog SKU, vCPU-seconds per pixel-step from CPU rows).
fn train_rates(
    kind: &str,
    history: &[HistoryJob],
    catalog: &PriceCatalog,
) -> Result<(Vec<f64>, Vec<f64>), PriceError> {
    let (mut gpu, mut cpu) = (Vec::new(), Vec::new());
    for job in history.iter().filter(|j| j.kind == kind) {
        for r in job
            .stages
            .iter()
            .filter(|r| r.stage == "train" && r.state == "succeeded")
        {
            let Some(units) = history_pixel_steps(job, r) else {
                continue;
            };
            if r.device == "cpu" {
                let s = vcpu_seconds(r);
                if s > 0.0 {
                    cpu.push(s / units);
                }
            } else if r.gpu_s > 0.0 {
                let sku = r
                    .device_name
                    .as_deref()
                    .and_then(|n| sku_for_device_name(catalog, n));
                if let Some(sku) = sku {
                    gpu.push(r.gpu_s * relative_speed(catalog, sku)? / units);
                }
            }
        }
    }
    Ok((gpu, cpu))
}

/// Seconds of every stage of `shape` on reference hardware (step 1 of the module docs).
///
/// # Errors
/// [`PriceError::UnknownSku`] when the catalog lacks [`REFERENCE_GPU_SKU`] and GPU history must be
/// converted.
pub fn stage_estimates(
    shape: &JobShape,
    history: &[HistoryJob],
    catalog: &PriceCatalog,
) -> Result<Vec<StageEstimate>, PriceError> {
    let mut out = Vec::with_capacity(shape.stages.len());
    for stage in &shape.stages {
        let gpu_stage = GPU_STAGES.contains(&stage.as_str());
        let est = if gpu_stage {
            let (gpu_rates, cpu_rates) = train_rates(&shape.kind, history, catalog)?;
            match shape.train {
                None => StageEstimate {
                    stage: stage.clone(),
                    gpu_stage,
                    vcpu_s: 0.0,
                    vcpu_basis: Basis::Unknown {
                        reason: "training steps or view size unknown".into(),
                    },
                    reference_gpu_s: Some(0.0),
                    gpu_basis: Some(Basis::Unknown {
                        reason: "training steps or view size unknown".into(),
                    }),
                },
                Some(t) => {
                    let units = t.pixel_steps();
                    let (gpu_s, gpu_basis) = match median(gpu_rates.clone()) {
                        Some(m) => (
                            m * units,
                            Basis::History {
                                rows: gpu_rates.len(),
                            },
                        ),
                        None => (
                            units * MODEL_GPU_S_PER_PIXEL_STEP,
                            Basis::Model {
                                source: "gsplat MCMC-1M on A100, 0.0308 s/step at ~1.37 Mpx".into(),
                            },
                        ),
                    };
                    let (vcpu_s, vcpu_basis) = match median(cpu_rates.clone()) {
                        Some(m) => (
                            m * units,
                            Basis::History {
                                rows: cpu_rates.len(),
                            },
                        ),
                        None => (
                            units * MODEL_CPU_VCPU_S_PER_PIXEL_STEP,
                            Basis::Model {
                                source: "fox baseline, 3.49 steps/s at 152×270 on 2 cores".into(),
                            },
                        ),
                    };
                    StageEstimate {
                        stage: stage.clone(),
                        gpu_stage,
                        vcpu_s,
                        vcpu_basis,
                        reference_gpu_s: Some(gpu_s),
                        gpu_basis: Some(gpu_basis),
                    }
                }
            }
        } else {
            let rates = cpu_stage_rates(stage, &shape.kind, history);
            let (vcpu_s, vcpu_basis) = match median(rates.clone()) {
                Some(m) => (
                    m * shape.input_bytes as f64,
                    Basis::History { rows: rates.len() },
                ),
                None if stage == "reconstruct" => (
                    0.0,
                    Basis::Unknown {
                        reason: "no model for COLMAP structure-from-motion".into(),
                    },
                ),
                None => (
                    MODEL_CPU_STAGE_VCPU_S_PER_BYTE * shape.input_bytes as f64,
                    Basis::Model {
                        source: "1e-8 vCPU-s per input byte".into(),
                    },
                ),
            };
            StageEstimate {
                stage: stage.clone(),
                gpu_stage,
                vcpu_s,
                vcpu_basis,
                reference_gpu_s: None,
                gpu_basis: None,
            }
        };
        out.push(est);
    }
    Ok(out)
}

/// The cost of `stages` on `sku` ([`CPU_SKU`] for CPUs only; step 2 of the module docs).
///
/// # Errors
/// [`PriceError::UnknownSku`] listing the catalog's SKUs.
pub fn sku_estimate(
    stages: &[StageEstimate],
    catalog: &PriceCatalog,
    sku: &str,
) -> Result<SkuEstimate, PriceError> {
    whole_sku_estimate(stages, catalog, sku, None)
}

/// [`sku_estimate`] with the GPU-seconds on `sku` taken from `own` = (GPU-seconds, rows) of this
/// SKU's history when there is some.
fn whole_sku_estimate(
    stages: &[StageEstimate],
    catalog: &PriceCatalog,
    sku: &str,
    own: Option<(f64, usize)>,
) -> Result<SkuEstimate, PriceError> {
    let cpu_od = catalog.cpu.vcpu_hour_usd_on_demand;
    let cpu_spot = catalog.cpu.vcpu_hour_usd_spot;
    if sku == CPU_SKU {
        let vcpu_hours = stages.iter().map(|s| s.vcpu_s).fold(0.0, |a, b| a + b) / 3600.0;
        return Ok(SkuEstimate {
            sku: sku.to_string(),
            relative_speed: None,
            gpu_s: 0.0,
            gpu_hours: 0.0,
            vcpu_hours,
            usd_on_demand: vcpu_hours * cpu_od,
            usd_spot: cpu_spot.map(|r| vcpu_hours * r),
            gpu_basis: None,
            slot_fraction: None,
        });
    }
    let entry = catalog.sku(sku)?;
    let speed = relative_speed(catalog, sku)?;
    let converted: f64 = stages
        .iter()
        .filter_map(|s| s.reference_gpu_s)
        .fold(0.0, |a, b| a + b)
        / speed;
    let (gpu_s, gpu_basis) = match own {
        Some((s, rows)) => (s, Some(Basis::History { rows })),
        None => (converted, None),
    };
    let gpu_hours = catalog.billed_seconds(gpu_s) / 3600.0;
    let vcpu_hours = stages
        .iter()
        .filter(|s| !s.gpu_stage)
        .map(|s| s.vcpu_s)
        .fold(0.0, |a, b| a + b)
        / 3600.0;
    let usd_on_demand = gpu_hours * entry.gpu_hour_usd_on_demand + vcpu_hours * cpu_od;
    let gpu_spot = if gpu_hours > 0.0 {
        entry.gpu_hour_usd_spot.map(|r| gpu_hours * r)
    } else {
        Some(0.0)
    };
    let usd_spot = match (gpu_spot, cpu_spot) {
        (Some(g), Some(c)) => Some(g + vcpu_hours * c),
        (Some(g), None) if vcpu_hours == 0.0 => Some(g),
        _ => None,
    };
    Ok(SkuEstimate {
        sku: catalog
            .sku
            .keys()
            .find(|k| k.eq_ignore_ascii_case(sku))
            .cloned()
            .unwrap_or_else(|| sku.to_string()),
        relative_speed: Some(speed),
        gpu_s,
        gpu_hours,
        vcpu_hours,
        usd_on_demand,
        usd_spot,
        gpu_basis,
        slot_fraction: None,
    })
}

/// The cost on a partial-GPU slot: the whole-SKU estimate's GPU-seconds ÷ fraction on the slot
/// (throughput assumed proportional to the share: a 1g slice has 1/7 of the SMs), billed at
/// least the billing minimum of slot time, charged slot-hours × fraction at the SKU's
/// GPU-hour, or at the profile's published slot price where the catalog has one.
fn slot_estimate(
    whole: SkuEstimate,
    slot: &crate::gpu_slot::GpuSlot,
    catalog: &PriceCatalog,
) -> SkuEstimate {
    use crate::prices::Tier;
    let sku = whole.sku.clone();
    let slot_s = whole.gpu_s / slot.fraction;
    let gpu_hours = catalog.billed_seconds(slot_s) * slot.fraction / 3600.0;
    let cpu_od = catalog.cpu.vcpu_hour_usd_on_demand;
    let od = slot
        .gpu_hour_usd(catalog, &sku, Tier::OnDemand)
        .unwrap_or(0.0);
    let usd_on_demand = gpu_hours * od + whole.vcpu_hours * cpu_od;
    let usd_spot = match (
        slot.gpu_hour_usd(catalog, &sku, Tier::Spot),
        catalog.cpu.vcpu_hour_usd_spot,
    ) {
        (Some(g), Some(c)) => Some(gpu_hours * g + whole.vcpu_hours * c),
        (Some(g), None) if whole.vcpu_hours == 0.0 => Some(gpu_hours * g),
        _ => None,
    };
    SkuEstimate {
        sku: slot.label.clone(),
        relative_speed: whole.relative_speed.map(|v| v * slot.fraction),
        gpu_s: slot_s,
        gpu_hours,
        usd_on_demand,
        usd_spot,
        slot_fraction: Some(slot.fraction),
        ..whole
    }
}

/// Dollars to four decimals, `<$0.0001` for a smaller amount above 0 (so a few hundredths of a
/// cent do not read as free), as `kiln plan` prints every USD figure.
pub fn usd4(v: f64) -> String {
    if v > 0.0 && v < 0.0001 {
        "<$0.0001".to_string()
    } else {
        format!("${v:.4}")
    }
}

/// One estimate row priced at one pricing tier, as `kiln plan` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PricedRow {
    /// GPU-equivalent hours billed at the tier: the lease's slot seconds billed by the SKU's
    /// provider rule ([`PriceCatalog::billed_gpu_seconds`]; exact seconds for committed) × the
    /// slot's fraction (1 for a whole GPU) / 3600. 0 on the `cpu` row.
    pub gpu_hours_billed: f64,
    /// USD: `gpu_hours_billed` × the tier's $/GPU-hour (a MIG profile's published slot price ÷
    /// fraction where the catalog lists one) + vCPU-hours × the tier's $/vCPU-hour. Committed
    /// falls back to on-demand where the catalog has no committed price; `None` for spot where
    /// the catalog has no spot price for a rate that is needed.
    pub usd: Option<f64>,
}

/// Price estimate row `k` at `tier`, the same way for whole GPUs, partial-GPU slots
/// (`H100:1g.10gb`: `k.gpu_s` are slot seconds, billed as one lease of the slot, then × fraction)
/// and the `cpu` row.
///
/// # Errors
/// [`PriceError::UnknownSku`] for a SKU no longer in `catalog`.
pub fn price_at(
    k: &SkuEstimate,
    catalog: &PriceCatalog,
    tier: crate::prices::Tier,
) -> Result<PricedRow, PriceError> {
    use crate::prices::Tier;
    let cpu_rate = catalog
        .vcpu_hour_usd(tier)
        .or_else(|| (tier == Tier::Committed).then_some(catalog.cpu.vcpu_hour_usd_on_demand));
    let cpu_usd = if k.vcpu_hours > 0.0 {
        cpu_rate.map(|r| k.vcpu_hours * r)
    } else {
        Some(0.0)
    };
    if k.sku == CPU_SKU || k.gpu_s <= 0.0 {
        return Ok(PricedRow {
            gpu_hours_billed: 0.0,
            usd: cpu_usd,
        });
    }
    let slot = match k.slot_fraction {
        Some(_) => Some(
            crate::gpu_slot::GpuSlot::parse(&k.sku, catalog).map_err(|_| {
                PriceError::UnknownSku {
                    sku: k.sku.clone(),
                    catalog: catalog.file.clone(),
                    known: catalog.sku.keys().cloned().collect::<Vec<_>>().join(", "),
                }
            })?,
        ),
        None => None,
    };
    let (sku, fraction) = match &slot {
        Some(s) => (s.sku.clone().unwrap_or_else(|| k.sku.clone()), s.fraction),
        None => (k.sku.clone(), 1.0),
    };
    catalog.sku(&sku)?;
    let rate_at = |t: Tier| match &slot {
        Some(s) => s.gpu_hour_usd(catalog, &sku, t),
        None => catalog.gpu_hour_usd(&sku, t).ok(),
    };
    // Committed without a committed price is bought on demand, and billed by on-demand rules.
    let (rate, billing_tier) = match (tier, rate_at(tier)) {
        (_, Some(r)) => (Some(r), tier),
        (Tier::Committed, None) => (rate_at(Tier::OnDemand), Tier::OnDemand),
        (_, None) => (None, tier),
    };
    let gpu_hours_billed =
        catalog.billed_gpu_seconds(&sku, k.gpu_s, billing_tier) * fraction / 3600.0;
    Ok(PricedRow {
        gpu_hours_billed,
        usd: rate.zip(cpu_usd).map(|(r, c)| gpu_hours_billed * r + c),
    })
}

/// Median GPU-seconds per pixel-step of successful `train` attempts of `kind` jobs on `sku`
/// itself (GPU-equivalent seconds on partial-GPU slots), with the row count; `None` without any.
fn own_sku_train_rate(
    kind: &str,
    history: &[HistoryJob],
    catalog: &PriceCatalog,
    sku: &str,
) -> Option<(f64, usize)> {
    let rates: Vec<f64> = history
        .iter()
        .filter(|j| j.kind == kind)
        .flat_map(|j| {
            j.stages
                .iter()
                .filter(|r| r.stage == "train" && r.state == "succeeded" && r.gpu_s > 0.0)
                .filter(|r| {
                    r.device_name
                        .as_deref()
                        .and_then(|n| sku_for_device_name(catalog, n))
                        .is_some_and(|k| k.eq_ignore_ascii_case(sku))
                })
                .filter_map(move |r| history_pixel_steps(j, r).map(|u| r.gpu_s / u))
        })
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    let n = rates.len();
    median(rates).map(|m| (m, n))
}

/// One SKU row of [`estimate`]: `CPU_SKU`, a catalog SKU (from its own history when it has
/// some), or a partial-GPU slot `SKU:PROFILE` / `SKU:FRACTION`.
fn estimate_for(
    shape: &JobShape,
    history: &[HistoryJob],
    stages: &[StageEstimate],
    catalog: &PriceCatalog,
    name: &str,
) -> Result<SkuEstimate, PriceError> {
    if name == CPU_SKU {
        return whole_sku_estimate(stages, catalog, name, None);
    }
    let (sku, slot) = match name.split_once(':') {
        Some(_) => {
            let slot = crate::gpu_slot::GpuSlot::parse(name, catalog).map_err(|e| match e {
                crate::gpu_slot::SlotError::Catalog { cause, .. } => *cause,
                other => PriceError::BadSkuOption {
                    text: name.to_string(),
                    problem: format!(
                        "{other}. For a whole GPU name the SKU alone (`--sku {}`)",
                        name.split(':').next().unwrap_or(name)
                    ),
                },
            })?;
            (slot.sku.clone().unwrap_or_default(), Some(slot))
        }
        None => (name.to_string(), None),
    };
    let units = shape.train.map(|t| t.pixel_steps());
    let own = match units {
        Some(u) if stages.iter().any(|s| s.gpu_stage) => {
            own_sku_train_rate(&shape.kind, history, catalog, &sku).map(|(m, n)| (m * u, n))
        }
        _ => None,
    };
    let whole = whole_sku_estimate(stages, catalog, &sku, own)?;
    Ok(match slot {
        Some(s) => slot_estimate(whole, &s, catalog),
        None => whole,
    })
}

/// The whole estimate of `shape` for `skus` (catalog names or [`CPU_SKU`]; empty = every catalog
/// SKU from the cheapest on-demand GPU-hour up, then `cpu`), from `history` (past jobs' ledger rows) and `catalog`.
///
/// # Errors
/// [`PriceError::UnknownSku`] for a SKU not in the catalog (listing the known ones) or a catalog
/// without [`REFERENCE_GPU_SKU`].
pub fn estimate(
    shape: &JobShape,
    history: &[HistoryJob],
    catalog: &PriceCatalog,
    skus: &[String],
) -> Result<Estimate, PriceError> {
    catalog.sku(REFERENCE_GPU_SKU)?;
    let stages = stage_estimates(shape, history, catalog)?;
    let all: Vec<String>;
    let skus = if skus.is_empty() {
        let mut by_price: Vec<(&String, f64)> = catalog
            .sku
            .iter()
            .map(|(k, v)| (k, v.gpu_hour_usd_on_demand))
            .collect();
        by_price.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
        all = by_price
            .into_iter()
            .map(|(k, _)| k.clone())
            .chain(std::iter::once(CPU_SKU.to_string()))
            .collect();
        &all
    } else {
        skus
    };
    let skus = skus
        .iter()
        .map(|s| estimate_for(shape, history, &stages, catalog, s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Estimate {
        catalog_version: catalog.version.clone(),
        reference_sku: REFERENCE_GPU_SKU.to_string(),
        stages,
        skus,
    })
}

// Explaining and recording estimates.

/// Where one figure of an estimate comes from (`kiln plan --explain`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The stage, or the SKU row, the figure belongs to.
    pub item: String,
    /// The figure, with its unit.
    pub figure: String,
    /// How it was obtained: ledger rows (how many, the median rate, its range, the units it was
    /// scaled by) or the model constant with its published source.
    pub source: String,
}

/// (min, max) of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        })
}

fn history_text(rates: &[f64], unit: &str, what: &str, units: f64, per: &str) -> String {
    let (lo, hi) = range(rates);
    format!(
        "ledger: median {:.4e} {unit} over {} successful {what} (range {lo:.3e}–{hi:.3e}) × {units:.4e} {per}",
        median(rates.to_vec()).unwrap_or(0.0),
        rates.len()
    )
}

/// Where every figure of `est` comes from, given the same `shape`, `history` and `catalog` it
/// was made from: one line per stage figure and per SKU row.
///
/// # Errors
/// As [`estimate`] (a catalog without the reference SKU).
pub fn explain(
    shape: &JobShape,
    history: &[HistoryJob],
    catalog: &PriceCatalog,
    est: &Estimate,
) -> Result<Vec<Explanation>, PriceError> {
    let mut out = Vec::new();
    let units = shape.train.map(|t| t.pixel_steps()).unwrap_or(0.0);
    let (gpu_rates, cpu_rates) = train_rates(&shape.kind, history, catalog)?;
    for st in &est.stages {
        let kind = &shape.kind;
        let what = format!("`{}` attempts of {kind} jobs", st.stage);
        if let (Some(g), Some(b)) = (st.reference_gpu_s, &st.gpu_basis) {
            let source = match b {
                Basis::History { .. } => format!(
                    "{}; each row's GPU-seconds × its SKU's relative speed (√(FP32 ratio × bandwidth ratio))",
                    history_text(
                        &gpu_rates,
                        "reference-GPU-s/pixel-step",
                        &what,
                        units,
                        "pixel-steps"
                    )
                ),
                Basis::Model { .. } => format!(
                    "model: MODEL_GPU_S_PER_PIXEL_STEP = {MODEL_GPU_S_PER_PIXEL_STEP:.4e} s × {units:.4e} pixel-steps; \
                     gsplat MCMC (1 M splats) trains Mip-NeRF 360 for 30 000 steps in 15.42 min on an A100 at ≈1.37 Mpx/view \
                     (gsplat docs/source/tests/eval.rst, research note splat-anchors.md §1)"
                ),
                Basis::Unknown { reason } => format!("unknown: {reason}; counted as 0"),
            };
            out.push(Explanation {
                item: st.stage.clone(),
                figure: format!("{g:.1} GPU-s on {}", est.reference_sku),
                source,
            });
        }
        let source = match (&st.vcpu_basis, st.gpu_stage) {
            (Basis::History { .. }, true) => {
                history_text(&cpu_rates, "vCPU-s/pixel-step", &what, units, "pixel-steps")
            }
            (Basis::History { .. }, false) => {
                let rates = cpu_stage_rates(&st.stage, kind, history);
                history_text(
                    &rates,
                    "vCPU-s/B read",
                    &what,
                    shape.input_bytes as f64,
                    "input bytes",
                )
            }
            (Basis::Model { .. }, true) => format!(
                "model: MODEL_CPU_VCPU_S_PER_PIXEL_STEP = {MODEL_CPU_VCPU_S_PER_PIXEL_STEP:.4e} vCPU-s × {units:.4e} pixel-steps; \
                 datasets/baselines.toml scene fox: 3.49002 steps/s at 152×270 px on 2 cores"
            ),
            (Basis::Model { .. }, false) => format!(
                "model: MODEL_CPU_STAGE_VCPU_S_PER_BYTE = {MODEL_CPU_STAGE_VCPU_S_PER_BYTE:e} vCPU-s/B × {} input bytes; \
                 docs/running.md avocado example: ≤ 0.06 CPU-s per stage for 8.3 MB, rounded up",
                shape.input_bytes
            ),
            (Basis::Unknown { reason }, _) => format!("unknown: {reason}; counted as 0"),
        };
        out.push(Explanation {
            item: st.stage.clone(),
            figure: format!(
                "{:.2} vCPU-s{}",
                st.vcpu_s,
                if st.gpu_stage { " (CPU-only row)" } else { "" }
            ),
            source,
        });
    }
    for k in &est.skus {
        if k.sku == CPU_SKU {
            out.push(Explanation {
                item: k.sku.clone(),
                figure: format!("{} on-demand", usd4(k.usd_on_demand)),
                source: format!(
                    "every stage's vCPU-s at ${}/vCPU-h (catalog [cpu]: {}; {})",
                    catalog.cpu.vcpu_hour_usd_on_demand, catalog.cpu.basis, catalog.cpu.as_of
                ),
            });
            continue;
        }
        let base = k.sku.split(':').next().unwrap_or(&k.sku);
        let speed = relative_speed(catalog, base)?;
        let seconds = match &k.gpu_basis {
            Some(Basis::History { rows }) => format!(
                "ledger: median GPU-s per pixel-step of {rows} successful train attempts on {base} itself × {units:.4e} pixel-steps"
            ),
            _ => format!(
                "reference {} GPU-s ÷ relative speed {speed:.3} (catalog datasheet FP32 and bandwidth)",
                est.reference_sku
            ),
        };
        let slot = k.slot_fraction.map_or(String::new(), |f| {
            format!(
                "; slot = {f:.4} of the GPU (MIG: compute slices / 7, NVIDIA MIG user guide), seconds ÷ {f:.4}, throughput assumed proportional"
            )
        });
        let entry = catalog.sku(base)?;
        out.push(Explanation {
            item: k.sku.clone(),
            figure: format!("{:.1} GPU-s, {} on-demand", k.gpu_s, usd4(k.usd_on_demand)),
            source: format!(
                "{seconds}{slot}; ${}/GPU-h from catalog {} [sku.{base}] ({}; {}; as of {})",
                entry.gpu_hour_usd_on_demand,
                est.catalog_version,
                entry.basis,
                entry.anchor,
                entry.as_of
            ),
        });
    }
    Ok(out)
}

/// The estimate kept in the ledger with a job (`jobs.estimate`), made when the job was run: the
/// per-stage seconds on reference hardware, so `kiln report --estimate-error` can price them on
/// whatever SKU the job actually ran on.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RecordedEstimate {
    pub catalog_version: String,
    pub reference_sku: String,
    pub stages: Vec<RecordedStage>,
}

/// One stage of a [`RecordedEstimate`].
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RecordedStage {
    pub stage: String,
    /// vCPU-seconds when run on CPUs.
    pub vcpu_s: f64,
    /// GPU stages: GPU-seconds on the reference GPU.
    pub reference_gpu_s: Option<f64>,
    /// `history`, `model` or `unknown` (of the GPU figure on GPU stages).
    pub basis: String,
}

impl RecordedEstimate {
    /// The recordable part of `stages`.
    pub fn of(catalog_version: &str, stages: &[StageEstimate]) -> RecordedEstimate {
        let tag = |b: &Basis| match b {
            Basis::History { .. } => "history",
            Basis::Model { .. } => "model",
            Basis::Unknown { .. } => "unknown",
        };
        RecordedEstimate {
            catalog_version: catalog_version.to_string(),
            reference_sku: REFERENCE_GPU_SKU.to_string(),
            stages: stages
                .iter()
                .map(|s| RecordedStage {
                    stage: s.stage.clone(),
                    vcpu_s: s.vcpu_s,
                    reference_gpu_s: s.reference_gpu_s,
                    basis: tag(s.gpu_basis.as_ref().unwrap_or(&s.vcpu_basis)).to_string(),
                })
                .collect(),
        }
    }
}

/// Every job in `ledger` with its stage attempts (the estimate's history).
///
/// # Errors
/// [`crate::Error::Ledger`].
pub async fn ledger_history(ledger: &crate::ledger::Ledger) -> crate::Result<Vec<HistoryJob>> {
    let mut out = Vec::new();
    for job in ledger.jobs().await? {
        out.push(HistoryJob {
            stages: ledger.stages(&job.id).await?,
            kind: job.kind,
        });
    }
    Ok(out)
}

// Gathering the shape from the local input (the only functions here that touch the disk).

/// The shape of a job of `kind` with `stages` (run order) on the local `input`: its bytes, and
/// for jobs with a `train` stage the training workload (`steps`, views downscaled to `max_side`)
/// read from the first image; unknown parts stay 0 / `None` (remote inputs).
pub fn job_shape(
    kind: &str,
    stages: Vec<String>,
    input: &Path,
    steps: usize,
    max_side: Option<u32>,
) -> JobShape {
    JobShape {
        kind: kind.to_string(),
        input_bytes: local_bytes(input),
        train: stages
            .iter()
            .any(|s| s == "train")
            .then(|| capture_train_shape(input, steps, max_side))
            .flatten(),
        stages,
    }
}

/// Bytes of a local file, or of every file under a local folder; 0 for anything else (a remote
/// URL, a missing path).
pub fn local_bytes(path: &Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.len() + gltf_external_bytes(path),
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| local_bytes(&e.path()))
            .sum(),
        _ => 0,
    }
}

/// Bytes of the files a `.gltf` at `path` refers to (its `buffers[].uri` and `images[].uri`
/// relative paths; `data:` URIs are inside the file already): ingest reads them too, so an input
/// size without them would make every per-byte rate wrong by orders of magnitude (Khronos
/// Avocado: a 2.4 kB .gltf with 8.3 MB of buffers and textures). 0 for other files, or when the
/// file is not readable JSON.
fn gltf_external_bytes(path: &Path) -> u64 {
    let is_gltf = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gltf"));
    let Some(doc) = is_gltf
        .then(|| std::fs::read(path).ok())
        .flatten()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    else {
        return 0;
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    ["buffers", "images"]
        .iter()
        .filter_map(|k| doc.get(*k)?.as_array())
        .flatten()
        .filter_map(|e| e.get("uri")?.as_str())
        .filter(|uri| !uri.starts_with("data:") && !uri.contains("://"))
        .map(|uri| {
            // glTF URIs are percent-encoded; the common case is a space.
            let uri = uri.replace("%20", " ");
            std::fs::metadata(dir.join(uri)).map_or(0, |m| m.len())
        })
        .sum()
}

/// The training workload of a capture at `input`: `steps` and the pixels of one view after
/// ingest's downscale to `max_side`, read from the header of the first image (`.jpg`, `.jpeg`,
/// `.png`) in `input/images` or `input` (a file input: its folder). `None` when no image is found
/// locally.
pub fn capture_train_shape(
    input: &Path,
    steps: usize,
    max_side: Option<u32>,
) -> Option<TrainShape> {
    let dir = if input.is_file() {
        input.parent()?
    } else {
        input
    };
    let first = [dir.join("images"), dir.to_path_buf()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .find_map(|rd| {
            let mut imgs: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                        ["jpg", "jpeg", "png"].contains(&e.to_ascii_lowercase().as_str())
                    })
                })
                .collect();
            imgs.sort();
            imgs.into_iter().next()
        })?;
    let (w, h) = image::image_dimensions(&first).ok()?;
    let long = w.max(h);
    let scale = match max_side {
        Some(m) if m > 0 && m < long => f64::from(m) / f64::from(long),
        _ => 1.0,
    };
    let px = (f64::from(w) * scale).round() * (f64::from(h) * scale).round();
    Some(TrainShape {
        steps: steps as u64,
        pixels_per_view: px as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A catalog with round numbers: the reference GPU at $3.60/GPU-h (spot $1.80), `FAST` four
    /// times as fast (4× FP32, 4× bandwidth → speed √16 = 4) at $7.20 without spot, CPUs at
    /// $0.036/vCPU-h (spot $0.018), 60 s billing minimum.
    fn catalog() -> PriceCatalog {
        let sku = |name: &str, od: f64, spot: &str, tf: f64, bw: f64| {
            format!(
                "[sku.{name}]\nprovider = \"t\"\nbasis = \"t\"\nanchor = \"t\"\nas_of = \"t\"\n\
                 confidence = \"v\"\ngpu_hour_usd_on_demand = {od}\n{spot}memory_gib = 40\n\
                 fp32_tflops = {tf}\nmemory_bandwidth_gbs = {bw}\n"
            )
        };
        let text = format!(
            "version = \"test-1\"\ncurrency = \"USD\"\nsources = []\nbilling_minimum_s = 60.0\n\
             [cpu]\nprovider = \"t\"\nbasis = \"t\"\nanchor = \"t\"\nas_of = \"t\"\n\
             confidence = \"v\"\nvcpu_hour_usd_on_demand = 0.036\nvcpu_hour_usd_spot = 0.018\n{}{}",
            sku("A100-40GB", 3.6, "gpu_hour_usd_spot = 1.8\n", 10.0, 1000.0),
            sku("FAST", 7.2, "", 40.0, 4000.0),
        );
        PriceCatalog::from_toml_str(&text, "test.toml").unwrap()
    }

    fn capture_shape(steps: u64, pixels_per_view: u64, input_bytes: u64) -> JobShape {
        JobShape {
            kind: "capture".into(),
            stages: ["ingest", "train", "tile", "publish"]
                .map(String::from)
                .to_vec(),
            input_bytes,
            train: Some(TrainShape {
                steps,
                pixels_per_view,
            }),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn row(stage: &str, state: &str, device: &str) -> StageRow {
        StageRow {
            stage: stage.into(),
            attempt: 1,
            state: state.into(),
            device: device.into(),
            ..StageRow::default()
        }
    }

    /// A train summary as the stage records it (the fox's, from the pipeline's fixture of
    /// recorded ledger rows), with `steps` steps.
    fn train_summary(steps: usize) -> serde_json::Value {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../pipeline/tests/fixtures/ledger_summaries_a4f2db7.json"
        ))
        .unwrap();
        let mut train = doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["stage"] == "train")
            .unwrap()["summary"]
            .clone();
        train["steps"] = steps.into();
        train
    }

    /// A past capture job: ingest at 200×100 px views, one GPU train attempt of 1000 steps.
    fn gpu_history_job(gpu_s: f64, state: &str) -> HistoryJob {
        let mut ingest = row("ingest", "succeeded", "cpu");
        ingest.summary = Some(serde_json::json!(
            {"frames": 10, "skipped": 0, "points": 0, "width": 200, "height": 100}
        ));
        let mut train = row("train", state, "cuda:0");
        train.gpu_s = gpu_s;
        train.device_name = Some("NVIDIA FAST 80GB".into());
        train.summary = Some(train_summary(1000));
        HistoryJob {
            kind: "capture".into(),
            stages: vec![ingest, train],
        }
    }

    #[test]
    fn model_only_reproduces_the_gsplat_anchor_on_the_reference_gpu() {
        // 30 000 steps at 1.37 Mpx: the anchor itself, 15.42 min = 925.2 GPU-s on the reference.
        let cat = catalog();
        let e = estimate(
            &capture_shape(30_000, 1_370_000, 1_000_000_000),
            &[],
            &cat,
            &["A100-40GB".into(), "FAST".into(), "cpu".into()],
        )
        .unwrap();
        let train = &e.stages[1];
        assert!(close(train.reference_gpu_s.unwrap(), 925.2));
        assert!(matches!(train.gpu_basis, Some(Basis::Model { .. })));
        // Three CPU stages × 1e-8 vCPU-s/B × 1e9 B = 30 vCPU-s.
        let cpu_s: f64 = e
            .stages
            .iter()
            .filter(|s| !s.gpu_stage)
            .map(|s| s.vcpu_s)
            .sum();
        assert!(close(cpu_s, 30.0));

        let a100 = &e.skus[0];
        assert!(close(a100.gpu_hours, 0.257)); // 925.2 / 3600
        // 0.257 h × $3.60 + 30/3600 h × $0.036 = 0.9252 + 0.0003.
        assert!(close(a100.usd_on_demand, 0.9255));
        // 0.257 × $1.80 + 30/3600 × $0.018 = 0.4626 + 0.00015.
        assert!(close(a100.usd_spot.unwrap(), 0.46275));

        let fast = &e.skus[1];
        assert!(close(fast.relative_speed.unwrap(), 4.0));
        assert!(close(fast.gpu_s, 231.3)); // 925.2 / 4
        // 231.3/3600 h × $7.20 + $0.0003 = 0.4626 + 0.0003; no spot rate for FAST.
        assert!(close(fast.usd_on_demand, 0.4629));
        assert_eq!(fast.usd_spot, None);

        // CPU only: training at 2/3.49002/41040 vCPU-s per pixel-step, plus the 30 vCPU-s.
        let cpu = &e.skus[2];
        let train_vcpu_s = 30_000.0 * 1_370_000.0 * 2.0 / 3.49002 / 41_040.0;
        assert!(close(cpu.vcpu_hours, (train_vcpu_s + 30.0) / 3600.0));
        assert!(close(cpu.usd_on_demand, cpu.vcpu_hours * 0.036));
        assert_eq!(cpu.gpu_hours, 0.0);
    }

    #[test]
    fn gpu_history_median_is_converted_to_the_reference_and_scaled_to_the_job() {
        let cat = catalog();
        // Two successful FAST runs: 50 and 60 GPU-s for 1000 steps × 20 000 px = 2e7 pixel-steps,
        // i.e. 1.0e-5 and 1.2e-5 reference-GPU-s per pixel-step (× speed 4); median 1.1e-5. The
        // failed attempt is ignored.
        let history = [
            gpu_history_job(50.0, "succeeded"),
            gpu_history_job(60.0, "succeeded"),
            gpu_history_job(1000.0, "failed"),
        ];
        // This job: 2000 steps × 20 000 px = 4e7 → 440 reference GPU-s; 110 s on FAST.
        let e = estimate(
            &capture_shape(2000, 20_000, 0),
            &history,
            &cat,
            &["FAST".into(), "A100-40GB".into()],
        )
        .unwrap();
        assert_eq!(e.stages[1].gpu_basis, Some(Basis::History { rows: 2 }));
        assert!(close(e.stages[1].reference_gpu_s.unwrap(), 440.0));
        assert!(close(e.skus[0].gpu_s, 110.0));
        // 110 s / 3600 × $7.20 = $0.22 (input 0 B: the CPU stages cost nothing).
        assert!(close(e.skus[0].usd_on_demand, 0.22));
        // 440 s / 3600 × $3.60 = $0.44.
        assert!(close(e.skus[1].usd_on_demand, 0.44));
    }

    #[test]
    fn cpu_stage_history_uses_the_median_rate_per_byte_of_the_same_job_kind() {
        let cat = catalog();
        let tile = |cpu_s: f64, state: &str| {
            let mut r = row("tile", state, "cpu");
            r.cpu_s = cpu_s;
            r.bytes_read = 1_000_000;
            r
        };
        let history = [
            HistoryJob {
                kind: "splats".into(),
                stages: vec![
                    tile(1.0, "succeeded"),
                    tile(3.0, "succeeded"),
                    tile(0.0, "cached"),
                ],
            },
            HistoryJob {
                kind: "splats".into(),
                stages: vec![tile(2.0, "succeeded")],
            },
            // Another kind: ignored.
            HistoryJob {
                kind: "mesh".into(),
                stages: vec![tile(100.0, "succeeded")],
            },
        ];
        let shape = JobShape {
            kind: "splats".into(),
            stages: vec!["tile".into()],
            input_bytes: 5_000_000,
            train: None,
        };
        let e = estimate(&shape, &history, &cat, &["FAST".into()]).unwrap();
        // Median of 1e-6, 3e-6, 2e-6 s/B = 2e-6 × 5e6 B = 10 vCPU-s.
        assert_eq!(e.stages[0].vcpu_basis, Basis::History { rows: 3 });
        assert!(close(e.stages[0].vcpu_s, 10.0));
        // No GPU stage: no GPU-hours and no billing minimum; 10/3600 h × $0.036 = $0.0001.
        assert_eq!(e.skus[0].gpu_hours, 0.0);
        assert!(close(e.skus[0].usd_on_demand, 0.0001));
        // FAST has no GPU spot rate but needs no GPU: spot is the CPU spot cost, $0.00005.
        assert!(close(e.skus[0].usd_spot.unwrap(), 0.00005));
    }

    #[test]
    fn a_plan_sku_fraction_above_one_names_the_option_and_the_whole_gpu_fix() {
        let cat = catalog();
        let shape = capture_shape(30_000, 1_370_000, 1_000_000_000);
        let e = estimate(&shape, &[], &cat, &["A100-40GB:2.0".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("kiln plan --sku A100-40GB:2.0")
                && e.contains("`--sku A100-40GB`")
                && !e.contains("--gpus"),
            "{e}"
        );
    }

    #[test]
    fn a_mig_row_is_priced_at_its_share_of_one_lease_at_every_tier() {
        // Built-in catalog, H100 (AWS: per second, 60 s minimum): on-demand $6.88, spot $2.34,
        // committed $4.916 per GPU-hour. A 1g.10gb slice is 1/7 of the GPU. 30 s on the slice is
        // billed as a 60 s lease (AWS minimum) × 1/7 on demand and spot, and exactly 30 s × 1/7
        // committed: spot 60/7/3600 × 2.34 = $0.0055714, on-demand × 6.88 = $0.0163810,
        // committed 30/7/3600 × 4.916 = $0.0058524.
        use crate::prices::Tier;
        let cat = PriceCatalog::default_catalog();
        let row = |sku: &str, fraction: Option<f64>| SkuEstimate {
            sku: sku.into(),
            relative_speed: None,
            gpu_s: 30.0,
            gpu_hours: 0.0,
            vcpu_hours: 0.0,
            usd_on_demand: 0.0,
            usd_spot: None,
            gpu_basis: None,
            slot_fraction: fraction,
        };
        let mig = row("H100:1g.10gb", Some(1.0 / 7.0));
        let spot = price_at(&mig, &cat, Tier::Spot).unwrap();
        assert!((spot.usd.unwrap() - 60.0 / 7.0 / 3600.0 * 2.34).abs() < 1e-12);
        assert!((spot.gpu_hours_billed - 60.0 / 7.0 / 3600.0).abs() < 1e-12);
        let od = price_at(&mig, &cat, Tier::OnDemand).unwrap();
        assert!((od.usd.unwrap() - 60.0 / 7.0 / 3600.0 * 6.88).abs() < 1e-12);
        assert!(spot.usd < od.usd, "spot must be cheaper than on-demand");
        // Tiny figures read as in the table, never as free.
        assert_eq!(
            (usd4(0.00004), usd4(0.0), usd4(0.0164)),
            ("<$0.0001".into(), "$0.0000".into(), "$0.0164".into())
        );
        let committed = price_at(&mig, &cat, Tier::Committed).unwrap();
        assert!((committed.usd.unwrap() - 30.0 / 7.0 / 3600.0 * 4.916).abs() < 1e-12);
        // A whole H100: GPU-h follows the tier's billing rule, as its USD does.
        let whole = row("H100", None);
        let c = price_at(&whole, &cat, Tier::Committed).unwrap();
        assert!((c.gpu_hours_billed - 30.0 / 3600.0).abs() < 1e-12);
        let o = price_at(&whole, &cat, Tier::OnDemand).unwrap();
        assert!((o.gpu_hours_billed - 60.0 / 3600.0).abs() < 1e-12);
        assert!((o.usd.unwrap() - 60.0 / 3600.0 * 6.88).abs() < 1e-12);
    }

    #[test]
    fn a_half_gpu_slot_takes_twice_as_long_at_half_the_rate_and_explain_names_sources() {
        // The anchor on FAST: 231.3 GPU-s whole (see above). On `FAST:0.5`: 462.6 s on the slot,
        // 462.6 × 0.5 / 3600 GPU-equivalent hours × $7.20 = $0.4626, + $0.0003 of CPU stages.
        let cat = catalog();
        let shape = capture_shape(30_000, 1_370_000, 1_000_000_000);
        let e = estimate(&shape, &[], &cat, &["FAST:0.5".into()]).unwrap();
        let k = &e.skus[0];
        assert_eq!((k.sku.as_str(), k.slot_fraction), ("FAST:0.5", Some(0.5)));
        assert!(close(k.gpu_s, 462.6));
        assert!(close(k.gpu_hours, 231.3 / 3600.0));
        assert!(close(k.usd_on_demand, 0.4629));
        let x = explain(&shape, &[], &cat, &e).unwrap();
        let train = x.iter().find(|x| x.figure.contains("GPU-s on")).unwrap();
        assert!(train.source.contains("15.42 min on an A100"), "{train:?}");
        assert!(
            x.iter()
                .any(|x| x.item == "FAST:0.5" && x.source.contains("slot = 0.5000"))
        );

        // With two FAST runs in the ledger, FAST learns from its own rows: median of 50 and 60
        // GPU-s per 2e7 pixel-steps = 2.75e-6 × 4.11e10 pixel-steps.
        let history = [
            gpu_history_job(50.0, "succeeded"),
            gpu_history_job(60.0, "succeeded"),
        ];
        let e = estimate(&shape, &history, &cat, &["FAST".into()]).unwrap();
        assert_eq!(e.skus[0].gpu_basis, Some(Basis::History { rows: 2 }));
        assert!(close(e.skus[0].gpu_s, 2.75e-6 * 30_000.0 * 1_370_000.0));
        let x = explain(&shape, &history, &cat, &e).unwrap();
        assert!(
            x.iter()
                .any(|x| x.item == "FAST"
                    && x.source.contains("2 successful train attempts on FAST")),
            "{x:?}"
        );
    }

    #[test]
    fn a_gltf_input_counts_the_buffers_and_images_it_refers_to() {
        let d = tempfile::tempdir().unwrap();
        let gltf = d.path().join("m.gltf");
        let json = r#"{"buffers":[{"uri":"m.bin"},{"uri":"data:application/octet-stream;base64,AAAA"}],"images":[{"uri":"t%20a.png"}]}"#;
        std::fs::write(&gltf, json).unwrap();
        std::fs::write(d.path().join("m.bin"), [0u8; 1000]).unwrap();
        std::fs::write(d.path().join("t a.png"), [0u8; 300]).unwrap();
        assert_eq!(local_bytes(&gltf), json.len() as u64 + 1300);
    }

    #[test]
    fn short_gpu_stage_is_billed_the_minimum() {
        let cat = catalog();
        // 1000 steps × 1000 px = 1e6 pixel-steps × 2.2511e-8 s = 0.0225 s: billed 60 s.
        let e = estimate(
            &capture_shape(1000, 1000, 0),
            &[],
            &cat,
            &["A100-40GB".into()],
        )
        .unwrap();
        assert!(e.skus[0].gpu_s < 1.0);
        assert!(close(e.skus[0].gpu_hours, 60.0 / 3600.0));
        assert!(close(e.skus[0].usd_on_demand, 0.06)); // 1/60 h × $3.60
    }

    #[test]
    fn unknown_sku_is_an_error_listing_the_catalog() {
        let e = estimate(&capture_shape(1, 1, 0), &[], &catalog(), &["B200".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`B200`") && e.contains("A100-40GB, FAST"), "{e}");
    }

    #[test]
    fn reconstruct_has_no_model() {
        let shape = JobShape {
            kind: "capture".into(),
            stages: vec!["reconstruct".into()],
            input_bytes: 1_000_000,
            train: None,
        };
        let e = estimate(&shape, &[], &catalog(), &[]).unwrap();
        assert!(matches!(e.stages[0].vcpu_basis, Basis::Unknown { .. }));
        assert_eq!(e.stages[0].vcpu_s, 0.0);
        // Empty list: every catalog SKU, then cpu.
        let names: Vec<&str> = e.skus.iter().map(|s| s.sku.as_str()).collect();
        assert_eq!(names, ["A100-40GB", "FAST", "cpu"]);
    }

    #[test]
    fn device_names_map_to_catalog_skus() {
        let cat = PriceCatalog::default_catalog();
        assert_eq!(sku_for_device_name(&cat, "NVIDIA H200"), Some("H200"));
        assert_eq!(
            sku_for_device_name(&cat, "NVIDIA A100-SXM4-80GB"),
            Some("A100-80GB")
        );
        assert_eq!(sku_for_device_name(&cat, "NVIDIA L40S"), Some("L40S"));
        assert_eq!(sku_for_device_name(&cat, "NVIDIA L4"), Some("L4"));
        assert_eq!(sku_for_device_name(&cat, "Tesla T4"), Some("T4"));
        assert_eq!(sku_for_device_name(&cat, "NVIDIA GeForce RTX 4090"), None);
    }

    #[test]
    fn relative_speeds_of_the_default_catalog() {
        // √(FP32 ratio × bandwidth ratio) against the A100 40GB (19.5 TFLOPS, 1555 GB/s).
        let cat = PriceCatalog::default_catalog();
        let h200 = relative_speed(&cat, "H200").unwrap();
        assert!(close(h200, ((67.0 / 19.5) * (4800.0 / 1555.0_f64)).sqrt()));
        assert!((h200 - 3.257).abs() < 1e-3, "{h200}");
        let t4 = relative_speed(&cat, "T4").unwrap();
        assert!((t4 - 0.2924).abs() < 1e-3, "{t4}");
        assert_eq!(relative_speed(&cat, "A100-40GB").unwrap(), 1.0);
    }
}
