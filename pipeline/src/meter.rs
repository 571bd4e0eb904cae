//! Metering of one stage attempt: wall seconds, process CPU seconds, GPU-seconds, bytes in/out.
//!
//! CPU seconds are the process's user + system time plus that of its finished child processes
//! (`getrusage(RUSAGE_SELF)` + `getrusage(RUSAGE_CHILDREN)`) over the attempt, so external engines a
//! stage runs (COLMAP, ffmpeg) are counted; stages run one at a time per process, so the
//! difference belongs to the stage. GPU-seconds are
//! allocated GPU time (GPUs held × wall seconds, the Kubecost/Slurm TRES definition); 0 on CPU.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Figures of one finished stage attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageUsage {
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// User + system CPU seconds of the process and the child processes it waited for.
    pub cpu_s: f64,
    /// Allocated GPU-seconds (GPUs held × wall seconds); 0 on CPU.
    pub gpu_s: f64,
    /// Bytes read from object storage or stage inputs.
    pub bytes_read: u64,
    /// Bytes written to stage outputs or object storage.
    pub bytes_written: u64,
    /// Busy GPU-seconds: Σ NVML utilisation × time while the stage held the GPU; `None` when not
    /// measured (CPU stages, or no NVML).
    #[serde(default)]
    pub gpu_busy_s: Option<f64>,
    /// The device's name, e.g. `NVIDIA H200` (`None` on the CPU).
    #[serde(default)]
    pub device_name: Option<String>,
    /// The device's total memory, bytes (`None` on the CPU).
    #[serde(default)]
    pub device_memory_bytes: Option<u64>,
    /// The slot, when the attempt held part of a GPU (a MIG profile `H100:1g.10gb`, a fraction
    /// `0.5`); `None` for a whole GPU or the CPU. See [`StageUsage::on_gpu_slot`].
    #[serde(default)]
    pub gpu_slot: Option<String>,
}

impl StageUsage {
    /// This attempt as charged on a slot that is `share` (0 < share ≤ 1) of one GPU: allocated and
    /// busy GPU-seconds become GPU-equivalent seconds (× `share`), and `slot` is recorded.
    ///
    /// Why scale here and not in the price: every later sum (GPU-hours, idle time, budgets) then
    /// counts a 1g.10gb slice of an H100 held for an hour as 1/7 GPU-hour, so whole and partial
    /// GPUs add up in one unit. Busy seconds are scaled too: NVML reports a vGPU's utilisation
    /// relative to the partition (and none at all for MIG instances, which stay `None`).
    /// A `share` outside (0, 1] is clamped into it.
    pub fn on_gpu_slot(mut self, slot: &str, share: f64) -> StageUsage {
        let share = if share.is_finite() {
            share.clamp(f64::MIN_POSITIVE, 1.0)
        } else {
            1.0
        };
        self.gpu_s *= share;
        self.gpu_busy_s = self.gpu_busy_s.map(|b| b * share);
        self.gpu_slot = Some(slot.to_string());
        self
    }
}

/// A running meter; [`Meter::finish`] turns it into [`StageUsage`].
#[derive(Debug)]
pub struct Meter {
    started: Instant,
    cpu_at_start: f64,
    gpus: u32,
    device: String,
    /// When the GPUs were acquired (GPU-seconds count from here).
    gpus_since: Instant,
    device_name: Option<String>,
    device_memory_bytes: Option<u64>,
    monitor: Option<crate::gpu_monitor::GpuMonitor>,
}

impl Meter {
    /// Start metering on `device` holding `gpus` GPUs (0 on CPU).
    pub fn start(device: &str, gpus: u32) -> Self {
        Self {
            started: Instant::now(),
            cpu_at_start: process_cpu_s(),
            gpus,
            device: device.into(),
            gpus_since: Instant::now(),
            device_name: None,
            device_memory_bytes: None,
            monitor: None,
        }
    }

    /// Record that the stage now holds `gpus` GPUs of `device` (e.g. after opening the CUDA
    /// renderer): the usage reports this device, and GPU-seconds count from now.
    ///
    /// `gpu`: the CUDA ordinal, name and total memory (bytes) of the held GPU; its utilisation is
    /// then sampled through NVML for [`StageUsage::gpu_busy_s`] (when NVML loads).
    pub fn hold(&mut self, device: &str, gpus: u32, gpu: Option<(u32, String, u64)>) {
        self.device = device.into();
        self.gpus = gpus;
        self.gpus_since = Instant::now();
        if let Some((ordinal, name, memory)) = gpu {
            self.device_name = Some(name);
            self.device_memory_bytes = Some(memory);
            self.monitor = crate::gpu_monitor::GpuMonitor::start(ordinal);
        }
    }

