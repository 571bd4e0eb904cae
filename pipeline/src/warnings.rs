//! Every warning a stage gives reaches the user on every path, not only stderr.
//!
//! Readers and stages warn with `tracing::warn!` (a texture that is missing, a camera skipped, a
//! value clamped, metadata dropped). A log line is lost to a team that submits through the queue,
//! so the engine ([`crate::run::run_stage`]) runs each stage inside a collecting span
//! ([`Collector`]); the [`layer`] that every Kiln binary installs records each WARN or ERROR
//! event emitted inside it, and the engine stores them in the stage's summary under
//! [`WARNINGS`]. From there `kiln run`, `kiln report` (text and `--json`), the job page, the API's
//! job record and the published `manifest.json` show them, and a job file's `strict = true`
//! makes a stage with warnings fail ([`strict_refusal`]); long work polls
//! [`strict_stage_warned`] to fail at the first warning instead of at the stage's end.
//!
//! The layer sees events whatever `RUST_LOG` filters out of the log, except the database
//! driver's (`sqlx*`, which may quote a connection string). Events on threads that did not enter the stage's span (a rayon worker inside a stage)
//! are not collected: warn after the parallel part, from the stage's own thread.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::dag::StageKind;

/// Key of a stage summary holding its warnings (a list of strings, absent when none).
pub const WARNINGS: &str = "warnings";

/// At most this many warnings are kept per stage; a last entry counts the rest.
pub const MAX_PER_STAGE: usize = 50;

/// The span name the layer recognises.
const SPAN: &str = "kiln_stage_warnings";
/// Its field holding the collector's id.
const ID_FIELD: &str = "kiln_warnings";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// What one open collector holds.
#[derive(Debug, Default)]
struct Collected {
    /// The messages kept (at most [`MAX_PER_STAGE`]).
    kept: Vec<String>,
    /// How many more were given.
    left_out: usize,
    /// Under `strict = true`: the stage's long work should stop at its first warning
    /// ([`strict_stage_warned`]).
    stop_on_warning: bool,
}
/// Open collectors by id.
type OpenCollectors = Option<HashMap<u64, Collected>>;
static OPEN: Mutex<OpenCollectors> = Mutex::new(None);

fn open() -> std::sync::MutexGuard<'static, OpenCollectors> {
    OPEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One stage attempt's warnings, collected while its [`Collector::span`] is entered.
#[derive(Debug)]
pub struct Collector {
    id: u64,
    span: tracing::Span,
}

impl Collector {
    /// Start collecting for one attempt of `kind`.
    #[must_use]
    pub fn begin(kind: StageKind) -> Collector {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        open()
            .get_or_insert_with(HashMap::new)
            .insert(id, Collected::default());
        // TRACE, so the log (filtered at info by default) does not prefix every line with it;
        // the layer has no filter and sees it anyway.
        let span = tracing::trace_span!(SPAN, kiln_warnings = id, stage = kind.name());
        Collector { id, span }
    }

    /// Under `strict = true` (`yes`), the stage's long work stops at its first warning instead
    /// of running to the end to be refused then ([`strict_stage_warned`]).
    #[must_use]
    pub fn stop_on_warning(self, yes: bool) -> Collector {
        if let Some(c) = open().as_mut().and_then(|m| m.get_mut(&self.id)) {
            c.stop_on_warning = yes;
        }
        self
    }

    /// The span to enter on every thread that runs the stage.
    #[must_use]
    pub fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// The span, and this collector as the one [`strict_stage_warned`] asks about, for the
    /// thread that runs the stage's main loop ([`Scope::run`]).
    #[must_use]
    pub fn scope(&self) -> Scope {
        Scope {
            span: self.span.clone(),
            id: self.id,
        }
    }

