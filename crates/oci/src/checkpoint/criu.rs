//! CRIU's command line as `checkpoint` and `restore` use it: the options common to both, the external mounts
//! and namespaces a container's spec implies, running `criu` and reading the end of its log when it fails.
//!
//! What is external and why (as runc maps them):
//! - bind mounts (a volume, `/etc/resolv.conf`) and cgroup mounts: CRIU cannot dump what lies outside the
//!   container, so each is `--external mnt[DEST]:DEST` at dump, and at restore `--external mnt[DEST]:SOURCE`
//!   binds the (new) bundle's source there (the container's own cgroup directory for a cgroup mount);
//! - a network or pid namespace joined by path (a pod's): `--external net[INODE]:extRootNetNS` at dump, and at
//!   restore the new spec's namespace file is handed over open, `--inherit-fd fd[N]:extRootNetNS`;
//! - an ipc or uts namespace joined by path is dumped with its content, and joined again at restore
//!   (`--join-ns ipc:PATH`), so the restored container shares the new pod's.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use oci_spec::runtime::{LinuxNamespaceType, Mount, Spec};

use crate::cgroup::Cgroup;
use crate::{Error, Result, err};

/// Options that `checkpoint` and `restore` share (runc's flags of the same names).
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// The CRIU binary (runc's global `--criu`; default `criu`, found on PATH).
    pub criu: PathBuf,
    /// Where CRIU's image files are (`--image-path`; runc's default `./checkpoint`).
    pub image_path: PathBuf,
    /// Where CRIU writes its log and work files (`--work-path`; default: the image path).
    pub work_path: Option<PathBuf>,
    /// Allow open TCP connections.
    pub tcp_established: bool,
    /// Allow unix sockets connected to peers outside the container.
    pub ext_unix_sk: bool,
    /// Allow a shell job (a controlling terminal outside the container).
    pub shell_job: bool,
    /// Dump and restore file locks.
    pub file_locks: bool,
    /// The cgroup mode: `soft`, `full`, `strict` or `ignore` (default, see [`Common::cgroups_mode`]).
    pub manage_cgroups_mode: Option<String>,
    /// Namespaces to create empty at restore (runc accepts `network` only).
    pub empty_ns: Vec<String>,
    /// Deduplicate memory images.
    pub auto_dedup: bool,
    /// Lazy restore of memory pages (refused: it needs CRIU's page server and lazy-pages daemon).
    pub lazy_pages: bool,
}

impl Common {
    /// The work directory: `--work-path`, else the image path.
    pub fn work_dir(&self) -> &Path {
        self.work_path.as_deref().unwrap_or(&self.image_path)
    }

    /// The cgroup mode CRIU gets: the one asked for, else `ignore` (the restored tasks then start where CRIU runs:
    /// in the new container's cgroup, not the one they were dumped from, where runc 1.1.5 leaves them on v2).
    pub fn cgroups_mode(&self) -> &str {
        self.manage_cgroups_mode.as_deref().unwrap_or("ignore")
    }

    /// The CRIU binary to run (`criu` when none was given).
    fn binary(&self) -> &Path {
        if self.criu.as_os_str().is_empty() {
            Path::new("criu")
        } else {
            &self.criu
        }
    }

    /// The options both directions pass: images, work dir, log, the flags, the cgroup mode.
    pub fn args(&self, log: &str) -> Result<Vec<String>> {
        if self.lazy_pages {
            return Err(err!(
                "--lazy-pages is not supported by crius-runc (it needs CRIU's page server and lazy-pages daemon)"
            ));
        }
        let mut a = vec![
            "--images-dir".into(),
            path_arg(&self.image_path)?,
            "--work-dir".into(),
            path_arg(self.work_dir())?,
            "--log-file".into(),
            log.into(),
            "-v4".into(),
        ];
        for (set, flag) in [
            (self.tcp_established, "--tcp-established"),
            (self.ext_unix_sk, "--ext-unix-sk"),
            (self.shell_job, "--shell-job"),
            (self.file_locks, "--file-locks"),
            (self.auto_dedup, "--auto-dedup"),
        ] {
            if set {
                a.push(flag.into());
            }
        }
        let mode = self.cgroups_mode();
        if !matches!(mode, "soft" | "full" | "strict" | "ignore") {
            return Err(err!(
                "invalid --manage-cgroups-mode {mode:?}: one of soft, full, strict, ignore"
            ));
        }
        a.push(format!("--manage-cgroups={mode}"));
        for ns in &self.empty_ns {
            if ns != "network" {
                return Err(err!(
                    "--empty-ns {ns:?}: only the network namespace can be restored empty"
                ));
            }
            a.extend(["--empty-ns".into(), "net".into()]);
        }
        Ok(a)
    }

