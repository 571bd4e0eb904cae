//! Progress bars for long stages (`indicatif`); hidden automatically when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting `total` steps, labelled `what`.
pub fn steps_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{prefix:>8} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(what.to_string());
    bar
}

/// A bar counting `total` bytes (uploads), labelled `what`.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{prefix:>8} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(what.to_string());
    bar
}