    /// Stop and report, with the byte counts the stage measured.
    pub fn finish(self, bytes_read: u64, bytes_written: u64) -> StageUsage {
        let wall_s = self.started.elapsed().as_secs_f64();
        StageUsage {
            device: self.device,
            wall_s,
            cpu_s: (process_cpu_s() - self.cpu_at_start).max(0.0),
            gpu_s: self.gpus_since.elapsed().as_secs_f64() * f64::from(self.gpus),
            bytes_read,
            bytes_written,
            gpu_busy_s: self.monitor.and_then(|m| m.finish()).map(|b| b.busy_s),
            device_name: self.device_name,
            device_memory_bytes: self.device_memory_bytes,
            gpu_slot: None,
        }
    }
}

/// User + system CPU seconds of this process and of its terminated, waited-for children so far.
pub fn process_cpu_s() -> f64 {
    rusage_cpu_s(libc::RUSAGE_SELF) + rusage_cpu_s(libc::RUSAGE_CHILDREN)
}

/// User + system CPU seconds `getrusage(who)` reports; 0 on failure.
fn rusage_cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass; RUSAGE_SELF and RUSAGE_CHILDREN
    // are always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Total size in bytes of the regular files under `dir` (0 when it does not exist).
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// Peak resident set size of this process (`VmHWM` in /proc/self/status), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_loop_is_counted_as_cpu_time_and_no_gpu_time_on_cpu() {
        let m = Meter::start("cpu", 0);
        // Spin until this thread has used 50 ms of CPU by its own clock (not by wall time, which
        // a loaded machine stretches without giving the thread the CPU).
        let thread_cpu_s = || {
            // SAFETY: clock_gettime writes into the timespec we pass.
            let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        };
        let start = thread_cpu_s();
        let mut x = 0u64;
        while thread_cpu_s() - start < 0.05 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let u = m.finish(1, 2);
        assert!(u.wall_s >= 0.05);
        assert!(u.cpu_s >= 0.05, "cpu_s {}", u.cpu_s);
        assert_eq!(u.gpu_s, 0.0);
        assert_eq!((u.bytes_read, u.bytes_written), (1, 2));
    }

    #[test]
    fn a_child_process_cpu_time_is_counted() {
        let m = Meter::start("cpu", 0);
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        let u = m.finish(0, 0);
        assert!(u.cpu_s >= 0.05, "child CPU not counted: {}", u.cpu_s);
    }

    #[test]
    fn gpu_seconds_are_gpus_held_times_wall() {
        let m = Meter::start("cuda:0", 2);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let u = m.finish(0, 0);
        assert!((u.gpu_s - 2.0 * u.wall_s).abs() < 1e-4, "{u:?}");
        assert_eq!(u.gpu_busy_s, None);
    }

    #[test]
    fn a_half_gpu_slot_charges_half_the_gpu_seconds() {
        // 120 s held on a slot that is half a GPU, 90 busy slot-seconds measured: 60 allocated and
        // 45 busy GPU-equivalent seconds; wall and CPU time are the slot's own.
        let u = StageUsage {
            device: "cuda:0".into(),
            wall_s: 120.0,
            cpu_s: 30.0,
            gpu_s: 120.0,
            gpu_busy_s: Some(90.0),
            ..Default::default()
        }
        .on_gpu_slot("0.5", 0.5);
        assert_eq!((u.wall_s, u.cpu_s, u.gpu_s), (120.0, 30.0, 60.0));
        assert_eq!(u.gpu_busy_s, Some(45.0));
        assert_eq!(u.gpu_slot.as_deref(), Some("0.5"));
    }

    #[test]
    fn gpu_seconds_count_from_when_the_gpu_was_acquired() {
        let mut m = Meter::start("cpu", 0);
        std::thread::sleep(std::time::Duration::from_millis(60));
        // A CUDA ordinal no machine has: NVML (present or not) gives no monitor, never a panic.
        m.hold("cuda:0", 1, Some((999, "test GPU".into(), 1 << 30)));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let u = m.finish(0, 0);
        assert_eq!(u.device, "cuda:0");
        assert!(
            u.wall_s >= 0.08 && u.gpu_s >= 0.02 && u.gpu_s < u.wall_s - 0.05,
            "{u:?}"
        );
        assert_eq!(u.device_name.as_deref(), Some("test GPU"));
        assert_eq!(u.device_memory_bytes, Some(1 << 30));
        assert_eq!(u.gpu_busy_s, None);
    }
}
