//! The location a user gave for each input a job copied into its work directory, so that what
//! Kiln prints names the user's own path or URL (`/data/fox/transforms.json`,
//! `s3://team/fox/…`) rather than the copy (`$KILN_HOME/work/<job>/input/…`) the user never made.
//!
//! [`crate::run::run_stage`] registers each fetched input; the CLI's log writer passes every line
//! through [`in_user_terms`], and stage errors are renamed with
//! [`crate::Error::naming_user_input`]. A copy's path is unique to its job's work directory, so
//! replacing every registered copy in any line is right even with several jobs in one process.

use std::path::Path;
use std::sync::RwLock;

/// (work-directory copy, user's location) pairs, longest copy first.
static ALIASES: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());

/// Record that `copy` (a fetched input in a work directory) is the user's `user` location.
pub fn register(copy: &Path, user: &str) {
    let copy = copy.to_string_lossy().into_owned();
    let user = user.trim_end_matches('/').to_string();
    if copy.is_empty() || copy == user {
        return;
    }
    let mut aliases = ALIASES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    aliases.retain(|(c, _)| *c != copy);
    aliases.push((copy, user));
    // A longer copy path first, so a nested copy is not half-replaced by its parent's alias.
    aliases.sort_by_key(|(c, _)| std::cmp::Reverse(c.len()));
}

/// `text` with every registered work-directory copy replaced by the user's location.
#[must_use]
pub fn in_user_terms(text: &str) -> std::borrow::Cow<'_, str> {
    let aliases = ALIASES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = std::borrow::Cow::Borrowed(text);
    for (copy, user) in aliases.iter() {
        if out.contains(copy.as_str()) {
            out = std::borrow::Cow::Owned(out.replace(copy.as_str(), user));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_copies_read_as_the_users_location() {
        register(Path::new("/kh/work/job-a/input"), "/data/fox/");
        register(
            Path::new("/kh/work/job-b/input/scene.ply"),
            "s3://team/scene.ply",
        );
        assert_eq!(
            in_user_terms("/kh/work/job-a/input/transforms.json: skipping 1 of 7 frames"),
            "/data/fox/transforms.json: skipping 1 of 7 frames"
        );
        assert_eq!(
            in_user_terms("read /kh/work/job-b/input/scene.ply"),
            "read s3://team/scene.ply"
        );
        assert_eq!(
            in_user_terms("/kh/work/job-c/input/x"),
            "/kh/work/job-c/input/x"
        );
    }
}
