//! Running a program from a large, many-threaded process without a fork: `posix_spawn` (glibc's is a
//! `clone(CLONE_VM | CLONE_VFORK)` and an exec), so the caller's page tables are not copied and its pages not
//! made copy-on-write, which a fork of criusd costs (page faults in criusd afterwards, about 3 ms of CPU a
//! pod at 100 pods on 8 streams). std's `Command` spawns that way too, but falls back to a fork as soon as a
//! `pre_exec` hook is set, and keeping one descriptor open across the exec needs one there. Here a
//! `dup2(fd, fd)` file action does it: it clears the descriptor's close-on-exec flag in the child alone
//! (POSIX 2024; glibc since 2.29).

use std::ffi::{CString, OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Output};

/// What to run: `program` (a path, or a name looked up in `PATH`) with `args`, criusd's environment plus
/// `env`, in `dir`, stdin from /dev/null, stdout and stderr captured, `keep` (if any) left open at its number.
pub(crate) struct Spawn<'a> {
    /// The program.
    pub(crate) program: &'a Path,
    /// Its arguments (without the program name, which is `program`).
    pub(crate) args: &'a [&'a str],
    /// Variables set on top of the caller's environment.
    pub(crate) env: &'a [(&'a str, &'a str)],
    /// Its working directory.
    pub(crate) dir: &'a Path,
    /// A descriptor of the caller the program inherits, at the same number.
    pub(crate) keep: Option<RawFd>,
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// `rc` of a posix_spawn* call (an errno value, 0 for success) as a result.
fn check(rc: libc::c_int, what: &str) -> std::io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::from_raw_os_error(rc);
    Err(std::io::Error::new(e.kind(), format!("{what}: {e}")))
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// The file actions and attributes of one spawn, destroyed on drop.
struct Plan {
    actions: libc::posix_spawn_file_actions_t,
    attrs: libc::posix_spawnattr_t,
}

impl Plan {
    fn new() -> std::io::Result<Box<Plan>> {
        // SAFETY: both are plain C structs that their init functions fill in before any other use.
        let mut p: Box<Plan> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: initialising the structs we own.
        unsafe {
            check(
                libc::posix_spawn_file_actions_init(&mut p.actions),
                "file actions",
            )?;
            if let Err(e) = check(libc::posix_spawnattr_init(&mut p.attrs), "spawn attributes") {
                libc::posix_spawn_file_actions_destroy(&mut p.actions);
                return Err(e);
            }
        }
        Ok(p)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: both were initialised in Plan::new.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attrs);
        }
    }
}

