//! What every reader does to its frame list before returning a [`super::model::Capture`]: sort by
//! name and reject duplicate names ([`sort_frames`]), and log the one warning that lists the
//! frames it skipped ([`warn_skipped`]).

use std::path::Path;

use super::model::Frame;
use crate::{Error, Result};

/// Log one warning listing skipped frames (count + names) for a reason, if any.
pub(super) fn warn_skipped(source: &Path, reason: &str, names: &[String], listed: usize) {
    if names.is_empty() {
        return;
    }
    tracing::warn!(
        path = %source.display(),
        count = names.len(),
        listed,
        "{}",
        skipped_message(source, reason, names, listed)
    );
}

/// The text of [`warn_skipped`]'s warning: file, count of skipped of listed frames, reason, names.
pub(super) fn skipped_message(
    source: &Path,
    reason: &str,
    names: &[String],
    listed: usize,
) -> String {
    format!(
        "{}: skipping {} of {} frames ({reason}): {}",
        source.display(),
        names.len(),
        listed,
        names.join(", ")
    )
}

/// Sort frames by name, and reject duplicate names (they would break hold-out by name).
pub(super) fn sort_frames(source: &Path, field: &str, frames: &mut [Frame]) -> Result<()> {
    frames.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = frames.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::Invalid {
            path: source.to_path_buf(),
            field: field.into(),
            expected: "each image listed once".into(),
            found: format!("`{}` listed twice", w[0].name),
        });
    }
    Ok(())
}