    /// Runs `criu ARGS` (its stdio: ours), in `cgroup` when given (as the restored tasks are to be), and turns a
    /// failure into [`Error::Criu`] quoting the end of `log` (in the work dir).
    pub fn run(&self, action: &str, id: &str, args: &[String], cgroup: Option<&Cgroup>) -> Result<()> {
        crate::log::debug(|| format!("{action} {id}: {} {}", self.binary().display(), args.join(" ")));
        let mut cmd = Command::new(self.binary());
        cmd.args(args);
        if let Some(cg) = cgroup {
            let procs = cg.dir.join("cgroup.procs");
            // SAFETY: the child only writes its pid to a file before exec; crius-runc is single-threaded.
            unsafe {
                cmd.pre_exec(move || std::fs::write(&procs, std::process::id().to_string()));
            }
        }
        let status = cmd.status().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => err!(
                "{action} {id:?}: CRIU ({}) is not installed: it is needed for checkpoint and restore",
                self.binary().display()
            ),
            _ => err!("{action} {id:?}: running {}: {e}", self.binary().display()),
        })?;
        if status.success() {
            return Ok(());
        }
        let log = self.work_dir().join(args_log(args));
        Err(Error::Criu {
            action: format!("criu {action}"),
            id: id.to_string(),
            status: status.to_string(),
            tail: log_tail(&log),
            log,
        })
    }
}

/// The log file named in `args` (after `--log-file`).
fn args_log(args: &[String]) -> String {
    args.iter()
        .position(|a| a == "--log-file")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_default()
}

/// A path as a command-line argument (CRIU takes no non-UTF-8 path here).
pub fn path_arg(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| err!("path {} is not UTF-8", p.display()))
}

/// What a reader of an error needs from CRIU's log: its `Error` lines (the last 8), or else its last 10 lines.
pub fn log_tail(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return format!("({} could not be read)", log.display());
    };
    let lines: Vec<&str> = text.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("Error") || l.contains("error"))
        .collect();
    let picked = if errors.is_empty() {
        &lines[lines.len().saturating_sub(10)..]
    } else {
        &errors[errors.len().saturating_sub(8)..]
    };
    picked.join("\n")
}

/// Whether a spec mount is one CRIU must treat as external: a bind mount or a cgroup mount.
pub fn is_external(m: &Mount) -> bool {
    let typ = m.typ().as_deref().unwrap_or_default();
    let bind = m
        .options()
        .as_ref()
        .is_some_and(|o| o.iter().any(|o| o == "bind" || o == "rbind"));
    bind || typ == "bind" || typ == "cgroup" || typ == "cgroup2"
}

/// A mount destination as the container sees it mounted: its symlinks followed inside `rootfs` (a bind onto
/// `/conf -> /real/conf` is mounted at `/real/conf`, and CRIU knows it by that path), as runc resolves it.
pub fn in_root(rootfs: &Path, dest: &Path) -> PathBuf {
    let mut todo: Vec<std::ffi::OsString> = dest.iter().rev().map(|c| c.to_os_string()).collect();
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.to_str() {
            Some("/" | ".") => continue,
            Some("..") => {
                out.pop();
                continue;
            }
            _ => {}
        }
        let next = out.join(&c);
        let on_disk = rootfs.join(next.strip_prefix("/").unwrap_or(&next));
        match std::fs::read_link(&on_disk) {
            Ok(target) if hops < 40 => {
                hops += 1;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                todo.extend(target.iter().rev().map(|c| c.to_os_string()));
            }
            _ => out = next,
        }
    }
    out
}

/// Dump: every external mount of the spec, keyed by its destination (resolved in `rootfs`).
pub fn dump_mounts(spec: &Spec, rootfs: &Path) -> Result<Vec<String>> {
    let mut a = Vec::new();
    for m in spec.mounts().as_deref().unwrap_or_default() {
        if is_external(m) {
            let dest = path_arg(&in_root(rootfs, m.destination()))?;
            a.extend(["--external".into(), format!("mnt[{dest}]:{dest}")]);
        }
    }
    Ok(a)
}

