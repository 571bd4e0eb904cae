//! The stage contract: what every stage of a job declares and does, so that the engine
//! ([`crate::run`]) runs any stage without knowing which one it is.
//!
//! A stage is one type in its own module (`stages/<stage>/stage.rs`) implementing [`Stage`]:
//! - what it reads: [`Stage::inputs`], earlier stages whose keys go into its key and whose
//!   folders it may open through [`StageContext::stage_dir`]; a stage with no inputs is a first
//!   stage, and the engine fetches the job's input for it ([`StageContext::fetched_input`]);
//! - its parameters: [`Stage::key_params`], the canonical JSON hashed into its content key (the
//!   parameters, the algorithm's version, whatever else its output depends on);
//! - what it holds while it runs: the rasterizer device ([`Stage::uses_rasterizer`]) and a
//!   checkpoint file that travels through the shared cache ([`Stage::checkpoint`]);
//! - `run`: from its inputs to a fresh output folder, returning a typed, serde summary
//!   ([`Stage::Summary`]) that the ledger, the job page, `kiln report` and `kiln regress` read
//!   back as that type (`stages::summary`).
//!
//! Adding a stage is a new module implementing this trait and a line in the plan
//! ([`crate::dag::Dag::for_job`]); the engine does not change.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::plan::JobPlan;
use crate::{Error, Result};

/// The name of one stage: its work folder, its ledger and queue rows, its table in job files.
///
/// The set is open: a stage is anything implementing [`crate::stage::Stage`], named by a
/// `StageKind` of its own (`StageKind::new("toy")` in a test). The stages Kiln plans are the
/// constants below; [`StageKind::builtin`] finds one by name (the queue stores names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageKind(&'static str);

impl StageKind {
    /// Camera poses by structure-from-motion (COLMAP), for captures without poses.
    pub const RECONSTRUCT: StageKind = StageKind("reconstruct");
    /// The job's input fetched, checked and normalised (capture frames, one mesh GLB, one PLY).
    pub const INGEST: StageKind = StageKind("ingest");
    /// 3D Gaussian splats trained on a capture.
    pub const TRAIN: StageKind = StageKind("train");
    /// A mesh's LOD chain (meshoptimizer).
    pub const DECIMATE: StageKind = StageKind("decimate");
    /// The 3D Tiles 1.1 tileset.
    pub const TILE: StageKind = StageKind("tile");
    /// Fidelity of the delivered tileset: renders of its cuts scored against the photos and the
    /// full splats.
    pub const EVAL: StageKind = StageKind("eval");
    /// The outputs copied to the job's output URL, `manifest.json` last.
    pub const PUBLISH: StageKind = StageKind("publish");

    /// The stages Kiln's plans use.
    pub const BUILTIN: [StageKind; 7] = [
        StageKind::RECONSTRUCT,
        StageKind::INGEST,
        StageKind::TRAIN,
        StageKind::DECIMATE,
        StageKind::TILE,
        StageKind::EVAL,
        StageKind::PUBLISH,
    ];

    /// A stage named `name` (lower case, no `/`: it names a folder).
    #[must_use]
    pub const fn new(name: &'static str) -> StageKind {
        StageKind(name)
    }

    /// The built-in stage named `name`, if there is one.
    #[must_use]
    pub fn builtin(name: &str) -> Option<StageKind> {
        StageKind::BUILTIN.into_iter().find(|k| k.0 == name)
    }

    /// The stage's name as it appears in job files, work directories and the ledger.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for StageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for StageKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for StageKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        StageKind::builtin(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown stage `{name}` (expected one of: {})",
                StageKind::BUILTIN.map(StageKind::name).join(", ")
            ))
        })
    }
}

/// An earlier stage a stage reads. The engine puts that stage's key into this stage's key, in
/// declaration order, and lets `run` open its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A stage every plan using this stage has.
    Stage(StageKind),
    /// A stage read when the plan has it (ingest reads `reconstruct`'s model when poses had to
    /// be reconstructed); left out of the key when the plan has none.
    IfPlanned(StageKind),
}

impl Input {
    /// The stage this input names.
    #[must_use]
    pub fn kind(self) -> StageKind {
        match self {
            Input::Stage(k) | Input::IfPlanned(k) => k,
        }
    }
}