/// Reads `out` and `err` to their ends, both at once (neither writer can block on a full pipe).
fn read_both(out: OwnedFd, err: OwnedFd) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut files = [Some(std::fs::File::from(out)), Some(std::fs::File::from(err))];
    let mut bufs = [Vec::new(), Vec::new()];
    while files.iter().any(Option::is_some) {
        let mut fds: Vec<libc::pollfd> = files
            .iter()
            .map(|f| libc::pollfd {
                fd: f.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: a valid array of pollfds (negative fds are ignored).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (i, p) in fds.iter().enumerate() {
            if p.revents == 0 {
                continue;
            }
            let Some(f) = files[i].as_mut() else { continue };
            let mut chunk = [0u8; 4096];
            match f.read(&mut chunk) {
                Ok(0) => files[i] = None,
                Ok(k) => bufs[i].extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    let [out, err] = bufs;
    Ok((out, err))
}

fn wait(pid: libc::pid_t) -> std::io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Runs `s` to its end, as `Command::output` would; returns its exit status and output.
pub(crate) fn output(s: &Spawn<'_>) -> std::io::Result<Output> {
    let program = cstring(s.program.as_os_str())?;
    let search = !s.program.as_os_str().as_bytes().contains(&b'/');
    let program = if search || s.program.is_absolute() {
        program
    } else {
        // Relative to the caller's directory, not to `dir` (the child changes directory before its exec).
        cstring(std::path::absolute(s.program)?.as_os_str())?
    };
    let mut argv = vec![cstring(s.program.as_os_str())?];
    for a in s.args {
        argv.push(cstring(OsStr::new(a))?);
    }
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !s.env.iter().any(|(n, _)| OsStr::new(n) == k))
        .collect();
    vars.extend(s.env.iter().map(|(k, v)| (k.into(), v.into())));
    let mut envp = Vec::with_capacity(vars.len());
    for (k, v) in vars {
        let mut kv = k;
        kv.push("=");
        kv.push(v);
        envp.push(cstring(&kv)?);
    }
    let mut argp: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argp.push(std::ptr::null_mut());
    let mut envpp: Vec<*mut libc::c_char> = envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envpp.push(std::ptr::null_mut());
    let dir = cstring(s.dir.as_os_str())?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut plan = Plan::new()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is to a live NUL-terminated string or array owned above; the file actions name
    // descriptors this process holds open until posix_spawn returns.
    let rc = unsafe {
        let fa = &mut plan.actions;
        check(
            libc::posix_spawn_file_actions_addopen(fa, 0, c"/dev/null".as_ptr(), libc::O_RDONLY, 0),
            "stdin",
        )?;
        check(
            libc::posix_spawn_file_actions_adddup2(fa, out_w.as_raw_fd(), 1),
            "stdout",
        )?;
        check(
            libc::posix_spawn_file_actions_adddup2(fa, err_w.as_raw_fd(), 2),
            "stderr",
        )?;
        if let Some(fd) = s.keep {
            check(
                libc::posix_spawn_file_actions_adddup2(fa, fd, fd),
                "the descriptor kept",
            )?;
        }
        check(
            libc::posix_spawn_file_actions_addchdir_np(fa, dir.as_ptr()),
            "the directory",
        )?;
        // As std's Command: no signal blocked, SIGPIPE back to its default (criusd ignores it).
        let at = &mut plan.attrs;
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        check(libc::posix_spawnattr_setsigmask(at, &none), "the signal mask")?;
        let mut pipe_sig: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe_sig);
        libc::sigaddset(&mut pipe_sig, libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(at, &pipe_sig), "SIGPIPE")?;
        let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        check(
            libc::posix_spawnattr_setflags(at, flags as libc::c_short),
            "the flags",
        )?;
        let spawn = if search {
            libc::posix_spawnp
        } else {
            libc::posix_spawn
        };
        spawn(&mut pid, program.as_ptr(), fa, at, argp.as_ptr(), envpp.as_ptr())
    };
    drop((out_w, err_w, plan));
    check(rc, &format!("spawning {}", s.program.display()))?;
    let read = read_both(out_r, err_r);
    let status = wait(pid)?;
    let (stdout, stderr) = read?;
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_runs_in_its_directory_with_its_output_environment_and_the_kept_descriptor_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (kept, _kw) = pipe().unwrap();
        let (other, _ow) = pipe().unwrap();
        let script = format!(
            "pwd; echo \"$SPAWN_TEST\"; read x || echo eof; [ -e /proc/self/fd/{k} ] && echo kept; \
             [ -e /proc/self/fd/{o} ] && echo leaked; echo oops >&2; exit 3",
            k = kept.as_raw_fd(),
            o = other.as_raw_fd()
        );
        let out = output(&Spawn {
            program: Path::new("sh"),
            args: &["-c", &script],
            env: &[("SPAWN_TEST", "hello")],
            dir: dir.path(),
            keep: Some(kept.as_raw_fd()),
        })
        .unwrap();
        let want = format!(
            "{}\nhello\neof\nkept\n",
            dir.path().canonicalize().unwrap().display()
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
        assert_eq!(out.stderr, b"oops\n");
        assert_eq!(out.status.code(), Some(3));
        // The kept descriptor is still close-on-exec here.
        let flags = nix::fcntl::fcntl(&kept, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert!(nix::fcntl::FdFlag::from_bits_truncate(flags).contains(nix::fcntl::FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let e = output(&Spawn {
            program: Path::new("/nonexistent/prog"),
            args: &[],
            env: &[],
            dir: Path::new("/"),
            keep: None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/prog"), "{e}");
    }
}
