//! The repository's own documentation stays true: `docs/ARCHITECTURE.md` names only files and
//! code items that exist, and the README stays a front door.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of the workspace, concatenated (for item lookups).
fn all_rust() -> String {
    let mut text = String::new();
    let mut stack = vec![repo()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(p);
                }
            } else if name.ends_with(".rs") {
                text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                text.push('\n');
            }
        }
    }
    text
}

/// The `code spans` of a Markdown text.
fn code_spans(md: &str) -> Vec<String> {
    md.split("```")
        .step_by(2)
        .flat_map(|prose| prose.split('`').skip(1).step_by(2).map(String::from))
        .collect()
}

/// Whether `span` names a file or folder (relative to the repository root) that exists.
fn path_exists(span: &str) -> bool {
    repo().join(span.trim_end_matches('/')).exists()
}

fn looks_like_path(span: &str) -> bool {
    !span.contains(' ')
        && !span.contains('<')
        && !span.contains("::")
        && (span.contains('/') || span.ends_with(".rs") || span.ends_with(".md"))
        && !span.starts_with("WORK/")
}

/// A code item the doc names: `Name`, `name(…)` or `a::b::Name`: its last segment, when it
/// looks like a Rust item.
fn item_name(span: &str) -> Option<&str> {
    let head = span.split(['(', ' ', '{', '<']).next()?;
    let last = head.rsplit("::").next()?;
    let is_ident = !last.is_empty() && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let rusty =
        last.chars().next()?.is_ascii_uppercase() || span.contains('(') || head.contains("::");
    (is_ident && rusty && !looks_like_path(span)).then_some(last)
}

#[test]
fn docs_architecture_names_real_code() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    let code = all_rust();
    let mut missing = Vec::new();
    for span in code_spans(&doc) {
        if looks_like_path(&span) {
            if !path_exists(&span) {
                missing.push(format!("path `{span}`"));
            }
        } else if let Some(item) = item_name(&span) {
            let defined = [
                "fn ", "struct ", "enum ", "trait ", "type ", "const ", "mod ",
            ]
            .iter()
            .any(|kw| code.contains(&format!("{kw}{item}")))
                || code.contains(&format!("    {item}("))
                || code.contains(&format!("    {item},"))
                || code.contains(&format!("    {item} {{"));
            if !defined {
                missing.push(format!("item `{span}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what does not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn readme_is_a_front_door_with_both_setup_commands_on_its_first_screen() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= 200,
        "README.md has {} lines (≤ 200)",
        lines.len()
    );
    let first_screen = lines[..lines.len().min(50)].join("\n");
    for command in ["cargo run -- run datasets/jobs/fox.toml", ".ci/run"] {
        assert!(
            first_screen.contains(command),
            "`{command}` is not on the README's first screen (its first 50 lines)"
        );
    }
    // Every docs/ page the README links to exists.
    for link in readme.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or("");
        if target.starts_with("docs/") {
            let file = target.split('#').next().unwrap();
            assert!(
                Path::new(&repo().join(file)).exists(),
                "README links to missing {file}"
            );
        }
    }
}
