//! The job DAG: which stages a job has, in which order, and each stage's content key.
//!
//! A capture job is `ingest → train → tile → publish`, preceded by `reconstruct` (COLMAP
//! structure-from-motion) when the capture has images but no camera poses; a mesh job is
//! `ingest → decimate → tile → publish`; a splats job (retiling splats trained elsewhere) is
//! `ingest → tile → publish`. Splat jobs (capture and splats) have an `eval` stage between `tile`
//! and `publish`: it renders what a client of the tileset sees and scores it (see
//! [`crate::stages::eval`]). A stage's key is BLAKE3 over (stage kind, its parameters as
//! canonical JSON, the keys of the stages it depends on — or the input's content hash for `ingest` —
//! and the Kiln version), so identical work has identical keys (Nextflow-style caching).

use std::sync::Arc;

pub use crate::plan::JobKind;
pub use crate::stage::StageKind;

use crate::plan::JobPlan;
use crate::stage::{AnyStage, Input};
use crate::stages::reconstruct;
use crate::{Error, Result};

/// One node of the DAG: a stage and the earlier stages it reads.
#[derive(Clone)]
pub struct StageNode {
    pub kind: StageKind,
    /// Stages that must finish first: the stage's declared inputs that the plan has, in
    /// declaration order (their keys go into this stage's key in this order).
    pub deps: Vec<StageKind>,
    /// What runs.
    pub stage: Arc<dyn AnyStage>,
}

impl StageNode {
    /// A node for `stage` reading `deps`.
    pub fn new(stage: Arc<dyn AnyStage>, deps: Vec<StageKind>) -> StageNode {
        StageNode {
            kind: stage.kind(),
            deps,
            stage,
        }
    }
}

impl std::fmt::Debug for StageNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageNode")
            .field("kind", &self.kind)
            .field("deps", &self.deps)
            .finish()
    }
}

impl PartialEq for StageNode {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.deps == other.deps
    }
}

impl Eq for StageNode {}

/// A job's stages. Build with [`Dag::for_job`] (the plan of each job kind) or
/// [`Dag::from_stages`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    pub job_kind: JobKind,
    pub nodes: Vec<StageNode>,
}

impl Dag {
    /// The plan of a job kind:
    /// - capture: `ingest → train → tile → eval → publish` (and `reconstruct` first, see
    ///   [`Dag::with_reconstruct`]);
    /// - mesh: `ingest → decimate → tile → publish`;
    /// - splats: `ingest → tile → eval → publish`.
    pub fn for_job(job_kind: JobKind) -> Dag {
        use crate::stages::{decimate, eval, ingest, publish, tile, train};
        let stages: Vec<Arc<dyn AnyStage>> = match job_kind {
            JobKind::Capture => vec![
                Arc::new(ingest::IngestCapture),
                Arc::new(train::Train),
                Arc::new(tile::splat::TileSplats::TRAINED),
                Arc::new(eval::Eval::TRAINED),
                Arc::new(publish::Publish),
            ],
            JobKind::Mesh => vec![
                Arc::new(ingest::IngestMesh),
                Arc::new(decimate::Decimate),
                Arc::new(tile::mesh::TileMesh),
                Arc::new(publish::Publish),
            ],
            JobKind::Splats => vec![
                Arc::new(ingest::IngestSplats),
                Arc::new(tile::splat::TileSplats::INGESTED),
                Arc::new(eval::Eval::INGESTED),
                Arc::new(publish::Publish),
            ],
        };
        Dag::from_stages(job_kind, stages)
    }

    /// A DAG of `stages` in this order, each reading the inputs it declares
    /// ([`crate::stage::Stage::inputs`]) among the stages before it: an
    /// [`Input::IfPlanned`] that is not there is left out; a required one that is not there is
    /// kept, so that [`Dag::topo_order`] reports it.
    pub fn from_stages(job_kind: JobKind, stages: Vec<Arc<dyn AnyStage>>) -> Dag {
        let mut nodes: Vec<StageNode> = Vec::with_capacity(stages.len());
        for stage in stages {
            let deps = stage
                .inputs()
                .into_iter()
                .filter(|input| match input {
                    Input::Stage(_) => true,
                    Input::IfPlanned(k) => nodes.iter().any(|n| n.kind == *k),
                })
                .map(Input::kind)
                .collect();
            nodes.push(StageNode::new(stage, deps));
        }
        Dag { job_kind, nodes }
    }