/// Restore: every external mount of the (new) spec bound from its source: a bind's source (relative to the bundle
/// directory when relative), the container's cgroup directory for a cgroup mount.
pub fn restore_mounts(spec: &Spec, (bundle, rootfs): (&Path, &Path), cgroup: &Path) -> Result<Vec<String>> {
    let mut a = Vec::new();
    for m in spec.mounts().as_deref().unwrap_or_default() {
        if !is_external(m) {
            continue;
        }
        let dest = path_arg(&in_root(rootfs, m.destination()))?;
        let typ = m.typ().as_deref().unwrap_or_default();
        let source = if typ == "cgroup" || typ == "cgroup2" {
            cgroup.to_path_buf()
        } else {
            let s = m
                .source()
                .as_deref()
                .ok_or_else(|| err!("mount {dest}: a bind mount without a source"))?;
            bundle.join(s)
        };
        a.extend(["--external".into(), format!("mnt[{dest}]:{}", path_arg(&source)?)]);
    }
    Ok(a)
}

/// The key runc gives a namespace joined by path, for the namespace types CRIU takes as external.
fn external_key(t: LinuxNamespaceType) -> Option<(&'static str, &'static str)> {
    match t {
        LinuxNamespaceType::Network => Some(("net", "extRootNetNS")),
        LinuxNamespaceType::Pid => Some(("pid", "extRootPidNS")),
        _ => None,
    }
}

/// The namespaces of the spec joined by path, checked: net and pid are external, ipc and uts are joined again at
/// restore; a joined mount, user, cgroup or time namespace is refused (CRIU would dump it as the container's own).
fn joined(spec: &Spec) -> Result<Vec<(LinuxNamespaceType, PathBuf)>> {
    let linux = spec
        .linux()
        .as_ref()
        .ok_or_else(|| err!("the spec has no linux section"))?;
    let (join, new) = crate::namespaces::split(linux.namespaces().as_deref().unwrap_or_default());
    if new.contains(&LinuxNamespaceType::User) {
        return Err(err!(
            "checkpoint and restore of a container with a user namespace are not supported by crius-runc"
        ));
    }
    for (t, path) in &join {
        if external_key(*t).is_none() && !matches!(t, LinuxNamespaceType::Ipc | LinuxNamespaceType::Uts) {
            return Err(err!(
                "the {} namespace is joined from {}: checkpoint and restore support joined net, pid, ipc and uts \
                 namespaces only",
                crate::namespaces::proc_name(*t),
                path.display()
            ));
        }
    }
    Ok(join)
}

/// Dump: `--external net[INODE]:extRootNetNS` (and pid) for each namespace joined by path.
pub fn dump_namespaces(spec: &Spec) -> Result<Vec<String>> {
    let mut a = Vec::new();
    for (t, path) in joined(spec)? {
        if let Some((kind, key)) = external_key(t) {
            let ino = std::fs::metadata(&path)
                .map_err(Error::io(format!("reading the {kind} namespace"), &path))?
                .ino();
            a.extend(["--external".into(), format!("{kind}[{ino}]:{key}")]);
        }
    }
    Ok(a)
}

/// Restore: the namespaces of the new spec joined by path: the external ones opened (the descriptors must stay
/// open, and be inherited, until CRIU has run) with `--inherit-fd`, ipc and uts with `--join-ns`.
pub fn restore_namespaces(spec: &Spec) -> Result<(Vec<String>, Vec<OwnedFd>)> {
    let (mut a, mut fds) = (Vec::new(), Vec::new());
    for (t, path) in joined(spec)? {
        let name = crate::namespaces::proc_name(t);
        match external_key(t) {
            Some((_, key)) => {
                let f = std::fs::File::open(&path)
                    .map_err(Error::io(format!("opening the {name} namespace"), &path))?;
                let fd = OwnedFd::from(f);
                clear_cloexec(&fd)?;
                a.extend(["--inherit-fd".into(), format!("fd[{}]:{key}", fd.as_raw_fd())]);
                fds.push(fd);
            }
            None => a.extend(["--join-ns".into(), format!("{name}:{}", path_arg(&path)?)]),
        }
    }
    Ok((a, fds))
}

/// Lets `fd` pass to CRIU across its exec.
pub fn clear_cloexec(fd: &OwnedFd) -> Result<()> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
        .map(drop)
        .map_err(Error::sys("clearing close-on-exec for CRIU"))
}

/// File name of the container's stdio as it was at dump, in the image directory (runc's).
pub const DESCRIPTORS: &str = "descriptors.json";

