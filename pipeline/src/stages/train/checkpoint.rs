//! Training checkpoints: everything a run needs to carry on exactly where it stopped (the
//! parameters, their Adam moments and step counts, the density strategy's [`DensityState`] and
//! the loop's [`LoopState`], saved whole) in one file, written atomically (temporary name, then
//! rename), so a crash while writing leaves the previous checkpoint intact; and the
//! [`Checkpointer`], which decides when a run writes one, whether it resumes from one, and stops
//! the run when asked.
//!
//! The RNG is saved as its seed and the number of draws taken ([`super::rng::TrainRng`]), so a
//! resumed run draws exactly what the uninterrupted run would have, and a checkpoint can be taken
//! after any step.
//!
//! File layout (`train.ckpt`, little-endian): the 8-byte magic `KILNCKPT`; a `u32` format version
//! (2; version 1 kept the loop's state field by field and is not read: delete such a file);
//! a `u64` header length; the JSON [`Header`]; then the arrays: the five parameter groups, their
//! first moments, their second moments (`f32`, group order means `[N, 3]`, log_scales `[N, 3]`,
//! rotations `[N, 4]`, logit_opacities `[N]`, sh_coeffs `[N, K, 3]`); then, for the ADC strategy
//! only ([`DensityState::Adc`]), its statistics `grad_accum [N]` and `max_radius_px [N]` (`f32`)
//! and `visible_count [N]` (`u32`).

use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_kernels::cuda::train::HostTrainState;
use serde::{Deserialize, Serialize};

use super::STAGE;
use super::density::DensityStats;
use super::loop_state::LoopState;
use super::store::ParamStore;
use super::strategy::{DensityState, DensityStrategy};

/// File name of a training checkpoint.
pub const FILE_NAME: &str = "train.ckpt";
const MAGIC: &[u8; 8] = b"KILNCKPT";
const VERSION: u32 = 2;

/// The JSON header of a checkpoint file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The train stage's cache key: a checkpoint only resumes the configuration it came from.
    pub key: String,
    /// Splats N.
    pub n: usize,
    /// SH coefficients per channel K.
    pub k: usize,
    /// Adam steps per group.
    pub t: [u32; 5],
    /// The density strategy's state (its per-splat statistics follow the parameters as arrays).
    pub density: DensityState,
    /// The loop's state.
    pub state: LoopState,
}

/// A whole checkpoint in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Cache key of the run (see [`Header::key`]).
    pub key: String,
    /// Parameters and moments.
    pub params: HostTrainState,
    /// The density strategy's state.
    pub density: DensityState,
    /// The loop's state.
    pub state: LoopState,
}

/// Where a run keeps its checkpoint, what identifies it, how often it is written and when the
/// run should stop; see [`Checkpointer::after_step`] and [`Checkpointer::resume`].
#[derive(Debug, Clone)]
pub struct Checkpointer {
    /// The checkpoint file (kept outside the stage's output folder, which is rebuilt per
    /// attempt).
    pub path: PathBuf,
    /// The stage's cache key: a checkpoint with another key is ignored (and later overwritten).
    pub key: String,
    /// Write one every this many steps ([`super::TrainParams::checkpoint_every`]); 0 = only when
    /// stopped.
    pub every: usize,
    /// Polled after every step; `true` writes a checkpoint and stops the run with
    /// [`crate::Error::Interrupted`]. Job runs pass [`crate::interrupt::stop_requested`].
    pub stop: fn() -> bool,
}

impl Checkpointer {
    /// Starts a checkpointed run: removes temporaries an interrupted write left beside
    /// [`Checkpointer::path`], and returns the guard under which SIGINT/SIGTERM ask the run to
    /// stop (through [`Checkpointer::stop`]) instead of killing it. Hold it until the run's
    /// outputs are written.
    pub fn arm(&self) -> crate::interrupt::Checkpointable {
        let guard = crate::interrupt::Checkpointable::begin();
        remove_stale_temporaries(&self.path);
        guard
    }

