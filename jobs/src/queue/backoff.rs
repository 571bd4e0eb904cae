//! Retry delays: capped exponential backoff with "equal jitter" (AWS Architecture Blog, Marc
//! Brooker, "Exponential Backoff And Jitter", 2015): half the capped exponential delay is kept,
//! the other half is scaled by a jitter fraction in [0, 1), so retries of many failed stages spread
//! out instead of returning together.
//!
//! The jitter fraction is a hash of (job, stage, failure count), not a random draw: the same
//! history gives the same delay, which keeps tests exact and runs reproducible.

use std::time::Duration;

/// How failed stage attempts are retried.
///
/// Two budgets: the stage's own failures (a crash, a bad GPU, an error in the stage) count
/// against the job's `max_attempts` and back off from `base` up to `max`; infrastructure faults
/// (a worker's lease lost, the object store or the database unreachable) count against
/// `max_infra_faults` and back off from `infra_base` up to `infra_max`, so that an outage of
/// several minutes costs no job while a stage that really fails is still dead-lettered soon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the first retry (before jitter).
    pub base: Duration,
    /// Largest delay (before jitter).
    pub max: Duration,
    /// Delay before the first retry after an infrastructure fault (before jitter).
    pub infra_base: Duration,
    /// Largest delay after an infrastructure fault (before jitter).
    pub infra_max: Duration,
    /// Infrastructure faults of one stage before the job is dead-lettered.
    pub max_infra_faults: u32,
}

impl Default for RetryPolicy {
    /// Own failures: 10 s, doubling, capped at 10 minutes. Infrastructure: 10 s doubling to
    /// 2 minutes, 12 faults: at least 5 + 10 + 20 + 40 + 7 × 60 = 495 s of waiting (jitter keeps
    /// at least half of each delay) before a job is given up, so a 5-minute outage costs none.
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(10),
            max: Duration::from_secs(600),
            infra_base: Duration::from_secs(10),
            infra_max: Duration::from_secs(120),
            max_infra_faults: 12,
        }
    }
}

impl RetryPolicy {
    /// The delay before retrying after the `failures`-th failure (1-based) of `stage` of `job_id`:
    /// `d = min(max, base · 2^(failures−1))`, then `d/2 + jitter · d/2` with `jitter ∈ [0, 1)`.
    /// `failures = 0` gives zero.
    pub fn delay(&self, job_id: &str, stage: &str, failures: u32) -> Duration {
        backoff(self.base, self.max, job_id, stage, failures)
    }

    /// The delay before retrying after the `faults`-th infrastructure fault (1-based): as
    /// [`RetryPolicy::delay`] with `infra_base` and `infra_max`.
    pub fn infra_delay(&self, job_id: &str, stage: &str, faults: u32) -> Duration {
        backoff(self.infra_base, self.infra_max, job_id, stage, faults)
    }

    /// The least total wait `max_infra_faults` infrastructure retries add up to (each delay keeps
    /// at least half its capped value).
    pub fn infra_horizon(&self) -> Duration {
        (1..self.max_infra_faults.max(1))
            .map(|n| {
                let exp = 2f64.powi((n - 1).min(62) as i32);
                (self.infra_base.as_secs_f64() * exp).min(self.infra_max.as_secs_f64()) / 2.0
            })
            .map(Duration::from_secs_f64)
            .sum()
    }
}

fn backoff(base: Duration, max: Duration, job_id: &str, stage: &str, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let exp = 2f64.powi(failures.saturating_sub(1).min(62) as i32);
    let capped = (base.as_secs_f64() * exp).min(max.as_secs_f64());
    let jitter = jitter_fraction(job_id, stage, failures);
    Duration::from_secs_f64(capped / 2.0 + jitter * capped / 2.0)
}

/// A fraction in [0, 1) from BLAKE3 of the attempt's identity.
fn jitter_fraction(job_id: &str, stage: &str, failures: u32) -> f64 {
    let mut h = blake3::Hasher::new();
    h.update(job_id.as_bytes());
    h.update(&[0]);
    h.update(stage.as_bytes());
    h.update(&failures.to_le_bytes());
    let bytes = h.finalize();
    let word = u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"));
    // 53 random bits → an exactly representable fraction below 1.
    (word >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_infrastructure_budget_outlasts_a_five_minute_outage() {
        let p = RetryPolicy::default();
        assert!(
            p.infra_horizon() >= Duration::from_secs(300),
            "{:?}",
            p.infra_horizon()
        );
        assert_eq!(
            p.infra_horizon(),
            Duration::from_secs(5 + 10 + 20 + 40 + 7 * 60)
        );
    }

    #[test]
    fn delays_double_up_to_the_cap_and_stay_within_the_jitter_band() {
        let p = RetryPolicy {
            base: Duration::from_secs(10),
            max: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        assert_eq!(p.delay("j", "train", 0), Duration::ZERO);
        // Uncapped delay before jitter: 10, 20, 40, then the 60 s cap.
        for (failures, full) in [(1, 10.0), (2, 20.0), (3, 40.0), (4, 60.0), (30, 60.0)] {
            let d = p.delay("j", "train", failures).as_secs_f64();
            assert!(
                d >= full / 2.0 && d < full,
                "failure {failures}: {d} s outside [{}, {full})",
                full / 2.0
            );
        }
    }

    #[test]
    fn jitter_is_reproducible_and_differs_between_stages() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay("j1", "train", 2), p.delay("j1", "train", 2));
        let spread: std::collections::BTreeSet<u128> = (0..20)
            .map(|i| p.delay(&format!("job{i}"), "train", 3).as_millis())
            .collect();
        assert!(
            spread.len() >= 18,
            "jitter does not spread retries: {spread:?}"
        );
    }
}