/// Where a stage's output lives, and so how a finished one is found again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// In `WORK/<name>/`, with a marker holding its key and summary: a rerun with the same key
    /// reuses it, and it is stored in (and restored from) the shared stage cache.
    WorkDir,
    /// Outside the work folder (publish writes the job's output): the stage decides itself
    /// whether its work is already done ([`Output::reused`]); its scratch folder is removed.
    Elsewhere,
}

/// What a stage's `run` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Output<S> {
    /// The stage's figures (the ledger's `summary`).
    pub summary: S,
    /// The stage found its work already done and did nothing (recorded as a cache hit).
    pub reused: bool,
    /// Bytes written outside the work folder ([`Keep::Elsewhere`] stages); the engine measures
    /// the work folder itself.
    pub bytes_written: u64,
}

impl<S> Output<S> {
    /// A stage that did its work and wrote only into its output folder.
    pub fn new(summary: S) -> Self {
        Output {
            summary,
            reused: false,
            bytes_written: 0,
        }
    }
}

/// Everything a running stage may look at: the job's plan, its own key, the device it holds,
/// the fetched job input (first stages) and the folders of the stages finished before it.
#[derive(Debug, Clone)]
pub struct StageContext {
    /// The job: parameters of every stage, work folder, output, device request.
    pub plan: JobPlan,
    /// This stage's content key (hex BLAKE3).
    pub key: String,
    /// The rasterizer this stage holds ([`kiln_kernels::Renderer::Cpu`] unless
    /// [`Stage::uses_rasterizer`]).
    pub renderer: kiln_kernels::Renderer,
    /// The job's input as fetched into the work folder (a file or a folder): first stages only.
    pub fetched_input: Option<PathBuf>,
    /// This stage's inputs that the plan has, in declaration order.
    pub inputs: Vec<StageKind>,
    /// The stages finished before this one in this job, whose folders are readable.
    pub finished: Vec<StageKind>,
}

impl StageContext {
    /// Whether the plan gave this stage the input `kind` (an [`Input::IfPlanned`] that is there).
    #[must_use]
    pub fn has_input(&self, kind: StageKind) -> bool {
        self.inputs.contains(&kind)
    }