    /// The checkpoint to continue from: the file at [`Checkpointer::path`] when there is one,
    /// its key is [`Checkpointer::key`] and `fits` accepts it (the run's step count, SH size,
    /// views and strategy); `None` otherwise (a foreign or unfitting file is logged, ignored and
    /// later overwritten), or a file that is not a complete checkpoint of this format (a
    /// damaged file, or one an older Kiln wrote): it is discarded with a warning and the stage
    /// trains from the start, never a lasting failure.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for a checkpoint store that can fail.
    pub fn resume(
        &self,
        fits: impl FnOnce(&Checkpoint) -> bool,
    ) -> crate::Result<Option<Checkpoint>> {
        if !self.path.exists() {
            return Ok(None);
        }
        let c = match read(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(checkpoint = %self.path.display(), error = %e,
                    "train: discarding an unreadable checkpoint; training this stage from the start");
                return Ok(None);
            }
        };
        if c.key != self.key {
            tracing::warn!(checkpoint = %self.path.display(),
                "train: ignoring a checkpoint of another configuration (it will be overwritten)");
            return Ok(None);
        }
        if !fits(&c) {
            tracing::warn!(checkpoint = %self.path.display(), step = c.state.step,
                "train: ignoring a checkpoint that does not fit this run");
            return Ok(None);
        }
        tracing::info!(checkpoint = %self.path.display(), step = c.state.step,
            splats = c.params.len(), "train: resuming from checkpoint");
        Ok(Some(c))
    }

    /// After step `state.step` of `total`: writes a checkpoint of `state`, `store` and
    /// `strategy` when one is due (every [`Checkpointer::every`] steps) or [`Checkpointer::stop`]
    /// says to stop, except after the last step (the run is about to finish; a stop then lets it
    /// finish, and the job stops before its next stage).
    ///
    /// # Errors
    /// [`crate::Error::Interrupted`] (after writing) when asked to stop before the last step;
    /// [`crate::Error::Io`] / [`crate::Error::Format`] when the file cannot be written;
    /// [`crate::Error::Kernel`] when the device state cannot be read back.
    pub fn after_step(
        &self,
        state: &LoopState,
        total: usize,
        store: &ParamStore,
        strategy: &dyn DensityStrategy,
    ) -> crate::Result<()> {
        let step = state.step;
        let stop = (self.stop)();
        let due = self.every > 0 && step.is_multiple_of(self.every);
        if !(stop || due) || step >= total {
            return Ok(());
        }
        let c = Checkpoint {
            key: self.key.clone(),
            params: store.state()?,
            density: strategy.save(),
            state: state.clone(),
        };
        write(&self.path, &c)?;
        tracing::debug!(step, path = %self.path.display(), "train: checkpoint written");
        if stop {
            return Err(crate::Error::Interrupted {
                stage: STAGE,
                at: format!("after step {step}"),
                resume: format!(
                    "checkpoint written to {}; run the same job again to resume",
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    /// Deletes the checkpoint (best effort): a restart from another start must not resume the
    /// failed attempt's state.
    pub fn discard(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn group_lens(n: usize, k: usize) -> [usize; 5] {
    [3 * n, 3 * n, 4 * n, n, 3 * k * n]
}

/// The per-splat statistics a checkpoint stores as arrays: the ADC strategy's, none for MCMC.
fn adc_stats(density: &DensityState) -> Option<&DensityStats> {
    match density {
        DensityState::Adc { stats, .. } => Some(stats),
        DensityState::Mcmc => None,
    }
}

/// Writes `ckpt` to `path` atomically.
///
/// # Errors
/// [`crate::Error::Io`] / [`crate::Error::Format`] naming `path` when it cannot be written;
/// [`crate::Error::Param`] when the arrays' lengths disagree with N and K (a bug upstream).
pub fn write(path: &Path, ckpt: &Checkpoint) -> crate::Result<()> {
    let p = &ckpt.params;
    let (n, k) = (p.len(), p.k);
    let lens = group_lens(n, k);
    let stats = adc_stats(&ckpt.density);
    let consistent = (0..5).all(|i| {
        p.groups[i].len() == lens[i] && p.m[i].len() == lens[i] && p.v[i].len() == lens[i]
    }) && stats.is_none_or(|s| {
        s.grad_accum.len() == n && s.max_radius_px.len() == n && s.visible_count.len() == n
    });
    if !consistent {
        return Err(crate::Error::Param {
            stage: "train",
            field: "checkpoint".into(),
            expected: format!("arrays sized for N = {n}, K = {k}"),
            found: "arrays of other lengths".into(),
        });
    }
    let header = Header {
        key: ckpt.key.clone(),
        n,
        k,
        t: p.t,
        density: ckpt.density.clone(),
        state: ckpt.state.clone(),
    };
    let json = serde_json::to_vec(&header)
        .map_err(|e| crate::Error::io(path, std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic_with(path, |w| {
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(json.len() as u64).to_le_bytes())?;
        w.write_all(&json)?;
        for arrays in [&p.groups, &p.m, &p.v] {
            for a in arrays.iter() {
                w.write_all(bytemuck::cast_slice(a))?;
            }
        }
        if let Some(s) = stats {
            w.write_all(bytemuck::cast_slice(&s.grad_accum))?;
            w.write_all(bytemuck::cast_slice(&s.max_radius_px))?;
            w.write_all(bytemuck::cast_slice(&s.visible_count))?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Removes temporary files that an interrupted [`write`] left beside `path` (a process killed
/// while writing cannot remove its own). Best effort: failures are ignored.
pub fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Reads a checkpoint written by [`write`].
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be read; [`crate::Error::Input`] naming the file and
/// the part that is wrong (magic, version, header, array sizes) when it is not a complete
/// checkpoint of this format (delete it to start the stage afresh).
pub fn read(path: &Path) -> crate::Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|e| crate::Error::io(path, e))?;
    let bad = |field: &str, problem: String| crate::Error::Input {
        path: path.to_path_buf(),
        field: field.into(),
        problem: format!("{problem}; delete the file to train this stage from the start"),
    };
    if bytes.len() < 20 || &bytes[..8] != MAGIC {
        return Err(bad("magic", "not a Kiln training checkpoint".into()));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    if version != VERSION {
        return Err(bad(
            "version",
            format!("format version {version}, this Kiln reads {VERSION}"),
        ));
    }
    let header_len = u64::from_le_bytes(bytes[12..20].try_into().unwrap_or_default()) as usize;
    let body = &bytes[20..];
    if header_len > body.len() {
        return Err(bad(
            "header",
            format!("header of {header_len} bytes, file truncated"),
        ));
    }
    let mut header: Header = serde_json::from_slice(&body[..header_len])
        .map_err(|e| bad("header", format!("unreadable JSON header: {e}")))?;
    let (n, k) = (header.n, header.k);
    if ![1, 4, 9, 16].contains(&k) {
        return Err(bad("header.k", format!("{k} is not 1, 4, 9 or 16")));
    }
    // Every splat takes more than 4 bytes of arrays: bounds `n` before any size arithmetic.
    if n > body.len() / 4 {
        return Err(bad(
            "header.n",
            format!("{n} splats cannot fit in a {} byte file", bytes.len()),
        ));
    }
    let lens = group_lens(n, k);
    // Three `[N]` arrays of statistics (two f32, one u32) for the ADC strategy.
    let stats_words = if adc_stats(&header.density).is_some() {
        3 * n
    } else {
        0
    };
    let expected = (3 * lens.iter().sum::<usize>())
        .checked_add(stats_words)
        .and_then(|w| w.checked_mul(4))
        .unwrap_or(usize::MAX);
    let data = &body[header_len..];
    if data.len() != expected {
        return Err(bad(
            "arrays",
            format!(
                "{} bytes of arrays, expected {expected} for N = {n}, K = {k} (truncated or \
                 written by another version)",
                data.len()
            ),
        ));
    }
    let mut at = 0usize;
    let mut f32s = |len: usize| -> Vec<f32> {
        let v = data[at..at + 4 * len]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        at += 4 * len;
        v
    };
    let groups = lens.map(&mut f32s);
    let m = lens.map(&mut f32s);
    let v = lens.map(&mut f32s);
    if let DensityState::Adc { stats, .. } = &mut header.density {
        let grad_accum = f32s(n);
        let max_radius_px = f32s(n);
        let visible_count = data[at..at + 4 * n]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        *stats = DensityStats {
            grad_accum,
            visible_count,
            max_radius_px,
        };
    }
    Ok(Checkpoint {
        key: header.key,
        params: HostTrainState {
            groups,
            m,
            v,
            t: header.t,
            k,
        },
        density: header.density,
        state: header.state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::train::StepTimings;
    use crate::stages::train::loop_state::Curves;
    use crate::stages::train::rng::TrainRng;
    use crate::stages::train::sampler::ViewSampler;

    fn sample() -> Checkpoint {
        let (n, k) = (3usize, 4usize);
        let mut rng = TrainRng::new(7);
        let mut sampler = ViewSampler::new(4);
        sampler.next(&mut rng);
        let rng = TrainRng::restore(7, rng.draws() + 12345);
        let lens = group_lens(n, k);
        let ramp = |len: usize, o: f32| (0..len).map(|i| i as f32 * 0.5 + o).collect::<Vec<_>>();
        Checkpoint {
            key: "abc123".into(),
            params: HostTrainState {
                groups: lens.map(|l| ramp(l, 1.0)),
                m: lens.map(|l| ramp(l, -2.0)),
                v: lens.map(|l| ramp(l, 0.25)),
                t: [5, 5, 5, 4, 5],
                k,
            },
            density: DensityState::Adc {
                stats: DensityStats {
                    grad_accum: vec![0.1, 0.2, 0.3],
                    visible_count: vec![1, 0, 7],
                    max_radius_px: vec![2.0, 0.0, 9.5],
                },
                opacity_reset_done: true,
            },
            state: LoopState {
                step: 42,
                sampler,
                timing_sum: StepTimings {
                    total: 12.0,
                    ..Default::default()
                },
                train_s: 3.5,
                curves: Curves {
                    loss: vec![(10, 0.5), (20, 0.25)],
                    splat_count: vec![(10, 3)],
                    psnr: vec![(20, 18.5)],
                    window: (0.75, 2),
                    last_loss: Some(0.2),
                },
                ..LoopState::new(rng, 4)
            },
        }
    }

    #[test]
    fn a_checkpoint_round_trips_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let c = sample();
        write(&path, &c).unwrap();
        assert_eq!(read(&path).unwrap(), c);
        // Rewriting replaces it in place (atomic rename, no leftovers).
        write(&path, &c).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        // A strategy without per-splat statistics (MCMC) stores no statistics arrays.
        let mcmc = Checkpoint {
            density: DensityState::Mcmc,
            ..c.clone()
        };
        write(&path, &mcmc).unwrap();
        assert_eq!(read(&path).unwrap(), mcmc);
    }

    #[test]
    fn temporaries_of_an_interrupted_write_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        for name in [
            ".train.ckpt.tmp-123",
            ".train.ckpt.tmp-9",
            "keep.txt",
            FILE_NAME,
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        remove_stale_temporaries(&path);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["keep.txt".to_string(), FILE_NAME.to_string()]);
    }

    #[test]
    fn truncated_or_foreign_files_are_clear_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        write(&path, &sample()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(
            e.contains(FILE_NAME) && e.contains("arrays") && e.contains("delete"),
            "{e}"
        );
        std::fs::write(&path, b"PLY not a checkpoint at all").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
        // A header claiming an absurd splat count is refused before any size arithmetic.
        let header_len = u64::from_le_bytes(bytes[12..20].try_into().unwrap()) as usize;
        let mut h: serde_json::Value = serde_json::from_slice(&bytes[20..20 + header_len]).unwrap();
        h["n"] = serde_json::json!(1u64 << 62);
        let json = serde_json::to_vec(&h).unwrap();
        let mut crafted = bytes[..12].to_vec();
        crafted.extend_from_slice(&(json.len() as u64).to_le_bytes());
        crafted.extend_from_slice(&json);
        crafted.extend_from_slice(&bytes[20 + header_len..]);
        std::fs::write(&path, &crafted).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("header.n"), "{e}");
        let mut wrong = bytes.clone();
        wrong[8] = 9;
        std::fs::write(&path, &wrong).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("version 9"), "{e}");
    }

    #[test]
    fn an_unreadable_or_foreign_checkpoint_is_discarded_and_training_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let c = sample();
        let checkpointer = Checkpointer {
            path: path.clone(),
            key: c.key.clone(),
            every: 0,
            stop: || false,
        };
        write(&path, &c).unwrap();
        assert!(checkpointer.resume(|_| true).unwrap().is_some());
        // Garbage, an older format and a truncated file: no error, no resume.
        let bytes = std::fs::read(&path).unwrap();
        let mut old = bytes.clone();
        old[8] = 1;
        for damaged in [b"garbage".to_vec(), old, bytes[..bytes.len() / 2].to_vec()] {
            std::fs::write(&path, &damaged).unwrap();
            assert!(checkpointer.resume(|_| true).unwrap().is_none());
        }
        // Another key: ignored before its RNG position is replayed, however far it claims.
        let mut far = sample();
        far.key = "another".into();
        far.state.rng = TrainRng::restore(7, u64::MAX);
        write(&path, &far).unwrap();
        assert!(checkpointer.resume(|_| true).unwrap().is_none());
    }
}
