//! Job-file overrides by dotted key (`train.steps=150`), applied to the job's TOML text before it
//! is parsed, so an override goes through exactly the same validation as the file itself.

use std::path::Path;

use crate::{Error, Result};

/// Parse a command-line override `KEY=VALUE`: the value is read as TOML (`150`, `0.5`,
/// `[1.0, 0.5]`, `"text"`), and a bare word that is not TOML is taken as a string.
///
/// # Errors
/// [`Error::Field`] on `--set` when there is no `=` or the key is empty.
pub fn parse_override(arg: &str) -> Result<(String, toml::Value)> {
    let bad = |found: &str| Error::Field {
        path: "--set".into(),
        field: "--set".into(),
        expected: "KEY=VALUE with a dotted job-file key, e.g. train.steps=150".into(),
        found: found.into(),
    };
    let (key, value) = arg.split_once('=').ok_or_else(|| bad(arg))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(bad(arg));
    }
    let value = value.trim();
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    Ok((key.to_string(), parsed))
}

/// Set each dotted `key` of the job text to its value (creating tables as needed), keeping the
/// rest of the text. `path` names the job file in errors.
///
/// # Errors
/// [`Error::Spec`] when the text is not TOML or a key runs through a non-table value.
pub fn apply(text: &str, path: &Path, overrides: &[(String, toml::Value)]) -> Result<String> {
    use toml_edit::{DocumentMut, Item, Table};
    let spec_err = |message: String| Error::Spec {
        path: path.into(),
        message,
    };
    let mut doc: DocumentMut = text.parse().map_err(|e| spec_err(format!("{e}")))?;
    for (key, value) in overrides {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, tables) = parts.split_last().expect("non-empty key");
        let mut table: &mut Table = doc.as_table_mut();
        for part in tables {
            let item = table
                .entry(part)
                .or_insert_with(|| Item::Table(Table::new()));
            table = item.as_table_mut().ok_or_else(|| {
                spec_err(format!(
                    "override `{key}`: `{part}` is not a table in the job file"
                ))
            })?;
        }
        let edit_value: toml_edit::Value = value
            .to_string()
            .parse()
            .map_err(|e| spec_err(format!("override `{key}`: {e}")))?;
        table.insert(last, Item::Value(edit_value));
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_and_create_keys_and_keep_comments() {
        let text = "# fox\nname = \"fox\"\n[train]\nsteps = 3000 # default\nseed = 0\n";
        let out = apply(
            text,
            Path::new("fox.toml"),
            &[
                parse_override("train.steps=150").unwrap(),
                parse_override("ingest.max_side = 135").unwrap(),
                parse_override("decimate.ratios=[1.0, 0.25]").unwrap(),
            ],
        )
        .unwrap();
        let t: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(t["train"]["steps"].as_integer(), Some(150));
        assert_eq!(t["train"]["seed"].as_integer(), Some(0));
        assert_eq!(t["ingest"]["max_side"].as_integer(), Some(135));
        assert_eq!(t["decimate"]["ratios"].as_array().unwrap().len(), 2);
        assert!(out.starts_with("# fox"));
    }

    #[test]
    fn bad_overrides_are_clear_errors() {
        assert!(parse_override("train.steps").is_err());
        assert!(parse_override("=3").is_err());
        assert!(parse_override("train..steps=3").is_err());
        let err = apply(
            "name = \"x\"\n",
            Path::new("j.toml"),
            &[parse_override("name.sub=1").unwrap()],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("j.toml") && err.contains("name"), "{err}");
    }

    #[test]
    fn bare_words_are_strings() {
        assert_eq!(
            parse_override("output=out/x").unwrap().1,
            toml::Value::String("out/x".into())
        );
    }
}
