//! The defence against CVE-2019-5736 (a container overwriting the runtime binary through `/proc/<pid>/exe`).
//!
//! Every crius-runc process that enters a container (`create`, `run`, `exec`) first re-executes itself from a
//! sealed in-memory copy: `memfd_create(MFD_ALLOW_SEALING)`, an in-kernel copy of `/proc/self/exe` (sendfile),
//! the seals `F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE`, then `fexecve`. From then on
//! `/proc/<pid>/exe` of that process and of everything it forks (stage 1, init, the exec'd process until its
//! own execve) names the memfd, never the host's file: a container that opens it, or that execs it
//! (`/proc/self/exe` as entrypoint or `#!/proc/self/exe`) and runs code in it through a library of its image,
//! holds a copy that no one can write, shrink or grow, and that dies with the last process using it.
//! A process already running from such a copy (seals present) goes on without copying again: so does one that
//! a shim started through the copy criusd made and handed it (`crius_common::sealed`), which spares the ~3 ms
//! the copy and the second exec cost each call.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStringExt;

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn cstrings(items: impl Iterator<Item = OsString>, what: &str) -> Result<Vec<CString>, String> {
    items
        .map(|s| CString::new(s.into_vec()).map_err(|_| format!("{what} contains a NUL byte")))
        .collect()
}

/// Re-executes crius-runc from a sealed copy of itself unless it already runs from one. Returns only when no
/// re-exec was needed; any failure is an error (crius-runc does not enter a container unprotected).
pub fn ensure() -> Result<(), String> {
    let exe = std::fs::File::open("/proc/self/exe").map_err(|e| format!("opening /proc/self/exe: {e}"))?;
    if crius_common::sealed::is_sealed(exe.as_fd()) {
        return Ok(());
    }
    let memfd =
        crius_common::sealed::copy_of(&exe, c"crius-runc").map_err(|e| format!("/proc/self/exe: {e}"))?;
    drop(exe);
    let argv = cstrings(std::env::args_os(), "an argument")?;
    let envp = cstrings(
        std::env::vars_os().map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            kv
        }),
        "the environment",
    )?;
    let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argp, envpp) = (ptrs(&argv), ptrs(&envp));
    // The memfd is close-on-exec: fexecve of an ELF file does not need it after the exec.
    // SAFETY: NULL-terminated arrays of pointers into CStrings that outlive the call.
    unsafe { libc::fexecve(memfd.as_raw_fd(), argp.as_ptr(), envpp.as_ptr()) };
    Err(os_err("re-executing from the sealed copy (fexecve)"))
}
