//! The stage contract from outside the crate: a stage written here, unknown to Kiln's plans,
//! runs through the engine (`run::run_stage`) unchanged — keyed, cached, metered and committed
//! like the built-in stages — and reads only what it declares.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kiln_pipeline::dag::{Dag, JobKind, StageKind};
use kiln_pipeline::plan::JobPlan;
use kiln_pipeline::run::{StageOutcome, run_stage};
use kiln_pipeline::stage::{AnyStage, Input, Output, Stage, StageContext};
use serde::{Deserialize, Serialize};

/// First toy stage: counts the bytes of the job's input and writes them reversed.
struct Reverse;

/// Second toy stage: reads `reverse`'s output and writes it back the right way round.
struct Restore {
    /// Part of the key, so a change reruns it.
    suffix: &'static str,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct ReverseSummary {
    bytes: usize,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct RestoreSummary {
    text: String,
}

const REVERSE: StageKind = StageKind::new("reverse");
const RESTORE: StageKind = StageKind::new("restore");

impl Stage for Reverse {
    type Summary = ReverseSummary;
    fn kind(&self) -> StageKind {
        REVERSE
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn key_params(&self, _plan: &JobPlan) -> serde_json::Value {
        serde_json::json!({ "version": 1 })
    }
    fn run(&self, cx: &StageContext, out: &Path) -> kiln_pipeline::Result<Output<ReverseSummary>> {
        let mut bytes = std::fs::read(cx.fetched_input()?).unwrap();
        bytes.reverse();
        std::fs::write(out.join("reversed.txt"), &bytes).unwrap();
        Ok(Output::new(ReverseSummary { bytes: bytes.len() }))
    }
}

impl Stage for Restore {
    type Summary = RestoreSummary;
    fn kind(&self) -> StageKind {
        RESTORE
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::Stage(REVERSE), Input::IfPlanned(StageKind::TRAIN)]
    }
    fn key_params(&self, _plan: &JobPlan) -> serde_json::Value {
        serde_json::json!({ "suffix": self.suffix })
    }
    fn bytes_read(&self, cx: &StageContext) -> u64 {
        kiln_pipeline::meter::dir_bytes(&cx.stage_dir(REVERSE).unwrap())
    }
    fn run(&self, cx: &StageContext, out: &Path) -> kiln_pipeline::Result<Output<RestoreSummary>> {
        // A stage that is not finished is refused, naming it.
        let e = cx.stage_dir(StageKind::TILE).unwrap_err();
        assert!(e.to_string().contains("tile"), "{e}");
        assert!(
            !cx.has_input(StageKind::TRAIN),
            "not planned, so not an input"
        );
        let dir = cx.stage_dir(REVERSE)?;
        let mut bytes = std::fs::read(dir.join("reversed.txt")).unwrap();
        bytes.reverse();
        let text = format!("{}{}", String::from_utf8(bytes).unwrap(), self.suffix);
        std::fs::write(out.join("restored.txt"), &text).unwrap();
        Ok(Output::new(RestoreSummary { text }))
    }
}

fn plan(root: &Path, input: &Path) -> JobPlan {
    JobPlan {
        job_id: "toy-1".into(),
        name: "toy".into(),
        kind: JobKind::Splats,
        input: input.display().to_string(),
        output: root.join("out").display().to_string(),
        work_dir: root.join("work"),
        reconstruct: Default::default(),
        ingest: Default::default(),
        train: Default::default(),
        decimate: Default::default(),
        tile: Default::default(),
        mesh_tile: Default::default(),
        eval: Default::default(),
        georef: None,
        device: Default::default(),
        stage_cache: None,
        fence: None,
        strict: false,
    }
}

/// Run every stage of `dag` in order, as `kiln run` does.
async fn run_all(plan: &JobPlan, dag: &Dag) -> Vec<StageOutcome> {
    let mut done: HashMap<StageKind, StageOutcome> = HashMap::new();
    let mut outcomes = Vec::new();
    for node in dag.topo_order().unwrap() {
        let o = run_stage(plan, node, &done).await.unwrap();
        done.insert(node.kind, o.clone());
        outcomes.push(o);
    }
    outcomes
}

fn toy_dag(suffix: &'static str) -> Dag {
    let stages: Vec<Arc<dyn AnyStage>> = vec![Arc::new(Reverse), Arc::new(Restore { suffix })];
    Dag::from_stages(JobKind::Splats, stages)
}

#[tokio::test]
async fn a_stage_unknown_to_kiln_runs_through_the_engine_keyed_cached_and_typed() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("in.txt");
    std::fs::write(&input, "kiln").unwrap();
    let plan = plan(root.path(), &input);