/// The container init's stdio (fds 0, 1, 2), as the links of `/proc/PID/fd/N` read (`pipe:[123]`, `/dev/null`).
pub fn descriptors(pid: i32) -> Vec<String> {
    (0..3)
        .map(|n| {
            std::fs::read_link(format!("/proc/{pid}/fd/{n}"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "/dev/null".into())
        })
        .collect()
}

/// File name of the stdio that were files outside the container's mounts (crius-runc's own), in the image
/// directory: `[[fd, "file[MNT:INO]"], ...]`.
pub const EXTERNAL_STDIO: &str = "external-stdio.json";

/// Dump: the init's stdio that are files on mounts the container does not have (the host's `/dev/null`, a log
/// file), as CRIU's keys `file[MNT_ID:INODE]` (hex) with their fd: CRIU cannot reopen them by path, so they are
/// `--external` at dump and inherited from `restore`'s own stdio.
pub fn external_stdio(pid: i32) -> Vec<(u32, String)> {
    let inside: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').next().map(str::to_string))
        .collect();
    let mut out: Vec<(u32, String)> = Vec::new();
    for n in 0..3u32 {
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/{n}")) else {
            continue;
        };
        if !link.is_absolute() {
            continue; // pipe:[..], socket:[..], anon_inode:..
        }
        if std::fs::metadata(format!("/proc/{pid}/fd/{n}")).is_ok_and(|md| super::terminal::is_pty_slave(&md))
        {
            continue; // the terminal: an external tty (terminal.rs)
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap_or_default();
        let Some(mnt) = info
            .lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))
            .map(str::trim)
        else {
            continue;
        };
        let (Ok(mnt_id), Ok(md)) = (
            mnt.parse::<u64>(),
            std::fs::metadata(format!("/proc/{pid}/fd/{n}")),
        ) else {
            continue;
        };
        if inside.iter().any(|m| *m == mnt_id.to_string()) {
            continue;
        }
        let key = format!("file[{mnt_id:x}:{:x}]", md.ino());
        if !out.iter().any(|(_, k)| *k == key) {
            out.push((n, key));
        }
    }
    out
}

