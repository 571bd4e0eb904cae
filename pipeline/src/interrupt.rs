//! Graceful stop on SIGINT / SIGTERM: the signal handler (installed by the CLI) asks work that
//! can checkpoint (the training loop) to stop after its current step; the loop writes a checkpoint
//! and returns [`crate::Error::Interrupted`], and a rerun resumes from it. Work that cannot
//! checkpoint is not waited for: [`request_stop`] tells the handler to exit at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static CHECKPOINTABLE: AtomicUsize = AtomicUsize::new(0);

/// Asks running checkpointable work to stop after its current step. Returns whether any is
/// running (when not, the caller should simply exit).
pub fn request_stop() -> bool {
    STOP.store(true, Ordering::SeqCst);
    CHECKPOINTABLE.load(Ordering::SeqCst) > 0
}

/// Whether a stop was requested (polled by the training loop once per step).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Withdraws a stop request (tests; a long-lived process starting new work).
pub fn clear() {
    STOP.store(false, Ordering::SeqCst);
}

/// Marks checkpointable work as running while it lives.
#[derive(Debug)]
pub struct Checkpointable(());

impl Checkpointable {
    /// Registers the current work as able to stop cleanly.
    pub fn begin() -> Self {
        CHECKPOINTABLE.fetch_add(1, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for Checkpointable {
    fn drop(&mut self) {
        CHECKPOINTABLE.fetch_sub(1, Ordering::SeqCst);
    }
}
