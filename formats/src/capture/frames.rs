//! What every reader does to its frame list before returning a [`super::model::Capture`]: sort by
//! name and drop later listings of a name ([`sort_frames`]), and log the one warning that lists the
//! frames it skipped ([`warn_skipped`]).

use std::path::Path;

use super::model::Frame;

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
    by_reason: Vec<(String, Vec<String>)>,
}

impl Skipped {
    /// Record that frame `name` was skipped for `reason`.
    /// A reason may carry detail (which camera, which fault): frames are grouped by its text.
    pub(super) fn push(&mut self, reason: impl Into<String>, name: String) {
        let reason = reason.into();
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

/// The reason a later listing of an image already listed is skipped for.
pub(super) const LISTED_TWICE: &str = "image listed twice; the first listing is kept";

/// Sort frames by name and drop every later listing of a name already listed, with one warning
/// naming them: two frames of one name would break hold-out by name, but a duplicate row is no
/// reason to refuse the whole capture (issue 44, rule 3). The first listing (file order) is kept,
/// as the sort is stable. Returns the dropped names, for [`super::model::Capture::skipped`].
pub(super) fn sort_frames(source: &Path, frames: &mut Vec<Frame>, listed: usize) -> Vec<String> {
    frames.sort_by(|a, b| a.name.cmp(&b.name));
    let mut dropped = Vec::new();
    frames.dedup_by(|later, kept| {
        let same = later.name == kept.name;
        if same {
            dropped.push(later.name.clone());
        }
        same
    });
    warn_skipped(source, LISTED_TWICE, &dropped, listed);
    dropped
}