    /// This DAG with a `reconstruct` stage first: it fetches the input, `ingest` reads its
    /// output instead of the input, and `publish` also publishes the reconstruction.
    #[must_use]
    pub fn with_reconstruct(self) -> Dag {
        if self.nodes.iter().any(|n| n.kind == StageKind::RECONSTRUCT) {
            return self;
        }
        let mut stages: Vec<Arc<dyn AnyStage>> =
            vec![Arc::new(crate::stages::reconstruct::Reconstruct)];
        stages.extend(self.nodes.into_iter().map(|n| n.stage));
        Dag::from_stages(self.job_kind, stages)
    }

    /// The node of stage `kind`.
    #[must_use]
    pub fn node(&self, kind: StageKind) -> Option<&StageNode> {
        self.nodes.iter().find(|n| n.kind == kind)
    }

    /// The stages in an order where every stage follows its dependencies (Kahn's algorithm; ties
    /// keep declaration order).
    ///
    /// # Errors
    /// [`Error::Param`] when a dependency is missing or the graph has a cycle.
    pub fn topo_order(&self) -> Result<Vec<&StageNode>> {
        let mut done: Vec<StageKind> = Vec::new();
        let mut order = Vec::new();
        while order.len() < self.nodes.len() {
            let next = self
                .nodes
                .iter()
                .find(|n| !done.contains(&n.kind) && n.deps.iter().all(|d| done.contains(d)));
            match next {
                Some(n) => {
                    done.push(n.kind);
                    order.push(n);
                }
                None => {
                    return Err(Error::Param {
                        stage: "dag",
                        field: "deps".into(),
                        expected: "an acyclic graph whose dependencies all exist".into(),
                        found: format!("{:?}", self.nodes),
                    });
                }
            }
        }
        Ok(order)
    }
}

/// The DAG of `plan`'s job, and why it has a `reconstruct` stage when it has one.
///
/// Capture jobs look at the input's file names (without downloading anything): images or a video
/// without camera poses add `reconstruct` (see [`reconstruct::classify`] and
/// [`reconstruct::decide`]).
///
/// # Errors
/// [`crate::Error::Input`] when a capture input holds neither poses, photos nor one video (or nothing),
/// or is a local path that does not exist;
/// [`crate::Error::Param`] on `reconstruct.mode` when it contradicts the input; [`crate::Error::Storage`] when
/// the input cannot be listed.
pub async fn job_dag(plan: &JobPlan) -> Result<(Dag, Option<String>)> {
    let dag = Dag::for_job(plan.kind);
    if plan.kind != JobKind::Capture {
        return Ok((dag, None));
    }
    // What the run stages: the whole capture around a file of it (issue 44, rule 1).
    let names = crate::storage::list_names(&crate::run::staged_input(plan)?.stage).await?;
    let shape = reconstruct::classify(&names);
    if shape == reconstruct::InputShape::Unknown {
        return Err(reconstruct::unusable_input_error(&plan.input, &names));
    }
    match reconstruct::decide(plan.reconstruct.mode, shape)? {
        Some(reason) => Ok((dag.with_reconstruct(), Some(reason))),
        None => Ok((dag, None)),
    }
}

/// What a stage's content key is made of, kept beside the key so `kiln why` can say what changed
/// between two runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyRecipe {
    /// The stage kind's name.
    pub stage: String,
    /// The stage's parameters as hashed (canonical JSON).
    pub params: serde_json::Value,
    /// The keys it depends on: `(dependency stage name, or "input" for the fetched input, key)`.
    pub inputs: Vec<(String, String)>,
    /// The Kiln version that computed it.
    pub version: String,
}

