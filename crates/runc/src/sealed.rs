//! The defence against CVE-2019-5736 (a container overwriting the runtime binary through `/proc/<pid>/exe`).
//!
//! Every crius-runc process that enters a container (`create`, `run`, `exec`) first re-executes itself from a
//! sealed in-memory copy: `memfd_create(MFD_ALLOW_SEALING)`, an in-kernel copy of `/proc/self/exe` (sendfile),
//! the seals `F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE`, then `fexecve`. From then on
//! `/proc/<pid>/exe` of that process and of everything it forks (stage 1, init, the exec'd process until its
//! own execve) names the memfd, never the host's file: a container that opens it, or that execs it
//! (`/proc/self/exe` as entrypoint or `#!/proc/self/exe`) and runs code in it through a library of its image,
//! holds a copy that no one can write, shrink or grow, and that dies with the last process using it.
//! A process already running from such a copy (seals present) goes on without copying again.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

/// `MFD_EXEC` (Linux 6.3): executable even where `vm.memfd_noexec` makes memfds non-executable by default.
const MFD_EXEC: libc::c_uint = 0x10;

/// The seals the copy must carry; with `F_SEAL_SEAL` nobody can remove them.
const SEALS: libc::c_int = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Whether this process already runs from a sealed copy.
fn running_sealed(exe: &std::fs::File) -> bool {
    // SAFETY: fcntl on a descriptor we own; F_GET_SEALS fails with EINVAL on files that are not memfds.
    let seals = unsafe { libc::fcntl(exe.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SEALS == SEALS
}

/// Makes the sealed copy of `exe`.
fn sealed_copy(exe: &std::fs::File) -> Result<OwnedFd, String> {
    let size = exe
        .metadata()
        .map_err(|e| format!("stat /proc/self/exe: {e}"))?
        .len();
    let create = |flags: libc::c_uint| {
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        unsafe {
            libc::memfd_create(
                c"crius-runc".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | flags,
            )
        }
    };
    let mut raw = create(MFD_EXEC);
    if raw < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // A kernel before 6.3, which knows no MFD_EXEC (and whose memfds are executable).
        raw = create(0);
    }
    if raw < 0 {
        return Err(os_err(
            "memfd_create (EACCES here means vm.memfd_noexec is 2: no executable memfds)",
        ));
    }
    // SAFETY: memfd_create just returned this descriptor and nothing else owns it.
    let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut left = size;
    while left > 0 {
        // SAFETY: two valid descriptors; sendfile reads from exe's current offset.
        let n = unsafe {
            libc::sendfile(
                memfd.as_raw_fd(),
                exe.as_raw_fd(),
                std::ptr::null_mut(),
                left as usize,
            )
        };
        match n {
            n if n > 0 => left -= n as u64,
            0 => return Err(format!("copying /proc/self/exe: ended {left} bytes early")),
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(os_err("copying /proc/self/exe into the memfd")),
        }
    }
    // SAFETY: fcntl on the memfd we own.
    if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
        return Err(os_err("sealing the memfd"));
    }
    Ok(memfd)
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
    if running_sealed(&exe) {
        return Ok(());
    }
    let memfd = sealed_copy(&exe)?;
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
