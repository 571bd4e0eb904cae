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

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What a job turns into 3D Tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Photos + camera poses → trained splats → splat tileset.
    Capture,
    /// glTF/GLB mesh → LOD chain → mesh tileset.
    Mesh,
    /// Splats trained elsewhere (3DGS PLY, SPZ, splat GLB) → splat tileset.
    Splats,
}

impl JobKind {
    /// The kind's name as written in job files and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Capture => "capture",
            JobKind::Mesh => "mesh",
            JobKind::Splats => "splats",
        }
    }
}

/// The kind of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    /// Camera poses by structure-from-motion (COLMAP), for captures without poses.
    Reconstruct,
    Ingest,
    Train,
    Decimate,
    Tile,
    /// Fidelity of the delivered tileset: renders of its cuts scored against the photos and the
    /// full splats.
    Eval,
    Publish,
}

impl StageKind {
    /// The stage's name as it appears in job files, work directories and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Reconstruct => "reconstruct",
            StageKind::Ingest => "ingest",
            StageKind::Train => "train",
            StageKind::Decimate => "decimate",
            StageKind::Tile => "tile",
            StageKind::Eval => "eval",
            StageKind::Publish => "publish",
        }
    }
}

impl std::fmt::Display for StageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One node of the DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageNode {
    pub kind: StageKind,
    /// Stages that must finish first.
    pub deps: Vec<StageKind>,
}

/// A job's stages. Build with [`Dag::for_job`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    pub job_kind: JobKind,
    pub nodes: Vec<StageNode>,
}

impl Dag {
    /// The fixed DAG of a job kind.
    pub fn for_job(job_kind: JobKind) -> Dag {
        use StageKind::*;
        let middle = match job_kind {
            JobKind::Capture => Some(Train),
            JobKind::Mesh => Some(Decimate),
            JobKind::Splats => None,
        };
        let mut nodes = vec![StageNode {
            kind: Ingest,
            deps: vec![],
        }];
        let before_tile = match middle {
            Some(m) => {
                nodes.push(StageNode {
                    kind: m,
                    deps: vec![Ingest],
                });
                m
            }
            None => Ingest,
        };
        nodes.push(StageNode {
            kind: Tile,
            deps: vec![before_tile],
        });
        let mut publish_deps = vec![Ingest];
        publish_deps.extend(middle);
        publish_deps.push(Tile);
        if job_kind != JobKind::Mesh {
            // The photos (ingest), the full splats (train, for captures) and the tileset.
            let mut deps = vec![Ingest];
            deps.extend(middle);
            deps.push(Tile);
            nodes.push(StageNode { kind: Eval, deps });
            publish_deps.push(Eval);
        }
        nodes.push(StageNode {
            kind: Publish,
            deps: publish_deps,
        });
        Dag { job_kind, nodes }
    }

    /// This DAG with a `reconstruct` stage first: it fetches the input, `ingest` reads its
    /// output instead of the input, and `publish` also publishes the reconstruction.
    #[must_use]
    pub fn with_reconstruct(mut self) -> Dag {
        use StageKind::*;
        if self.nodes.iter().any(|n| n.kind == Reconstruct) {
            return self;
        }
        for node in &mut self.nodes {
            if node.kind == Ingest || node.kind == Publish {
                node.deps.insert(0, Reconstruct);
            }
        }
        self.nodes.insert(
            0,
            StageNode {
                kind: Reconstruct,
                deps: vec![],
            },
        );
        self
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
        assert_eq!(deps(StageKind::Ingest), &[StageKind::Reconstruct]);
        assert!(deps(StageKind::Publish).contains(&StageKind::Reconstruct));
        assert!(deps(StageKind::Reconstruct).is_empty());
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
                StageNode {
                    kind: StageKind::Ingest,
                    deps: vec![StageKind::Tile],
                },
                StageNode {
                    kind: StageKind::Tile,
                    deps: vec![StageKind::Ingest],
                },
            ],
        };
        assert!(dag.topo_order().is_err());
    }

    #[test]
    fn stage_key_changes_with_params_and_inputs_only() {
        let p1 = serde_json::json!({"steps": 10, "seed": 1});
        let p1b = serde_json::json!({"seed": 1, "steps": 10});
        let p2 = serde_json::json!({"steps": 11, "seed": 1});
        let a = stage_key(StageKind::Train, &p1, &["x".into()]);
        assert_eq!(a, stage_key(StageKind::Train, &p1b, &["x".into()]));
        assert_ne!(a, stage_key(StageKind::Train, &p2, &["x".into()]));
        assert_ne!(a, stage_key(StageKind::Train, &p1, &["y".into()]));
        assert_ne!(a, stage_key(StageKind::Tile, &p1, &["x".into()]));
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