impl KeyRecipe {
    /// The recipe of a stage of `kind` with `params` over `inputs`, under this Kiln version.
    pub fn new(kind: StageKind, params: &serde_json::Value, inputs: Vec<(String, String)>) -> Self {
        KeyRecipe {
            stage: kind.name().to_string(),
            params: params.clone(),
            inputs,
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// The content key of a stage: hex BLAKE3 of kind, canonical parameter JSON, input keys and the
/// Kiln version.
pub fn stage_key(kind: StageKind, params: &serde_json::Value, input_keys: &[String]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"kiln-stage-v1\0");
    h.update(kind.name().as_bytes());
    h.update(b"\0");
    // serde_json's Value map is ordered (BTreeMap without `preserve_order`), so this is canonical.
    h.update(params.to_string().as_bytes());
    for k in input_keys {
        h.update(b"\0");
        h.update(k.as_bytes());
    }
    h.update(b"\0");
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.finalize().to_hex().to_string()
}

/// BLAKE3 over every file under `dir` (sorted relative paths and contents): the content key of a
/// fetched input.
///
/// # Errors
/// [`Error::Io`] naming the unreadable file.
pub fn hash_tree(dir: &std::path::Path) -> Result<String> {
    let files = if dir.is_file() {
        vec![std::path::PathBuf::new()]
    } else {
        crate::file_tree::files_under(dir)?
    };
    let mut h = blake3::Hasher::new();
    for rel in files {
        let full = if rel.as_os_str().is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(&rel)
        };
        h.update(rel.to_string_lossy().as_bytes());
        h.update(b"\0");
        let mut f = std::fs::File::open(&full).map_err(|e| Error::io(&full, e))?;
        std::io::copy(&mut f, &mut h).map_err(|e| Error::io(&full, e))?;
        h.update(b"\0");
    }
    Ok(h.finalize().to_hex().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_dag_orders_ingest_train_tile_publish() {
        let dag = Dag::for_job(JobKind::Capture);
        let order: Vec<_> = dag
            .topo_order()
            .unwrap()
            .iter()
            .map(|n| n.kind.name())
            .collect();
        assert_eq!(order, ["ingest", "train", "tile", "eval", "publish"]);
    }

    #[test]
    fn capture_dag_with_reconstruct_runs_it_first_and_publishes_it() {
        let dag = Dag::for_job(JobKind::Capture).with_reconstruct();
        let order: Vec<_> = dag
            .topo_order()
            .unwrap()
            .iter()
            .map(|n| n.kind.name())
            .collect();
        assert_eq!(
            order,
            ["reconstruct", "ingest", "train", "tile", "eval", "publish"]
        );
        let deps = |k: StageKind| &dag.nodes.iter().find(|n| n.kind == k).unwrap().deps;
        assert_eq!(deps(StageKind::INGEST), &[StageKind::RECONSTRUCT]);
        assert!(deps(StageKind::PUBLISH).contains(&StageKind::RECONSTRUCT));
        assert!(deps(StageKind::RECONSTRUCT).is_empty());
        assert_eq!(dag.clone().with_reconstruct(), dag, "idempotent");
    }

    #[test]
    fn mesh_dag_orders_ingest_decimate_tile_publish() {
        let dag = Dag::for_job(JobKind::Mesh);
        let order: Vec<_> = dag
            .topo_order()
            .unwrap()
            .iter()
            .map(|n| n.kind.name())
            .collect();
        assert_eq!(order, ["ingest", "decimate", "tile", "publish"]);
    }

    #[test]
    fn splats_dag_orders_ingest_tile_publish() {
        let dag = Dag::for_job(JobKind::Splats);
        let order: Vec<_> = dag
            .topo_order()
            .unwrap()
            .iter()
            .map(|n| n.kind.name())
            .collect();
        assert_eq!(order, ["ingest", "tile", "eval", "publish"]);
    }

    #[test]
    fn cyclic_dag_is_rejected() {
        let dag = Dag {
            job_kind: JobKind::Mesh,
            nodes: vec![
                StageNode::new(
                    Arc::new(crate::stages::ingest::IngestMesh),
                    vec![StageKind::TILE],
                ),
                StageNode::new(
                    Arc::new(crate::stages::tile::mesh::TileMesh),
                    vec![StageKind::INGEST],
                ),
            ],
        };
        assert!(dag.topo_order().is_err());
    }

    #[test]
    fn stage_key_changes_with_params_and_inputs_only() {
        let p1 = serde_json::json!({"steps": 10, "seed": 1});
        let p1b = serde_json::json!({"seed": 1, "steps": 10});
        let p2 = serde_json::json!({"steps": 11, "seed": 1});
        let a = stage_key(StageKind::TRAIN, &p1, &["x".into()]);
        assert_eq!(a, stage_key(StageKind::TRAIN, &p1b, &["x".into()]));
        assert_ne!(a, stage_key(StageKind::TRAIN, &p2, &["x".into()]));
        assert_ne!(a, stage_key(StageKind::TRAIN, &p1, &["y".into()]));
        assert_ne!(a, stage_key(StageKind::TILE, &p1, &["x".into()]));
    }

    #[test]
    fn hash_tree_depends_on_names_and_bytes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), b"1").unwrap();
        let h1 = hash_tree(d.path()).unwrap();
        std::fs::write(d.path().join("a"), b"2").unwrap();
        let h2 = hash_tree(d.path()).unwrap();
        assert_ne!(h1, h2);
        std::fs::rename(d.path().join("a"), d.path().join("b")).unwrap();
        assert_ne!(h2, hash_tree(d.path()).unwrap());
    }
}