    let dag = toy_dag("!");
    assert_eq!(
        dag.node(RESTORE).unwrap().deps,
        vec![REVERSE],
        "IfPlanned dropped"
    );
    let first = run_all(&plan, &dag).await;
    assert!(first.iter().all(|o| !o.cache_hit));
    let restored: RestoreSummary = serde_json::from_value(first[1].summary.clone()).unwrap();
    assert_eq!(restored.text, "kiln!");
    assert_eq!(
        std::fs::read_to_string(plan.work_dir.join("restore/restored.txt")).unwrap(),
        "kiln!"
    );
    // The engine metered it and recorded the output's size beside the stage's own fields.
    assert_eq!(first[1].usage.bytes_read, 4 + marker_len(&plan, REVERSE));
    assert!(kiln_pipeline::run::stored_bytes(&first[1].summary).unwrap() > 0);
    assert_eq!(first[1].recipe.as_ref().unwrap().inputs[0].0, "reverse");

    // Same job again: both reused by key.
    let again = run_all(&plan, &dag).await;
    assert!(again.iter().all(|o| o.cache_hit));
    assert_eq!(again[1].key, first[1].key);

    // A parameter change reruns only the stage it belongs to.
    let changed = run_all(&plan, &toy_dag("?")).await;
    assert!(changed[0].cache_hit && !changed[1].cache_hit);
    assert_ne!(changed[1].key, first[1].key);
    assert_eq!(
        std::fs::read_to_string(plan.work_dir.join("restore/restored.txt")).unwrap(),
        "kiln?"
    );
    // Its summary is not a built-in stage's: the typed reader leaves it alone.
    assert_eq!(
        kiln_pipeline::stages::summary::StageSummary::of(&changed[1]),
        None
    );
}

/// Size of the marker the engine writes into a finished stage folder (the toy stage reads the
/// whole folder, marker included).
fn marker_len(plan: &JobPlan, kind: StageKind) -> u64 {
    std::fs::metadata(plan.work_dir.join(kind.name()).join(".kiln-stage.json"))
        .unwrap()
        .len()
}