    /// The warnings collected, in the order given, each in the user's terms (work-folder copies
    /// of inputs named by the user's own location); at most [`MAX_PER_STAGE`] and a count of
    /// the rest.
    #[must_use]
    pub fn finish(self) -> Vec<String> {
        let Collected {
            mut kept, left_out, ..
        } = open()
            .as_mut()
            .and_then(|m| m.remove(&self.id))
            .unwrap_or_default();
        if left_out > 0 {
            kept.push(format!("… and {left_out} more warnings (see the log)"));
        }
        kept
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(m) = open().as_mut() {
            m.remove(&self.id);
        }
    }
}

fn record(id: u64, message: String) {
    if let Some(c) = open().as_mut().and_then(|m| m.get_mut(&id)) {
        if c.kept.len() < MAX_PER_STAGE {
            c.kept
                .push(crate::input_alias::in_user_terms(&message).into_owned());
        } else {
            c.left_out += 1;
        }
    }
}

thread_local! {
    /// The collector of the stage whose main loop runs on this thread ([`Scope::run`]).
    static CURRENT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// A stage's collecting span plus its collector's id, moved to the thread that runs it.
#[derive(Debug, Clone)]
pub struct Scope {
    span: tracing::Span,
    id: u64,
}

impl Scope {
    /// Run `f` inside the span, with this collector as the thread's current one.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        self.span.in_scope(|| {
            let before = CURRENT.replace(Some(self.id));
            let out = f();
            CURRENT.set(before);
            out
        })
    }
}

/// Whether the stage running on this thread ([`Scope::run`]) runs under `strict = true` and has
/// warned: its long work (the training loop, once per step) stops then, so a strict job fails
/// at its first warning rather than after every step (issue 44, trial F12).
#[must_use]
pub fn strict_stage_warned() -> bool {
    let Some(id) = CURRENT.get() else {
        return false;
    };
    open()
        .as_ref()
        .and_then(|m| m.get(&id))
        .is_some_and(|c| c.stop_on_warning && !c.kept.is_empty())
}

/// The collector id a span carries (its extension).
struct CollectorId(u64);

/// The tracing layer that records warnings into the open collectors. Install it beside the
/// log's own layer (without the log's filter), e.g.
/// `tracing_subscriber::registry().with(fmt_layer.with_filter(env)).with(warnings::layer())`.
#[must_use]
pub fn layer() -> WarningsLayer {
    WarningsLayer
}

/// See [`layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WarningsLayer;

impl<S> tracing_subscriber::Layer<S> for WarningsLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        if attrs.metadata().name() != SPAN {
            return;
        }
        let mut v = IdVisitor(None);
        attrs.record(&mut v);
        if let (Some(n), Some(span)) = (v.0, ctx.span(id)) {
            span.extensions_mut().insert(CollectorId(n));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        // Not the database driver's: its warnings may quote a connection string (the log drops
        // them too, see the CLI's `init_logging`).
        let meta = event.metadata();
        if *meta.level() > tracing::Level::WARN || meta.target().starts_with("sqlx") {
            return;
        }
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let Some(id) = scope
            .into_iter()
            .find_map(|span| span.extensions().get::<CollectorId>().map(|c| c.0))
        else {
            return;
        };
        let mut text = MessageVisitor::default();
        event.record(&mut text);
        record(id, text.finish());
    }
}

struct IdVisitor(Option<u64>);

impl Visit for IdVisitor {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == ID_FIELD {
            self.0 = Some(value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// An event as one line: its message, then its other fields as `name=value`.
#[derive(Default)]
struct MessageVisitor {
    message: String,
    /// (name, value) of each field but the message.
    fields: Vec<(&'static str, String)>,
}

impl MessageVisitor {
    /// The message, then `(name=value, …)` for the fields whose value (of 6 characters or more)
    /// it does not already quote: a reader that names its file in the text and as a field says
    /// it once.
    fn finish(self) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            // Short values (a count, a step) may appear in the text by chance: always kept.
            .filter(|(_, value)| value.len() < 6 || !self.message.contains(value.as_str()))
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        if fields.is_empty() {
            self.message
        } else {
            format!("{} ({})", self.message, fields.join(", "))
        }
    }
}

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields.push((field.name(), value.to_string()));
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields.push((field.name(), format!("{value:?}")));
        }
    }
}