/// Restore: each dumped stdio that was a pipe, or an external file ([`external_stdio`]), becomes ours
/// (`--inherit-fd fd[N]:pipe:[INODE]`, `fd[N]:file[..]`), so the restored container writes to the stdio its new
/// caller (a shim) gave `restore`. Files inside the container are reopened by path.
pub fn inherit_stdio(descriptors: &[String], external: &[(u32, String)]) -> Vec<String> {
    let mut keys: Vec<(usize, &str)> = Vec::new();
    for (n, d) in descriptors.iter().enumerate().take(3) {
        if d.starts_with("pipe:") && !keys.iter().any(|(_, k)| k == d) {
            keys.push((n, d));
        }
    }
    for (n, k) in external {
        keys.push((*n as usize, k));
    }
    keys.into_iter()
        .flat_map(|(n, k)| ["--inherit-fd".to_string(), format!("fd[{n}]:{k}")])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> Spec {
        let mut base = serde_json::json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "linux": {}});
        for (k, val) in v.as_object().unwrap() {
            base[k] = val.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn bind_and_cgroup_mounts_are_external_with_the_new_bundles_sources() {
        let s = spec(serde_json::json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/etc/hosts", "type": "bind", "source": "/var/hosts", "options": ["rbind"]},
            {"destination": "/data", "source": "vol", "options": ["bind", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
        ]}));
        assert_eq!(
            dump_mounts(&s, Path::new("/nonexistent")).unwrap(),
            [
                "--external",
                "mnt[/etc/hosts]:/etc/hosts",
                "--external",
                "mnt[/data]:/data",
                "--external",
                "mnt[/sys/fs/cgroup]:/sys/fs/cgroup"
            ]
        );
        let r = restore_mounts(
            &s,
            (Path::new("/b"), Path::new("/nonexistent")),
            Path::new("/sys/fs/cgroup/c1"),
        )
        .unwrap();
        assert_eq!(
            r,
            [
                "--external",
                "mnt[/etc/hosts]:/var/hosts",
                "--external",
                "mnt[/data]:/b/vol",
                "--external",
                "mnt[/sys/fs/cgroup]:/sys/fs/cgroup/c1"
            ]
        );
    }

    #[test]
    fn a_destination_through_a_symlink_is_known_by_where_it_leads_in_the_rootfs() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("real/conf")).unwrap();
        std::os::unix::fs::symlink("/real/conf", root.path().join("conf")).unwrap();
        std::os::unix::fs::symlink("../real", root.path().join("rel")).unwrap();
        let r = root.path();
        assert_eq!(in_root(r, Path::new("/conf")), Path::new("/real/conf"));
        assert_eq!(in_root(r, Path::new("/rel/conf/x")), Path::new("/real/conf/x"));
        assert_eq!(in_root(r, Path::new("/../../etc/hosts")), Path::new("/etc/hosts"));
        std::os::unix::fs::symlink("loop", root.path().join("loop")).unwrap();
        assert_eq!(in_root(r, Path::new("/loop")), Path::new("/loop"));
    }

    #[test]
    fn joined_namespaces_are_external_or_joined_and_the_rest_refused() {
        let me = std::process::id();
        let s = spec(serde_json::json!({"linux": {"namespaces": [
            {"type": "network", "path": format!("/proc/{me}/ns/net")},
            {"type": "ipc", "path": format!("/proc/{me}/ns/ipc")},
            {"type": "pid"}, {"type": "mount"},
        ]}}));
        let ino = std::fs::metadata(format!("/proc/{me}/ns/net")).unwrap().ino();
        assert_eq!(
            dump_namespaces(&s).unwrap(),
            ["--external".to_string(), format!("net[{ino}]:extRootNetNS")]
        );
        let (a, fds) = restore_namespaces(&s).unwrap();
        assert_eq!(fds.len(), 1);
        assert_eq!(
            a,
            [
                "--inherit-fd".to_string(),
                format!("fd[{}]:extRootNetNS", fds[0].as_raw_fd()),
                "--join-ns".into(),
                format!("ipc:/proc/{me}/ns/ipc"),
            ]
        );
        let mnt = spec(serde_json::json!({"linux": {"namespaces": [
            {"type": "mount", "path": format!("/proc/{me}/ns/mnt")}]}}));
        let e = dump_namespaces(&mnt).unwrap_err().to_string();
        assert!(e.contains("mnt namespace is joined"), "{e}");
        let user = spec(serde_json::json!({"linux": {"namespaces": [{"type": "user"}]}}));
        assert!(
            dump_namespaces(&user)
                .unwrap_err()
                .to_string()
                .contains("user namespace")
        );
    }

    #[test]
    fn common_flags_map_to_criu_s_and_bad_values_are_refused() {
        let mut c = Common {
            image_path: "/img".into(),
            shell_job: true,
            tcp_established: true,
            empty_ns: vec!["network".into()],
            ..Default::default()
        };
        let a = c.args("dump.log").unwrap().join(" ");
        assert_eq!(
            a,
            "--images-dir /img --work-dir /img --log-file dump.log -v4 --tcp-established --shell-job \
             --manage-cgroups=ignore --empty-ns net"
        );
        c.manage_cgroups_mode = Some("hard".into());
        assert!(
            c.args("x")
                .unwrap_err()
                .to_string()
                .contains("--manage-cgroups-mode \"hard\"")
        );
        c.manage_cgroups_mode = None;
        c.empty_ns = vec!["ipc".into()];
        assert!(c.args("x").is_err());
        c.empty_ns.clear();
        c.lazy_pages = true;
        assert!(
            c.args("x")
                .unwrap_err()
                .to_string()
                .contains("--lazy-pages is not supported")
        );
    }

    #[test]
    fn pipes_of_the_dumped_stdio_are_inherited_and_the_log_quoted() {
        let d = ["/dev/null".to_string(), "pipe:[42]".into(), "pipe:[43]".into()];
        assert_eq!(
            inherit_stdio(&d, &[(0, "file[1f:3]".into())]),
            [
                "--inherit-fd",
                "fd[1]:pipe:[42]",
                "--inherit-fd",
                "fd[2]:pipe:[43]",
                "--inherit-fd",
                "fd[0]:file[1f:3]"
            ]
        );
        // This process's stdio are the test harness's: whatever is a file outside its mounts has a key.
        for (n, key) in external_stdio(std::process::id() as i32) {
            assert!(
                n < 3 && key.starts_with("file[") && key.ends_with(']'),
                "{n} {key}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dump.log");
        let mut text: String = (0..30).map(|i| format!("(0.{i}) step {i}\n")).collect();
        assert!(log_tail(&log).contains("could not be read"));
        std::fs::write(&log, &text).unwrap();
        assert_eq!(log_tail(&log).lines().count(), 10);
        assert!(log_tail(&log).ends_with("step 29"));
        text.push_str("(1.0) Error (criu/sk-unix.c:123): unix: Can't dump\n(1.1) Unfreezing\n");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(
            log_tail(&log),
            "(1.0) Error (criu/sk-unix.c:123): unix: Can't dump"
        );
    }
}