/// Rewrite the cache entry folder `entry`'s `.kiln-cache.json` to list its files as they are now,
/// as a writer of the store who changed a file would.
fn forge_contents_list(entry: &Path) {
    let mut files = Vec::new();
    for e in std::fs::read_dir(entry).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != ".kiln-cache.json" {
            let bytes = std::fs::read(e.path()).unwrap();
            let hash = blake3::hash(&bytes).to_hex().to_string();
            files.push(serde_json::json!({"path": name, "bytes": bytes.len(), "blake3": hash}));
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    std::fs::write(
        entry.join(".kiln-cache.json"),
        serde_json::to_vec(&files).unwrap(),
    )
    .unwrap();
}

/// Issue 41: entries of the shared stage cache whose file was rewritten together with a matching
/// `.kiln-cache.json` are not what the committing worker recorded in the cache ledger, so a
/// fresh worker ignores them and runs both stages again; its outputs are byte for byte the
/// untampered run's, and the rebuild puts the good bytes back in the store.
#[tokio::test]
async fn cache_entries_rewritten_with_matching_contents_lists_are_rebuilt_not_reused() {
    use kiln_pipeline::cache_ledger::{CacheLedger, MemoryLedger};
    use kiln_pipeline::stage_cache::StageCache;
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("in.txt");
    std::fs::write(&input, "kiln").unwrap();
    let ledger: Arc<dyn CacheLedger> = Arc::new(MemoryLedger::default());
    let cache_root = root.path().join("cache");
    let cache = StageCache::new(cache_root.to_str().unwrap(), Some("teams/art"), ledger).unwrap();
    let on_worker = |work: &str| JobPlan {
        work_dir: root.path().join(work),
        stage_cache: Some(cache.clone()),
        ..plan(root.path(), &input)
    };
    let dag = toy_dag("!");
    let first = run_all(&on_worker("w1"), &dag).await;
    assert!(first.iter().all(|o| !o.cache_hit));
    let clean = std::fs::read(root.path().join("w1/restore/restored.txt")).unwrap();

    // Another worker restores both from the cache.
    let second = run_all(&on_worker("w2"), &dag).await;
    assert!(second.iter().all(|o| o.cache_hit));

    let entry = |o: &StageOutcome| {
        cache_root
            .join("teams/art")
            .join(o.kind.name())
            .join(&o.key)
    };
    std::fs::write(entry(&first[0]).join("reversed.txt"), "denosiop").unwrap();
    std::fs::write(entry(&first[1]).join("restored.txt"), "poisoned!").unwrap();
    forge_contents_list(&entry(&first[0]));
    forge_contents_list(&entry(&first[1]));

    let third = run_all(&on_worker("w3"), &dag).await;
    assert!(
        third.iter().all(|o| !o.cache_hit),
        "a tampered entry was reused"
    );
    assert_eq!(third[1].key, first[1].key);
    let rebuilt = std::fs::read(root.path().join("w3/restore/restored.txt")).unwrap();
    assert_eq!(rebuilt, clean);
    assert_eq!(
        std::fs::read(entry(&first[1]).join("restored.txt")).unwrap(),
        clean,
        "the rebuild replaced the tampered entry"
    );
    let fourth = run_all(&on_worker("w4"), &dag).await;
    assert!(fourth.iter().all(|o| o.cache_hit));
}

/// A toy first stage that warns about its input, once from its own thread and once from a
/// rayon worker that entered its span (as `ingest` does for each photo).
struct Warner;
const WARNER: StageKind = StageKind::new("warner");

impl Stage for Warner {
    type Summary = ReverseSummary;
    fn kind(&self) -> StageKind {
        WARNER
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn key_params(&self, _plan: &JobPlan) -> serde_json::Value {
        serde_json::json!({})
    }
    fn run(&self, cx: &StageContext, out: &Path) -> kiln_pipeline::Result<Output<ReverseSummary>> {
        let input = cx.fetched_input()?;
        tracing::warn!(file = %input.display(), "the input is suspicious");
        let span = tracing::Span::current();
        rayon::scope(|s| {
            s.spawn(|_| span.in_scope(|| tracing::warn!("a frame was skipped")));
        });
        std::fs::write(out.join("ok.txt"), "ok").unwrap();
        Ok(Output::new(ReverseSummary { bytes: 2 }))
    }
}

#[tokio::test]
async fn a_stage_s_warnings_are_in_its_summary_survive_the_cache_and_fail_it_under_strict() {
    kiln_pipeline::warnings::install_for_tests();
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("in.txt");
    std::fs::write(&input, "kiln").unwrap();
    let plan = plan(root.path(), &input);
    let dag = Dag::from_stages(JobKind::Splats, vec![Arc::new(Warner) as Arc<dyn AnyStage>]);

    let first = run_all(&plan, &dag).await;
    let warnings = kiln_pipeline::warnings::of_summary(&first[0].summary);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    // Named in the user's terms: the user's input, not the work folder's copy of it.
    assert!(warnings[0].starts_with("the input is suspicious (file="));
    assert!(
        warnings[0].contains(input.to_str().unwrap()),
        "{}",
        warnings[0]
    );
    assert!(!warnings[0].contains("/work/"), "{}", warnings[0]);
    assert_eq!(warnings[1], "a frame was skipped");

    // Reused from the work folder: the warnings come back with the summary.
    let again = run_all(&plan, &dag).await;
    assert!(again[0].cache_hit);
    assert_eq!(
        kiln_pipeline::warnings::of_summary(&again[0].summary),
        warnings
    );

    // `strict = true` in a fresh work folder: the stage fails naming its warnings, uncommitted.
    let strict = JobPlan {
        work_dir: root.path().join("strict-work"),
        strict: true,
        ..plan.clone()
    };
    let node = dag.node(WARNER).unwrap();
    let e = run_stage(&strict, node, &HashMap::new()).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("strict") && text.contains("2 warning(s)"),
        "{text}"
    );
    assert!(text.contains("a frame was skipped"), "{text}");
    assert!(!strict.work_dir.join("warner").exists());
    // And a cached stage with warnings fails under strict too.
    assert!(
        run_stage(
            &JobPlan {
                strict: true,
                ..plan.clone()
            },
            node,
            &HashMap::new()
        )
        .await
        .is_err()
    );
}

/// A toy long stage (like `train`): warns before its first step, then runs `STEPS` steps,
/// polling [`kiln_pipeline::warnings::strict_stage_warned`] after each as the training loop's
/// checkpointer does, and stops as interrupted when it says so.
struct LongWarner;
const LONG_WARNER: StageKind = StageKind::new("long-warner");
const STEPS: usize = 1000;
static STEPS_RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Stage for LongWarner {
    type Summary = ReverseSummary;
    fn kind(&self) -> StageKind {
        LONG_WARNER
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn key_params(&self, _plan: &JobPlan) -> serde_json::Value {
        serde_json::json!({})
    }
    fn run(&self, _cx: &StageContext, out: &Path) -> kiln_pipeline::Result<Output<ReverseSummary>> {
        use std::sync::atomic::Ordering;
        STEPS_RUN.store(0, Ordering::SeqCst);
        tracing::warn!("no structure-from-motion points");
        for step in 1..=STEPS {
            STEPS_RUN.store(step, Ordering::SeqCst);
            if kiln_pipeline::warnings::strict_stage_warned() {
                return Err(kiln_pipeline::Error::Interrupted {
                    stage: "long-warner",
                    at: format!("after step {step}"),
                    resume: "run again".into(),
                });
            }
        }
        std::fs::write(out.join("ok.txt"), "ok").unwrap();
        Ok(Output::new(ReverseSummary { bytes: 2 }))
    }
}

/// Issue 44 (trial F12): under `strict = true` a long stage stops at its first warning (after
/// one step, not all of them) and fails with the strict refusal naming the warning; without
/// `strict` the same stage runs every step and records the warning.
#[tokio::test]
async fn under_strict_a_long_stage_stops_at_its_first_warning() {
    use std::sync::atomic::Ordering;
    kiln_pipeline::warnings::install_for_tests();
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("in.txt");
    std::fs::write(&input, "kiln").unwrap();
    let dag = Dag::from_stages(
        JobKind::Splats,
        vec![Arc::new(LongWarner) as Arc<dyn AnyStage>],
    );
    let node = dag.node(LONG_WARNER).unwrap();
    let strict = JobPlan {
        strict: true,
        ..plan(root.path(), &input)
    };
    let e = run_stage(&strict, node, &HashMap::new()).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("strict") && text.contains("1 warning(s)"),
        "{text}"
    );
    assert!(text.contains("no structure-from-motion points"), "{text}");
    assert_eq!(STEPS_RUN.load(Ordering::SeqCst), 1);

    let lenient = JobPlan {
        work_dir: root.path().join("lenient-work"),
        ..plan(root.path(), &input)
    };
    let done = run_stage(&lenient, node, &HashMap::new()).await.unwrap();
    assert_eq!(STEPS_RUN.load(Ordering::SeqCst), STEPS);
    assert_eq!(
        kiln_pipeline::warnings::of_summary(&done.summary),
        vec!["no structure-from-motion points".to_string()]
    );
}