/// The warnings a stage summary records (none for summaries without any, and for ledger rows
/// written before warnings were recorded).
#[must_use]
pub fn of_summary(summary: &serde_json::Value) -> Vec<String> {
    summary
        .get(WARNINGS)
        .and_then(|w| serde_json::from_value(w.clone()).ok())
        .unwrap_or_default()
}

/// `summary` with `warnings` recorded in it (left unchanged when there are none).
pub fn record_in(summary: &mut serde_json::Value, warnings: &[String]) {
    if let (false, Some(o)) = (warnings.is_empty(), summary.as_object_mut()) {
        o.insert(WARNINGS.into(), warnings.into());
    }
}

/// One warning of a job: the stage that gave it and its text. What `kiln report --json`, the
/// API's job record and `manifest.json` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageWarning {
    pub stage: String,
    pub message: String,
}

/// The warnings of a job's stages, in stage order: `(stage, summary)` pairs.
pub fn of_job<'a>(
    stages: impl IntoIterator<Item = (&'a str, &'a serde_json::Value)>,
) -> Vec<StageWarning> {
    stages
        .into_iter()
        .flat_map(|(stage, summary)| {
            of_summary(summary)
                .into_iter()
                .map(move |message| StageWarning {
                    stage: stage.to_string(),
                    message,
                })
        })
        .collect()
}

/// Under `strict = true`, the error that fails a stage which gave warnings.
#[must_use]
pub fn strict_refusal(kind: StageKind, warnings: &[String]) -> crate::Error {
    crate::Error::Param {
        stage: kind.name(),
        field: "strict".into(),
        expected: "no warnings (the job file sets `strict = true`; remove it to accept them)"
            .into(),
        found: format!("{} warning(s): {}", warnings.len(), warnings.join("; ")),
    }
}

