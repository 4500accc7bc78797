//! The last steps before the user's program runs, shared by a container's init and by `exec`: resolve the
//! executable, set rlimits, user and groups, capabilities, no_new_privs and seccomp, then `execve`.
//!
//! Only stdin, stdout, stderr and the `--preserve-fds` ones (3 to 3+N-1) cross that `execve` (CVE-2024-21626):
//! every other descriptor, whoever opened it and however (one opened without O_CLOEXEC), is marked
//! close-on-exec first, with `close_range(3+N, ~0, CLOSE_RANGE_CLOEXEC)`. The working directory is checked
//! too ([`check_cwd`]): after `chdir` it must lie beneath the container's root.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
use oci_spec::runtime::{
    IOPriorityClass, LinuxPersonality, LinuxPersonalityDomain, LinuxSeccomp, PosixRlimitType, Process,
};

use crate::caps::Sets;
use crate::{Result, err};

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything checked and compiled ahead, so that failures show at create time and the final steps are short.
pub struct Prepared {
    exe: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    caps: Option<Sets>,
    seccomp: Option<crate::seccomp::Program>,
}

fn cstr(s: impl AsRef<[u8]>, what: &str) -> Result<CString> {
    CString::new(s.as_ref()).map_err(|_| err!("{what} contains a NUL byte"))
}

/// Finds `prog` like execvp: a name with `/` is taken as is (relative to `cwd`), else searched in `$PATH`.
pub fn resolve(prog: &str, env: &[String], cwd: &Path) -> Result<PathBuf> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    if prog.contains('/') {
        let p = cwd.join(prog);
        return if is_exec(&p) {
            Ok(p)
        } else if p.exists() {
            // A shell answers 126 for this one, 127 for a missing file; criusd's ExecSync does too.
            Err(err!("exec: {prog:?}: not executable (permission denied)"))
        } else {
            Err(err!("exec: {prog:?}: no such executable file"))
        };
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH);
    path.split(':')
        .map(|d| cwd.join(if d.is_empty() { "." } else { d }).join(prog))
        .find(|p| is_exec(p))
        .ok_or_else(|| err!("exec: {prog:?}: executable file not found in $PATH"))
}

/// Sets the rlimits (so an impossible one fails the create or exec call itself), then checks and compiles what
/// `finish` will apply. Runs in the container process, with the container's root as `/`.
pub fn prepare(p: &Process, seccomp: Option<&LinuxSeccomp>) -> Result<Prepared> {
    set_rlimits(p)?;
    set_io_priority(p)?;
    let args = p.args().clone().unwrap_or_default();
    let env = p.env().clone().unwrap_or_default();
    let exe = resolve(&args[0], &env, p.cwd())?;
    Ok(Prepared {
        exe: cstr(exe.as_os_str().as_bytes(), "process.args[0]")?,
        argv: args
            .iter()
            .map(|a| cstr(a, "process.args"))
            .collect::<Result<_>>()?,
        envp: env
            .iter()
            .map(|e| cstr(e, "process.env"))
            .collect::<Result<_>>()?,
        caps: p.capabilities().as_ref().map(Sets::from_oci).transpose()?,
        // Compiled once per profile in a process that keeps it (the exec server), else here.
        seccomp: seccomp.map(crate::seccomp::build_cached).transpose()?,
    })
}

