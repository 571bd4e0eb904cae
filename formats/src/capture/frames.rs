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

/// Frames a reader left out, grouped by reason in the order reasons were first met (issue 44,
/// rule 3: a bad camera is skipped, never fatal, while the rest stands).
#[derive(Debug, Default)]
pub(super) struct Skipped {
    by_reason: Vec<(&'static str, Vec<String>)>,
}

impl Skipped {
    /// Record that frame `name` was skipped for `reason`.
    pub(super) fn push(&mut self, reason: &'static str, name: String) {
        match self.by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, names)) => names.push(name),
            None => self.by_reason.push((reason, vec![name])),
        }
    }

    /// Frames skipped for `reason`.
    pub(super) fn count(&self, reason: &str) -> usize {
        self.by_reason
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| n.len())
    }

    /// One warning per reason, naming the file and every frame ([`warn_skipped`]).
    pub(super) fn warn(&self, source: &Path, listed: usize) {
        for (reason, names) in &self.by_reason {
            warn_skipped(source, reason, names, listed);
        }
    }

    /// Every skipped frame with its reason, `name (reason)`, in name order: for an error that
    /// must list them all.
    pub(super) fn listing(&self) -> String {
        let mut all: Vec<String> = self
            .by_reason
            .iter()
            .flat_map(|(r, names)| names.iter().map(move |n| format!("{n} ({r})")))
            .collect();
        all.sort();
        all.join(", ")
    }

    /// Every skipped frame's name, sorted ([`super::model::Capture::skipped`]).
    pub(super) fn names(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .by_reason
            .iter()
            .flat_map(|(_, names)| names.iter().cloned())
            .collect();
        all.sort();
        all
    }
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
