//! Keeping criusd's resident memory near what it uses (glibc's allocator keeps what it frees).
//!
//! glibc gives every thread that allocates while the others hold the lock an arena of its own, up to 8 per core,
//! and keeps freed memory in it for reuse. criusd's work comes in bursts on the blocking pool (a pod start, a
//! pull, an unpack), so after a burst of 100 pod starts it held several MiB in arenas it no longer used. Two
//! arenas serve its two async workers; what is free is given back to the kernel every few seconds.

use std::time::Duration;

/// How often free memory is given back.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Caps glibc's arenas at two. To be called before any other thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called while criusd has a single thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Gives the allocator's free pages back to the kernel (every arena; the pages stay mapped, reading as zero).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the arenas' locks itself; it only returns free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Trims every [`TRIM_EVERY`], for as long as the runtime runs. A trim with nothing to give back costs a walk of
/// the free lists (microseconds).
pub fn spawn_trimmer() {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(TRIM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            trim();
        }
    });
}
