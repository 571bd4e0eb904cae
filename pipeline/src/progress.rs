//! Progress bars for long stages (`indicatif`); hidden automatically when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting `total` steps, labelled `what`.
pub fn steps_bar(total: u64, what: &str) -> ProgressBar {
    bar(total, what, "{pos}/{len} {per_sec} {msg}")
}

/// A bar counting `total` bytes (uploads), labelled `what`.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    bar(total, what, "{bytes}/{total_bytes} {bytes_per_sec}")
}

/// A bar with the common prefix, elapsed time and bar, followed by `counters`.
fn bar(total: u64, what: &str, counters: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let template = format!("{{prefix:>8}} [{{elapsed_precise}}] {{wide_bar}} {counters}");
    let style =
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(what.to_string());
    bar
}
