//! Busy GPU-seconds from NVML (the NVIDIA Management Library, through `nvml-wrapper`): a background
//! thread samples one device's utilisation while a stage holds it.
//!
//! Allocated GPU-seconds (GPUs held × wall time, [`crate::meter`]) are what a cloud bills; busy
//! GPU-seconds say how much of that the stage actually used: Σ utilisation × sampling interval, with
//! NVML's `nvmlDeviceGetUtilizationRates().gpu` (percent of the last sample period during which a
//! kernel was running). Without NVML (no driver, a CPU machine) the monitor is simply absent and the
//! ledger records no busy figure — never a made-up zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Sampling interval. NVML's utilisation counter covers 1/6 s to 1 s depending on the GPU, so
/// sampling faster adds nothing.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// What a finished monitor measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuBusy {
    /// Σ utilisation × interval, seconds.
    pub busy_s: f64,
    /// Highest device memory in use seen (all processes), bytes.
    pub peak_memory_used_bytes: u64,
    /// Samples taken.
    pub samples: u64,
}

/// A running sampler of one device.
#[derive(Debug)]
pub struct GpuMonitor {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<GpuBusy>,
}

impl GpuMonitor {
    /// Starts sampling device `ordinal`; `None` (with a debug log) when NVML cannot be loaded or the
    /// device cannot be opened.
    pub fn start(ordinal: u32) -> Option<Self> {
        let nvml = match nvml_wrapper::Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "NVML unavailable: no busy GPU-seconds");
                return None;
            }
        };
        // Probe once here so a failure is reported now, not silently inside the thread.
        if let Err(e) = nvml.device_by_index(ordinal) {
            tracing::debug!(error = %e, ordinal, "NVML cannot open the device: no busy GPU-seconds");
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut out = GpuBusy {
                busy_s: 0.0,
                peak_memory_used_bytes: 0,
                samples: 0,
            };
            let Ok(device) = nvml.device_by_index(ordinal) else {
                return out;
            };
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_INTERVAL);
                let now = Instant::now();
                let dt = now.duration_since(last).as_secs_f64();
                last = now;
                if let Ok(u) = device.utilization_rates() {
                    out.busy_s += f64::from(u.gpu) / 100.0 * dt;
                    out.samples += 1;
                }
                if let Ok(m) = device.memory_info() {
                    out.peak_memory_used_bytes = out.peak_memory_used_bytes.max(m.used);
                }
            }
            out
        });
        Some(Self { stop, handle })
    }

    /// Stops sampling and returns the totals.
    pub fn finish(self) -> Option<GpuBusy> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().ok()
    }
}
