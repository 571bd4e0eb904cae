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
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuBusy {
    /// Σ utilisation × interval, seconds.
    pub busy_s: f64,
    /// Highest device memory in use seen (all processes), bytes.
    pub peak_memory_used_bytes: u64,
    /// Samples taken.
    pub samples: u64,
}

/// One reading of a device: `gpu_percent` is NVML's `utilization.gpu` (0–100, percent of the
/// last sample period during which a kernel ran), `memory_used_bytes` the device memory in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilisationSample {
    pub gpu_percent: u32,
    pub memory_used_bytes: u64,
}

/// Where utilisation samples come from: NVML on a real GPU, a scripted list in tests.
///
/// `sample` returns `None` when the reading failed (that interval is then not counted as busy and
/// not counted as a sample). Called from the monitor's own thread, hence `Send`.
pub trait UtilisationSource: Send + 'static {
    fn sample(&mut self) -> Option<UtilisationSample>;
}

/// Σ utilisation × interval, fed one sample at a time.
///
/// Each sample covers the `dt_s` seconds since the previous one (the monitor sleeps, then reads, so
/// the reading describes the interval just ended). Units: seconds in, busy GPU-seconds out.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BusyIntegrator {
    totals: GpuBusy,
}

impl BusyIntegrator {
    /// Add one sample covering `dt_s` seconds (`None`: a failed reading, not counted).
    pub fn add(&mut self, dt_s: f64, sample: Option<UtilisationSample>) {
        let Some(s) = sample else { return };
        // NVML never reports above 100 %; clamp so a bad driver cannot make busy exceed allocated.
        self.totals.busy_s += f64::from(s.gpu_percent.min(100)) / 100.0 * dt_s.max(0.0);
        self.totals.samples += 1;
        self.totals.peak_memory_used_bytes =
            self.totals.peak_memory_used_bytes.max(s.memory_used_bytes);
    }

    /// The totals so far.
    pub fn totals(&self) -> GpuBusy {
        self.totals
    }
}

/// NVML readings of one device.
struct NvmlSource {
    nvml: nvml_wrapper::Nvml,
    ordinal: u32,
}

impl NvmlSource {
    /// Load NVML and check that device `ordinal` opens; `None` (with a debug log) otherwise.
    fn open(ordinal: u32) -> Option<Self> {
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
        Some(Self { nvml, ordinal })
    }
}

impl UtilisationSource for NvmlSource {
    fn sample(&mut self) -> Option<UtilisationSample> {
        // A device handle is cheap (an index lookup); taking it per sample avoids a
        // self-referential struct.
        let device = self.nvml.device_by_index(self.ordinal).ok()?;
        let u = device.utilization_rates().ok()?;
        Some(UtilisationSample {
            gpu_percent: u.gpu,
            memory_used_bytes: device.memory_info().map(|m| m.used).unwrap_or(0),
        })
    }
}

/// A running sampler of one device.
#[derive(Debug)]
pub struct GpuMonitor {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<GpuBusy>,
}

impl GpuMonitor {
    /// Starts sampling device `ordinal` through NVML every [`SAMPLE_INTERVAL`]; `None` (with a
    /// debug log) when NVML cannot be loaded or the device cannot be opened.
    pub fn start(ordinal: u32) -> Option<Self> {
        NvmlSource::open(ordinal).map(|src| Self::start_with(src, SAMPLE_INTERVAL))
    }

    /// Starts sampling `source` every `interval` on a background thread (tests pass a scripted
    /// source and a short interval).
    pub fn start_with(mut source: impl UtilisationSource, interval: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut acc = BusyIntegrator::default();
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(interval);
                let now = Instant::now();
                acc.add(now.duration_since(last).as_secs_f64(), source.sample());
                last = now;
            }
            acc.totals()
        });
        Self { stop, handle }
    }

    /// Stops sampling and returns the totals (`None` only if the sampling thread panicked).
    pub fn finish(self) -> Option<GpuBusy> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted device: returns the listed readings in order, then 0 %.
    struct Scripted(std::vec::IntoIter<Option<u32>>);

    impl UtilisationSource for Scripted {
        fn sample(&mut self) -> Option<UtilisationSample> {
            let pct = self.0.next().unwrap_or(Some(0))?;
            Some(UtilisationSample {
                gpu_percent: pct,
                memory_used_bytes: u64::from(pct) << 20,
            })
        }
    }

    #[test]
    fn busy_seconds_are_utilisation_times_interval_summed() {
        // Hand computation: 100 % for 0.5 s + 50 % for 0.5 s + 0 % for 1.0 s + 25 % for 2.0 s
        // + a failed reading for 0.5 s (not counted) = 0.5 + 0.25 + 0 + 0.5 = 1.25 GPU-s.
        let mut src = Scripted(vec![Some(100), Some(50), Some(0), Some(25), None].into_iter());
        let mut acc = BusyIntegrator::default();
        for dt in [0.5, 0.5, 1.0, 2.0, 0.5] {
            acc.add(dt, src.sample());
        }
        let t = acc.totals();
        assert!((t.busy_s - 1.25).abs() < 1e-12, "{t:?}");
        assert_eq!(t.samples, 4);
        assert_eq!(t.peak_memory_used_bytes, 100 << 20);
    }

    #[test]
    fn readings_above_100_percent_are_clamped() {
        let mut acc = BusyIntegrator::default();
        acc.add(
            2.0,
            Some(UtilisationSample {
                gpu_percent: 250,
                memory_used_bytes: 0,
            }),
        );
        assert_eq!(acc.totals().busy_s, 2.0);
    }

    #[test]
    fn monitor_thread_integrates_a_fake_source_over_its_lifetime() {
        // A device busy 100 % all the time: busy seconds ≈ the time the monitor ran, measured by
        // the sampling thread's own clock, so the bound is on sample count, not on timing.
        struct Always;
        impl UtilisationSource for Always {
            fn sample(&mut self) -> Option<UtilisationSample> {
                Some(UtilisationSample {
                    gpu_percent: 100,
                    memory_used_bytes: 7,
                })
            }
        }
        let started = Instant::now();
        let m = GpuMonitor::start_with(Always, Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(40));
        let t = m.finish().unwrap();
        let ran = started.elapsed().as_secs_f64();
        assert!(t.samples >= 1, "{t:?}");
        // Every counted interval was 100 % busy and lay inside the monitor's lifetime.
        assert!(t.busy_s > 0.0 && t.busy_s <= ran, "{t:?} in {ran} s");
        assert_eq!(t.peak_memory_used_bytes, 7);
    }
}
