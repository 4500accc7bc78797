//! No lost stop signal. The kernel drops a signal sent to PID 1 of a PID namespace whose disposition for it is
//! still the default: a container stopped right after it started, before its program installed its SIGTERM
//! handler, would sit out the whole grace period. So when a Kill's signal reaches a container's init that is
//! PID 1 of its namespace and neither catches nor ignores the signal, the shim keeps re-sending it: every
//! [`EVERY`] it reads `SigCgt`/`SigIgn` in `/proc/PID/status` (on the reactor's timers: no thread waits), sends
//! again while the signal is neither, and once it is caught sends it one last time and stops (a handler
//! installed after the previous send missed it; one installed between the read and that send gets it twice,
//! a window of microseconds). It stops without sending when the signal is ignored (the program's choice), or
//! when the process is gone. An init that shares a PID namespace (the host's, or the pod's) is not watched:
//! the kernel does not drop its signals.
//!
//! And a Kill that the runtime refuses because the container just stopped (its init died, and the reaper has
//! not yet reaped it) is [`has_ended`]'s case: the process is finished, which is what a stop wanted.

use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::Tasks;

/// How often a dropped signal is sent again.
pub(crate) const EVERY: Duration = Duration::from_millis(100);

/// What a process does with one signal, from its `/proc/PID/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// The default action (dropped for a namespace's PID 1).
    Default,
    /// A handler catches it.
    Caught,
    /// Ignored.
    Ignored,
}

/// The mask line `name` (hex) of a status file.
fn mask(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(name))?;
    u64::from_str_radix(line.trim_start_matches(':').trim(), 16).ok()
}

/// What the process whose status this is does with `signal`; None if the status says nothing.
pub(crate) fn disposition(status: &str, signal: i32) -> Option<Disposition> {
    let bit = 1u64.checked_shl(u32::try_from(signal - 1).ok()?)?;
    if mask(status, "SigIgn")? & bit != 0 {
        Some(Disposition::Ignored)
    } else if mask(status, "SigCgt")? & bit != 0 {
        Some(Disposition::Caught)
    } else {
        Some(Disposition::Default)
    }
}

/// Whether the process is PID 1 of a PID namespace below the one reading (its `NSpid` line ends in 1).
pub(crate) fn namespace_init(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|ids| ids.split_whitespace().collect::<Vec<_>>())
        .is_some_and(|ids| ids.len() > 1 && ids.last() == Some(&"1"))
}

fn status(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// Whether process `pid` has ended: gone, or dead and not yet reaped (a zombie).
pub(crate) fn has_ended(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    status(pid).is_none_or(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|st| matches!(st.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

/// Before a Kill of `pid` with `signal`: the signal to watch, when the kernel would drop it (a namespace's
/// PID 1 with the default action); None otherwise.
pub(crate) fn needs_watch(pid: u32, signal: u32) -> Option<Signal> {
    let sig = Signal::try_from(i32::try_from(signal).ok()?).ok()?;
    if pid == 0 || matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
        return None;
    }
    let s = status(pid)?;
    (namespace_init(&s) && disposition(&s, sig as i32)? == Disposition::Default).then_some(sig)
}

impl Tasks {
    /// After a Kill that [`needs_watch`] chose: re-sends `signal` to container `id`'s init `pid` until it
    /// is caught, ignored or gone.
    pub(super) fn redeliver(&self, id: &str, pid: u32, signal: Signal) {
        let me = self.clone();
        let owned = id.to_string();
        let armed = self.inner.reactor.after(EVERY, move |_| {
            if me.resend(&owned, pid, signal) {
                me.redeliver(&owned, pid, signal);
            }
        });
        if let Err(e) = armed {
            eprintln!(
                "containerd-shim-crius-v2: container {id:?}: cannot watch a stop signal the kernel may drop: {e}"
            );
        }
    }

    /// One look: sends `signal` again if it is not handled yet, or a last time if it just became caught.
    /// Whether to look again.
    fn resend(&self, id: &str, pid: u32, signal: Signal) -> bool {
        // Under the table's lock: the exit, recorded under it, has not come, so `pid` is not free for reuse.
        self.with(id, |c| {
            let p = c.process(id, "")?;
            if p.pid != pid || p.life.exit().is_some() {
                return Ok(false);
            }
            let again = match status(pid).and_then(|s| disposition(&s, signal as i32)) {
                None | Some(Disposition::Ignored) => return Ok(false),
                Some(Disposition::Default) => true,
                Some(Disposition::Caught) => false,
            };
            let sent = nix::sys::signal::kill(Pid::from_raw(pid as i32), signal).is_ok();
            Ok(sent && again)
        })
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_or_gone_process_has_ended_and_a_living_one_has_not() {
        // Other tests of this binary reap any child (the shim's reaper), so whether `true` is seen as a zombie
        // or as gone depends on them: both are "ended". Nothing here waits for a child itself.
        let living = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let dying = std::process::Command::new("true").spawn().unwrap();
        assert!(!has_ended(living.id()));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !has_ended(dying.id()) {
            assert!(std::time::Instant::now() < deadline, "`true` never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!has_ended(0));
        let _ = nix::sys::signal::kill(Pid::from_raw(living.id() as i32), Signal::SIGKILL);
        // Reaped by whoever reaps in this binary, or left to the process's end: nothing to wait for here.
        drop((living, dying));
    }

    const STATUS: &str = "Name:\tsh\nNSpid:\t4242\t1\nSigPnd:\t0000000000000000\n\
        SigBlk:\t0000000000000000\nSigIgn:\t0000000000000004\nSigCgt:\t0000000000004002\n";

    #[test]
    fn the_masks_say_caught_ignored_or_default_per_signal() {
        assert_eq!(disposition(STATUS, 15), Some(Disposition::Caught));
        assert_eq!(disposition(STATUS, 2), Some(Disposition::Caught));
        assert_eq!(disposition(STATUS, 3), Some(Disposition::Ignored));
        assert_eq!(disposition(STATUS, 10), Some(Disposition::Default));
        assert_eq!(disposition(STATUS, 64), Some(Disposition::Default));
        assert_eq!(disposition("Name:\tx\n", 15), None);
        assert_eq!(disposition(STATUS, 0), None);
    }

    #[test]
    fn only_pid_1_of_a_namespace_below_is_an_init() {
        assert!(namespace_init(STATUS));
        assert!(!namespace_init("NSpid:\t4242\n"), "the reader's own namespace");
        assert!(!namespace_init("NSpid:\t4242\t7\n"), "a pod's shared namespace");
        assert!(!namespace_init("NSpid:\t1\n"), "the host's init");
        assert!(namespace_init("NSpid:\t4242\t50\t1\n"), "nested");
    }

    #[test]
    fn the_shims_own_process_needs_no_watch() {
        // This test process catches nothing of note and is no namespace's init.
        assert_eq!(needs_watch(std::process::id(), 15), None);
        assert_eq!(needs_watch(std::process::id(), 9), None);
        assert_eq!(needs_watch(0, 15), None);
    }
}