    /// The output folder of `kind`, a stage finished earlier in this job (`WORK/<name>/`).
    ///
    /// # Errors
    /// [`Error::Param`] when `kind` has not finished before this stage: the plan does not order
    /// this stage after it (a Kiln bug).
    pub fn stage_dir(&self, kind: StageKind) -> Result<PathBuf> {
        if !self.finished.contains(&kind) {
            return Err(Error::Param {
                stage: "dag",
                field: kind.name().into(),
                expected: "a stage finished before the one reading it".into(),
                found: format!(
                    "not finished (finished: {})",
                    self.finished
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(stage_dir(&self.plan, kind))
    }

    /// The job's input as fetched, for a first stage.
    ///
    /// # Errors
    /// [`Error::Param`] for a stage with inputs (the engine fetches only for first stages).
    pub fn fetched_input(&self) -> Result<&Path> {
        self.fetched_input.as_deref().ok_or_else(|| Error::Param {
            stage: "dag",
            field: "input".into(),
            expected: "a first stage (no inputs), for which the job input is fetched".into(),
            found: format!("a stage reading {:?}", self.inputs),
        })
    }
}

/// The output folder of stage `kind` in `plan`'s work folder: `WORK/<name>/`.
#[must_use]
pub fn stage_dir(plan: &JobPlan, kind: StageKind) -> PathBuf {
    plan.work_dir.join(kind.name())
}

/// One stage of a job. See the module documentation for the contract.
pub trait Stage: Send + Sync + 'static {
    /// The stage's figures, recorded as its ledger summary (JSON, keys sorted) and read back
    /// through `stages::summary`.
    type Summary: Serialize + DeserializeOwned;

    /// The stage's name: work folder, ledger and queue rows, job-file table.
    fn kind(&self) -> StageKind;

    /// The earlier stages it reads, in key order. Empty for a first stage (it reads the job's
    /// input).
    fn inputs(&self) -> Vec<Input>;

    /// What its output depends on besides its inputs: its parameters (and the algorithm's
    /// version) as JSON, hashed canonically into the key.
    fn key_params(&self, plan: &JobPlan) -> serde_json::Value;

    /// Where its output lives. Default: the work folder.
    fn keep(&self) -> Keep {
        Keep::WorkDir
    }

    /// First stages: whether to fetch the files the input names beside it (a `.gltf`'s buffers
    /// and images, an OBJ's MTL and textures). Default: no.
    fn fetch_siblings(&self) -> bool {
        false
    }

    /// Whether it renders with the rasterizer on the job's device (and so holds a GPU when one
    /// is used). Default: no, it runs on the CPU.
    fn uses_rasterizer(&self, _plan: &JobPlan) -> bool {
        false
    }

    /// Whether a queue runs it on a GPU slot (a worker's GPU held for the whole attempt; its
    /// device is then `cuda:N`). Default: no, any slot.
    fn needs_gpu_slot(&self) -> bool {
        false
    }

    /// A checkpoint file it resumes from, which travels through the shared stage cache while it
    /// runs and is removed once it finishes. Default: none.
    fn checkpoint(&self, _plan: &JobPlan) -> Option<PathBuf> {
        None
    }

    /// Bytes it reads from its inputs (metering), before it runs.
    fn bytes_read(&self, _cx: &StageContext) -> u64 {
        0
    }

    /// Run from the inputs `cx` names into `out`, a fresh folder the engine commits (renames to
    /// `WORK/<name>/`) only when this returns `Ok`.
    ///
    /// # Errors
    /// The stage's own; they name the user's file, field and fix.
    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<Self::Summary>>;
}

/// A [`Stage`] with its summary as JSON: what the engine and the plan hold (`Arc<dyn AnyStage>`).
/// Every `Stage` is one.
pub trait AnyStage: Send + Sync {
    /// [`Stage::kind`].
    fn kind(&self) -> StageKind;
    /// [`Stage::inputs`].
    fn inputs(&self) -> Vec<Input>;
    /// [`Stage::key_params`].
    fn key_params(&self, plan: &JobPlan) -> serde_json::Value;
    /// [`Stage::keep`].
    fn keep(&self) -> Keep;
    /// [`Stage::fetch_siblings`].
    fn fetch_siblings(&self) -> bool;
    /// [`Stage::uses_rasterizer`].
    fn uses_rasterizer(&self, plan: &JobPlan) -> bool;
    /// [`Stage::needs_gpu_slot`].
    fn needs_gpu_slot(&self) -> bool;
    /// [`Stage::checkpoint`].
    fn checkpoint(&self, plan: &JobPlan) -> Option<PathBuf>;
    /// [`Stage::bytes_read`].
    fn bytes_read(&self, cx: &StageContext) -> u64;
    /// [`Stage::run`], its summary serialised (a JSON object with sorted keys).
    ///
    /// # Errors
    /// As [`Stage::run`].
    fn run_json(&self, cx: &StageContext, out: &Path) -> Result<Output<serde_json::Value>>;
}

impl<T: Stage> AnyStage for T {
    fn kind(&self) -> StageKind {
        Stage::kind(self)
    }
    fn inputs(&self) -> Vec<Input> {
        Stage::inputs(self)
    }
    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        Stage::key_params(self, plan)
    }
    fn keep(&self) -> Keep {
        Stage::keep(self)
    }
    fn fetch_siblings(&self) -> bool {
        Stage::fetch_siblings(self)
    }
    fn uses_rasterizer(&self, plan: &JobPlan) -> bool {
        Stage::uses_rasterizer(self, plan)
    }
    fn needs_gpu_slot(&self) -> bool {
        Stage::needs_gpu_slot(self)
    }
    fn checkpoint(&self, plan: &JobPlan) -> Option<PathBuf> {
        Stage::checkpoint(self, plan)
    }
    fn bytes_read(&self, cx: &StageContext) -> u64 {
        Stage::bytes_read(self, cx)
    }
    fn run_json(&self, cx: &StageContext, out: &Path) -> Result<Output<serde_json::Value>> {
        let o = Stage::run(self, cx, out)?;
        let summary = serde_json::to_value(&o.summary).map_err(|e| {
            Error::io(
                out,
                std::io::Error::other(format!(
                    "the {} stage's summary does not serialise: {e}",
                    Stage::kind(self)
                )),
            )
        })?;
        Ok(Output {
            summary,
            reused: o.reused,
            bytes_written: o.bytes_written,
        })
    }
}

impl std::fmt::Debug for dyn AnyStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stage({})", self.kind())
    }
}

/// The size of a file, bytes (0 when it cannot be read): metering helper for
/// [`Stage::bytes_read`].
#[must_use]
pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}