fn rlimit_resource(t: PosixRlimitType) -> Option<libc::__rlimit_resource_t> {
    use PosixRlimitType::*;
    Some(match t {
        RlimitCpu => libc::RLIMIT_CPU,
        RlimitFsize => libc::RLIMIT_FSIZE,
        RlimitData => libc::RLIMIT_DATA,
        RlimitStack => libc::RLIMIT_STACK,
        RlimitCore => libc::RLIMIT_CORE,
        RlimitRss => libc::RLIMIT_RSS,
        RlimitNproc => libc::RLIMIT_NPROC,
        RlimitNofile => libc::RLIMIT_NOFILE,
        RlimitMemlock => libc::RLIMIT_MEMLOCK,
        RlimitAs => libc::RLIMIT_AS,
        RlimitLocks => libc::RLIMIT_LOCKS,
        RlimitSigpending => libc::RLIMIT_SIGPENDING,
        RlimitMsgqueue => libc::RLIMIT_MSGQUEUE,
        RlimitNice => libc::RLIMIT_NICE,
        RlimitRtprio => libc::RLIMIT_RTPRIO,
        RlimitRttime => libc::RLIMIT_RTTIME,
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

/// Sets the I/O scheduling class and priority (`ioprio_set` for this process).
fn set_io_priority(p: &Process) -> Result<()> {
    let Some(io) = p.io_priority() else { return Ok(()) };
    let class: i64 = match io.class() {
        IOPriorityClass::IoprioClassRt => 1,
        IOPriorityClass::IoprioClassBe => 2,
        IOPriorityClass::IoprioClassIdle => 3,
    };
    let value = (class << 13) | (io.priority() & 0x1fff);
    // SAFETY: ioprio_set(IOPRIO_WHO_PROCESS, 0 = self, value) with integer arguments.
    if unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, value) } != 0 {
        return Err(err!("process.ioPriority: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets the execution domain (`linux.personality`: LINUX or LINUX32).
pub fn set_personality(p: Option<&LinuxPersonality>) -> Result<()> {
    let Some(p) = p else { return Ok(()) };
    let domain: libc::c_ulong = match p.domain() {
        LinuxPersonalityDomain::PerLinux => 0x0000,
        LinuxPersonalityDomain::PerLinux32 => 0x0008,
    };
    // SAFETY: personality(2) with an integer argument.
    if unsafe { libc::personality(domain) } < 0 {
        return Err(err!("linux.personality: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets the process's rlimits; an EPERM names the limit and the host's hard limit.
pub fn set_rlimits(p: &Process) -> Result<()> {
    for r in p.rlimits().iter().flatten() {
        let name = serde_json::to_value(r.typ())
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let Some(res) = rlimit_resource(r.typ()) else {
            return Err(err!("rlimit {name} is not known"));
        };
        let lim = libc::rlimit {
            rlim_cur: r.soft(),
            rlim_max: r.hard(),
        };
        // SAFETY: plain syscall with a valid struct.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            let e = std::io::Error::last_os_error();
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: as above.
            unsafe { libc::getrlimit(res, &mut cur) };
            return Err(err!(
                "setting rlimit {name} to soft={} hard={}: {e} (the current hard limit is {}; raising it needs \
                 CAP_SYS_RESOURCE)",
                r.soft(),
                r.hard(),
                cur.rlim_max
            ));
        }
    }
    Ok(())
}

/// Gives `uid` the stdio it will write to, as runc does, so a process of another user can use its terminal
/// (`/dev/pts/N` keeps its group, tty's by devpts's `gid=5`) and reopen `/dev/stdout` on a pipe or socket. Only
/// terminals, pipes and sockets: a regular file or another device the caller passed stays whose it was, as does
/// /dev/null. An owner or group the user namespace does not map (EINVAL, EPERM) leaves it as it is.
fn give_stdio(uid: u32) {
    for fd in 0..3 {
        // SAFETY: stdio stays open for the whole of this function.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let Ok(st) = nix::sys::stat::fstat(borrowed) else {
            continue;
        };
        let kind = st.st_mode & libc::S_IFMT;
        let null = kind == libc::S_IFCHR && st.st_rdev == nix::sys::stat::makedev(1, 3);
        let tty = kind == libc::S_IFCHR && nix::unistd::isatty(borrowed).unwrap_or(false);
        if st.st_uid == uid || null || !(tty || kind == libc::S_IFIFO || kind == libc::S_IFSOCK) {
            continue;
        }
        // SAFETY: fchown on a descriptor number with integer ids; -1 keeps the group.
        unsafe { libc::fchown(fd, uid, u32::MAX) };
    }
}

/// Applies user, groups, capabilities, no_new_privs and seccomp (the filter's listener, if it has one, goes to
/// `listener` as soon as it is loaded), runs `last` (a container's init waits for `start` and runs the
/// startContainer hooks there: as runc runs them, with the process's user, capabilities and seccomp filter),
/// then executes the program with stdio and the `preserve_fds` descriptors after them, nothing else. Returns
/// only on error.
pub fn finish(
    p: &Process,
    prep: Prepared,
    preserve_fds: u32,
    mut listener: crate::seccomp::Listener<'_>,
    last: impl FnOnce() -> Result<()>,
) -> Result<std::convert::Infallible> {
    // First, while seccomp cannot refuse close_range or the /proc reads of the fallback yet.
    for fd in 3..3 + preserve_fds as i32 {
        // SAFETY: fcntl on a descriptor number; the caller passed it on purpose.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    }
    cloexec_from(3 + preserve_fds)?;
    if let Some(mask) = p.user().umask() {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
    }
    let nnp = p.no_new_privileges() == Some(true);
    // Without no_new_privs, loading a filter needs CAP_SYS_ADMIN: load it while we still have it.
    if !nnp && let Some(f) = &prep.seccomp {
        crate::seccomp::load(f, &mut listener)?;
    }
    if let Some(c) = &prep.caps {
        crate::caps::drop_bounding(c.bounding)?;
    }
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) };
    let user = p.user();
    give_stdio(user.uid());
    let groups: Vec<Gid> = user
        .additional_gids()
        .iter()
        .flatten()
        .map(|&g| Gid::from_raw(g))
        .collect();
    // A user namespace whose /proc/self/setgroups says "deny" (one an unprivileged runtime mapped) refuses
    // setgroups altogether: no list to drop then, and one to set is refused by name.
    let denied = std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny");
    if denied && !groups.is_empty() {
        return Err(err!(
            "setting additional groups {groups:?}: the user namespace denies setgroups (/proc/self/setgroups)"
        ));
    }
    if !denied && let Err(e) = setgroups(&groups) {
        return Err(err!("setting additional groups {groups:?}: {e}"));
    }
    let (gid, uid) = (Gid::from_raw(user.gid()), Uid::from_raw(user.uid()));
    setresgid(gid, gid, gid).map_err(|e| err!("setting gid {gid}: {e}"))?;
    setresuid(uid, uid, uid).map_err(|e| err!("setting uid {uid}: {e}"))?;
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) };
    if let Some(c) = &prep.caps {
        crate::caps::apply(c)?;
    }
    if nnp {
        // SAFETY: as above.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(err!("setting no_new_privs: {}", std::io::Error::last_os_error()));
        }
        if let Some(f) = &prep.seccomp {
            crate::seccomp::load(f, &mut listener)?;
        }
    }
    // Before the AppArmor request, which a hook's own execve would take.
    last()?;
    // The AppArmor profile takes hold at this execve (the request needs no privilege of its own).
    crate::apparmor::apply(p.apparmor_profile().as_deref())?;
    let e = nix::unistd::execve(&prep.exe, &prep.argv, &prep.envp).unwrap_err();
    Err(err!("exec {:?}: {e}", prep.exe))
}

/// Marks every descriptor from `first` up close-on-exec: `close_range(CLOSE_RANGE_CLOEXEC)`, or on kernels
/// before 5.11 each descriptor listed in /proc/self/fd.
pub fn cloexec_from(first: u32) -> Result<()> {
    // SAFETY: close_range with integer arguments; CLOSE_RANGE_CLOEXEC only changes flags.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r == 0 {
        return Ok(());
    }
    let dir = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| err!("listing /proc/self/fd to close inherited descriptors: {e}"))?;
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|&fd: &i32| fd >= first as i32)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a descriptor number; one that closed meanwhile (the listing's own) gives EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Checks, after `chdir`, that the working directory lies beneath the process's root: a `process.cwd` that
/// walks out through a descriptor (`/proc/self/fd/N` of a directory outside the container) fails here, since
/// the kernel's getcwd then answers a path that does not start with `/` ("(unreachable)/...").
pub fn check_cwd(cwd: &Path) -> Result<()> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: the raw getcwd syscall (not libc's, which hides the "(unreachable)" answer) into a live buffer.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(err!(
            "process.cwd {}: cannot tell where it leads: {}",
            cwd.display(),
            std::io::Error::last_os_error()
        ));
    }
    let got = &buf[..(n as usize).saturating_sub(1)];
    if !got.starts_with(b"/") {
        return Err(err!(
            "process.cwd {}: leads outside the container's root ({}); refused",
            cwd.display(),
            String::from_utf8_lossy(got)
        ));
    }
    Ok(())
}
