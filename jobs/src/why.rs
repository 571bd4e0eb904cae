//! `kiln why JOB STAGE`: what changed in a stage's content key between two runs — parameters
//! (leaf by leaf), the keys of its inputs (naming the upstream stage to ask next), or the Kiln
//! version — which is why the stage ran again instead of being reused.

use kiln_pipeline::dag::KeyRecipe;
use serde_json::Value;

/// One difference between two key recipes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Change {
    /// A parameter at a JSON path (`train.steps`, `tiler.max_splats_per_tile`) differs.
    Param {
        path: String,
        before: Option<Value>,
        after: Option<Value>,
    },
    /// The key of an input differs: the fetched input's content (`input`) or a dependency stage.
    Input {
        from: String,
        before: Option<String>,
        after: Option<String>,
    },
    /// Computed by another Kiln version.
    Version { before: String, after: String },
}

fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&p, x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// The differences from `before` to `after`, in a stable order (version, parameters by path,
/// inputs in dependency order). Empty when the recipes (and so the keys) are equal.
pub fn diff(before: &KeyRecipe, after: &KeyRecipe) -> Vec<Change> {
    let mut out = Vec::new();
    if before.version != after.version {
        out.push(Change::Version {
            before: before.version.clone(),
            after: after.version.clone(),
        });
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    leaves("", &before.params, &mut a);
    leaves("", &after.params, &mut b);
    let paths: std::collections::BTreeSet<&String> = a.iter().chain(&b).map(|(p, _)| p).collect();
    for p in paths {
        let x = a.iter().find(|(q, _)| q == p).map(|(_, v)| v.clone());
        let y = b.iter().find(|(q, _)| q == p).map(|(_, v)| v.clone());
        if x != y {
            out.push(Change::Param {
                path: p.clone(),
                before: x,
                after: y,
            });
        }
    }
    let mut names: Vec<&String> = after.inputs.iter().map(|(n, _)| n).collect();
    for (n, _) in &before.inputs {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    for n in names {
        let x = before
            .inputs
            .iter()
            .find(|(m, _)| m == n)
            .map(|(_, k)| k.clone());
        let y = after
            .inputs
            .iter()
            .find(|(m, _)| m == n)
            .map(|(_, k)| k.clone());
        if x != y {
            out.push(Change::Input {
                from: n.clone(),
                before: x,
                after: y,
            });
        }
    }
    out
}

/// One line per change, for people.
pub fn describe(changes: &[Change], job_id: &str) -> Vec<String> {
    let short = |k: &Option<String>| {
        k.as_deref()
            .map(|k| k[..k.len().min(12)].to_string())
            .unwrap_or_else(|| "(none)".into())
    };
    let val = |v: &Option<Value>| v.as_ref().map_or("(unset)".to_string(), |v| v.to_string());
    changes
        .iter()
        .map(|c| match c {
            Change::Param {
                path,
                before,
                after,
            } => format!("parameter {path}: {} → {}", val(before), val(after)),
            Change::Input {
                from,
                before,
                after,
            } if from == "input" => format!(
                "input content changed: {} → {} (the files at the input location differ)",
                short(before),
                short(after)
            ),
            Change::Input {
                from,
                before,
                after,
            } => format!(
                "input from `{from}` changed: {} → {} (`kiln why {job_id} {from}` says why)",
                short(before),
                short(after)
            ),
            Change::Version { before, after } => {
                format!("Kiln version {before} → {after} (every stage key includes it)")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_pipeline::dag::StageKind;
    use serde_json::json;

    #[test]
    fn parameter_input_and_version_changes_are_named() {
        let before = KeyRecipe::new(
            StageKind::TRAIN,
            &json!({"steps": 3000, "lr": {"means": 0.00016, "opacities": 0.05}}),
            vec![("ingest".into(), "a".repeat(64))],
        );
        let mut after = KeyRecipe::new(
            StageKind::TRAIN,
            &json!({"steps": 5000, "lr": {"means": 0.00016, "opacities": 0.05}, "seed": 1}),
            vec![("ingest".into(), "b".repeat(64))],
        );
        assert!(diff(&before, &before).is_empty());
        after.version = "9.9.9".into();
        let d = diff(&before, &after);
        assert_eq!(
            d,
            [
                Change::Version {
                    before: env!("CARGO_PKG_VERSION").into(),
                    after: "9.9.9".into()
                },
                Change::Param {
                    path: "seed".into(),
                    before: None,
                    after: Some(json!(1))
                },
                Change::Param {
                    path: "steps".into(),
                    before: Some(json!(3000)),
                    after: Some(json!(5000))
                },
                Change::Input {
                    from: "ingest".into(),
                    before: Some("a".repeat(64)),
                    after: Some("b".repeat(64))
                },
            ]
        );
        let lines = describe(&d, "fox-2");
        assert!(lines[2].contains("steps: 3000 → 5000"), "{lines:?}");
        assert!(lines[3].contains("kiln why fox-2 ingest"), "{lines:?}");
    }
}
