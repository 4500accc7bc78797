//! What the chaos suites (chaos, chaos_paths, vm_chaos_paths) share: the seed (printed; `CRIUS_CHAOS_SEED`
//! replays a run), a small seeded generator, and lines printed past the test harness's capture.

use std::io::Write;

/// A small seeded generator (xorshift64*): the same seed, the same run of choices.
pub struct Rng(u64);

impl Rng {
    /// A generator started at `seed` (0 is taken as 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Printed past the test harness's capture, so CI's log shows it.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "chaos: {line}");
}

/// The run's seed: `CRIUS_CHAOS_SEED` if set, else the clock's nanoseconds; printed with how to replay it.
pub fn seed(case: &str) -> u64 {
    let seed = std::env::var("CRIUS_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    say(&format!(
        "{case}: seed {seed} (CRIUS_CHAOS_SEED={seed} replays the choices)"
    ));
    seed
}
