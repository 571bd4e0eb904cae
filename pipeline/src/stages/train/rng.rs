//! The trainer's random number generator: `SmallRng` (Xoshiro256++ on 64-bit targets) seeded with
//! [`super::TrainParams::seed`], plus a count of the draws taken from it. `SmallRng` cannot be
//! serialised, so a [`TrainRng`] serialises as its seed and draw count (`{"seed", "draws"}`) and
//! replays that many draws from the seed before its first output after deserialising: the
//! resumed run continues the very stream an uninterrupted run would use. The replay waits for
//! that first output, so a checkpoint that is refused (another key, not fitting the run) costs
//! nothing, whatever draw count it claims.
//!
//! Exact because every `SmallRng` output advances its state by one step per `next_u32` or
//! `next_u64`, and `fill_bytes` takes one step per started 8 bytes (rand_core's
//! `fill_bytes_via_next`, which Xoshiro256++ uses).

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// See the module docs. Two streams are equal when they have the same seed and draw count (the
/// generator state follows from them).
#[derive(Debug, Clone)]
pub struct TrainRng {
    inner: SmallRng,
    seed: u64,
    draws: u64,
    /// Draws of `inner` still to replay before its next output (a deserialised stream).
    behind: u64,
}

/// The serialised form of a [`TrainRng`]: where in which stream it is.
#[derive(Serialize, Deserialize)]
struct Position {
    seed: u64,
    draws: u64,
}

impl TrainRng {
    /// A fresh stream for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: SmallRng::seed_from_u64(seed),
            seed,
            draws: 0,
            behind: 0,
        }
    }

    /// The stream for `seed` after `draws` draws (a checkpoint's [`TrainRng::draws`]); the
    /// draws are replayed before its first output.
    pub fn restore(seed: u64, draws: u64) -> Self {
        Self {
            inner: SmallRng::seed_from_u64(seed),
            seed,
            draws,
            behind: draws,
        }
    }

    /// Replay the draws a restored stream is behind by.
    fn catch_up(&mut self) {
        for _ in 0..std::mem::take(&mut self.behind) {
            self.inner.next_u64();
        }
    }

    /// The seed of the stream.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Draws taken so far (state steps of the underlying generator).
    pub fn draws(&self) -> u64 {
        self.draws
    }
}

impl PartialEq for TrainRng {
    fn eq(&self, other: &Self) -> bool {
        (self.seed, self.draws) == (other.seed, other.draws)
    }
}

impl Serialize for TrainRng {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Position {
            seed: self.seed,
            draws: self.draws,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TrainRng {
    /// The saved position; its draws are replayed before the first output ([`TrainRng::restore`]).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let p = Position::deserialize(deserializer)?;
        Ok(Self::restore(p.seed, p.draws))
    }
}

impl RngCore for TrainRng {
    fn next_u32(&mut self) -> u32 {
        self.catch_up();
        self.draws += 1;
        self.inner.next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.catch_up();
        self.draws += 1;
        self.inner.next_u64()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.catch_up();
        self.draws += dst.len().div_ceil(8) as u64;
        self.inner.fill_bytes(dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use rand::seq::SliceRandom;
    use rand_distr::StandardNormal;

    /// The same mix of draws the trainer makes (shuffles, normal samples, ranges, bytes).
    fn draw_mix(r: &mut impl Rng, rounds: usize) -> Vec<u64> {
        let mut out = Vec::new();
        for i in 0..rounds {
            let mut v: Vec<usize> = (0..7 + i % 5).collect();
            v.shuffle(r);
            out.extend(v.iter().map(|&x| x as u64));
            let z: f32 = r.sample(StandardNormal);
            out.push(z.to_bits() as u64);
            out.push(r.random_range(0..1000u64));
            let mut b = [0u8; 13];
            r.fill_bytes(&mut b);
            out.push(u64::from(b[12]));
        }
        out
    }

    #[test]
    fn a_restored_or_deserialised_stream_continues_exactly_where_the_counted_one_was() {
        let mut a = TrainRng::new(42);
        let head = draw_mix(&mut a, 50);
        let mut b = TrainRng::restore(42, a.draws());
        let mut c: TrainRng = serde_json::from_slice(&serde_json::to_vec(&a).unwrap()).unwrap();
        assert_eq!((c.seed(), c.draws()), (42, a.draws()));
        assert_eq!(draw_mix(&mut c, 50), draw_mix(&mut b.clone(), 50));
        assert_eq!(draw_mix(&mut a, 50), draw_mix(&mut b, 50));
        assert!(!head.is_empty());
        // And the stream is SmallRng's own: counting changes nothing.
        let mut plain = SmallRng::seed_from_u64(7);
        let mut counted = TrainRng::new(7);
        assert_eq!(draw_mix(&mut plain, 30), draw_mix(&mut counted, 30));
    }
}