/// Install the layer as this process's only subscriber, once (tests of code that runs stages).
pub fn install_for_tests() {
    use tracing_subscriber::layer::SubscriberExt;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ =
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer()));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_inside_the_span_are_collected_in_order_and_others_are_not() {
        install_for_tests();
        let c = Collector::begin(StageKind::INGEST);
        tracing::warn!("outside: not collected");
        {
            let _g = c.span().entered();
            tracing::info!("info: not a warning");
            tracing::warn!(path = "/data/a.obj", "texture missing");
            tracing::warn!(file = "/data/b.obj", n = 2, "/data/b.obj: 2 faces dropped");
            let inner = tracing::info_span!("nested");
            let _g2 = inner.enter();
            tracing::error!("an error inside a nested span");
        }
        // Another thread entering the same span is collected too.
        let span = c.span();
        std::thread::spawn(move || {
            let _g = span.entered();
            tracing::warn!("from a helper thread");
        })
        .join()
        .unwrap();
        assert_eq!(
            c.finish(),
            vec![
                "texture missing (path=/data/a.obj)".to_string(),
                "/data/b.obj: 2 faces dropped (n=2)".to_string(),
                "an error inside a nested span".to_string(),
                "from a helper thread".to_string(),
            ]
        );
    }

    #[test]
    fn at_most_the_cap_is_kept_and_the_rest_counted() {
        install_for_tests();
        let c = Collector::begin(StageKind::TILE);
        {
            let _g = c.span().entered();
            for i in 0..MAX_PER_STAGE + 7 {
                tracing::warn!(i, "w");
            }
        }
        let w = c.finish();
        assert_eq!(w.len(), MAX_PER_STAGE + 1);
        assert_eq!(w[MAX_PER_STAGE], "… and 7 more warnings (see the log)");
    }

    #[test]
    fn summaries_carry_warnings_and_jobs_list_them_by_stage() {
        let mut s = serde_json::json!({"tiles": 3});
        record_in(&mut s, &[]);
        assert_eq!(s, serde_json::json!({"tiles": 3}));
        record_in(&mut s, &["a".into(), "b".into()]);
        assert_eq!(of_summary(&s), vec!["a", "b"]);
        let t = serde_json::json!({});
        let job = of_job([("ingest", &s), ("tile", &t)]);
        assert_eq!(job.len(), 2);
        assert_eq!(job[1].stage, "ingest");
        assert_eq!(job[1].message, "b");
    }

    /// Rule 5 as a property over generated stages: two stages run at once (as on a worker with
    /// two jobs), each giving a random mix of info, warn and error events from its own thread and
    /// from helper threads inside its span, with noise outside any span. Each collector holds
    /// exactly its own WARN/ERROR messages (its own thread's in order), capped with a count;
    /// under `stop_on_warning` [`strict_stage_warned`] turns true at the first one, and only on
    /// its own stage's thread.
    #[test]
    fn each_stage_collects_exactly_its_own_warnings_over_generated_runs() {
        install_for_tests();
        for seed in 0..24u64 {
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move |n: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % n
            };
            let plans: Vec<Vec<(u64, bool)>> = (0..2)
                .map(|_| {
                    let events = next(80);
                    (0..events).map(|_| (next(3), next(4) == 0)).collect()
                })
                .collect();
            let handles: Vec<_> = plans
                .into_iter()
                .enumerate()
                .map(|(stage, events)| {
                    std::thread::spawn(move || {
                        let c = Collector::begin(StageKind::TILE).stop_on_warning(stage == 0);
                        let scope = c.scope();
                        let mut want_own = Vec::new();
                        let mut want_helper = Vec::new();
                        let mut first_seen_at = None;
                        scope.run(|| {
                            for (i, &(level, on_helper)) in events.iter().enumerate() {
                                let text = format!("s{stage} e{i}");
                                let counted = level > 0;
                                if on_helper {
                                    let span = c.span();
                                    let t = text.clone();
                                    std::thread::spawn(move || {
                                        let _g = span.entered();
                                        match level {
                                            0 => tracing::info!("{t}"),
                                            1 => tracing::warn!("{t}"),
                                            _ => tracing::error!("{t}"),
                                        }
                                    })
                                    .join()
                                    .unwrap();
                                } else {
                                    match level {
                                        0 => tracing::info!("{text}"),
                                        1 => tracing::warn!("{text}"),
                                        _ => tracing::error!("{text}"),
                                    }
                                }
                                if counted {
                                    if on_helper {
                                        want_helper.push(text);
                                    } else {
                                        want_own.push(text);
                                    }
                                    first_seen_at.get_or_insert(i);
                                }
                                let stop = strict_stage_warned();
                                assert_eq!(stop, stage == 0 && first_seen_at.is_some());
                            }
                        });
                        tracing::warn!("s{stage}: outside the span");
                        assert!(!strict_stage_warned(), "outside the stage's scope");
                        (want_own, want_helper, c.finish())
                    })
                })
                .collect();
            for h in handles {
                let (own, helper, got) = h.join().unwrap();
                let total = own.len() + helper.len();
                let kept = total.min(MAX_PER_STAGE);
                assert_eq!(got.len(), kept + usize::from(total > MAX_PER_STAGE));
                if total > MAX_PER_STAGE {
                    assert_eq!(
                        got[kept],
                        format!("… and {} more warnings (see the log)", total - kept)
                    );
                }
                let got = &got[..kept];
                // Events are emitted one at a time, so the kept ones are the first `kept`.
                let mut all: Vec<&String> = own.iter().chain(&helper).collect();
                let order = |t: &String| t.split(" e").nth(1).unwrap().parse::<usize>().unwrap();
                all.sort_by_key(|t| order(t));
                let want: Vec<&String> = all.into_iter().take(kept).collect();
                assert_eq!(got.iter().collect::<Vec<_>>(), want, "seed {seed}");
            }
        }
    }
}
