//! A container's terminal across checkpoint and restore, through CRIU's command line.
//!
//! The container's pty master is outside the container (its caller holds it), so CRIU cannot dump the pair.
//! runc hands CRIU the unpaired slave with the RPC-only option `orphan_pts_master` and gets a new master back over
//! the RPC socket. CRIU's command line has no such option, but it has external terminals, which this module uses:
//! - dump: the slave that is the init's stdio is `--external tty[RDEV:DEV]` (its `st_rdev` and `st_dev`, hex),
//!   so is `/dev/tty` when a process has it open (an interactive shell), and the `/dev/console` bind of the
//!   slave is `--external mnt[/dev/console]:/dev/console`; the keys go to [`TERMINAL`] in the images;
//! - restore: crius-runc makes a new pty (as `create` does, from its own `/dev/pts/ptmx`), hands CRIU the slave
//!   (`--inherit-fd fd[N]:tty[RDEV:DEV]` for each key: CRIU gives it to the restored files, `/dev/tty` ones
//!   too, and makes it the restored session's controlling terminal) and binds it on `/dev/console` (`--external mnt[/dev/console]:SLAVE`), then sends the
//!   master to `--console-socket` as `create` does.
//!
//! The difference from runc: the restored terminal is a pty of the devpts where crius-runc runs (the host's), not
//! of the container's own devpts, so the container's `/dev/pts` does not list it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, err};

use super::criu::{clear_cloexec, path_arg};

/// File name of the dumped terminal's record, in the image directory (crius-runc's own).
pub const TERMINAL: &str = "terminal.json";

/// The dumped terminal: CRIU's keys for it, and whether `/dev/console` was bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dumped {
    /// `tty[RDEV:DEV]` of the pty slave, then of `/dev/tty` if a process of the container has it open (an
    /// interactive shell does): CRIU would look for the pty behind it, which is external.
    pub keys: Vec<String>,
    /// `/dev/console` is a mount (the slave bound there by create).
    pub console: bool,
}

/// Whether a file's device number is a Unix 98 pty slave (majors 136 to 143).
pub fn is_pty_slave(md: &std::fs::Metadata) -> bool {
    md.file_type().is_char_device() && (136..=143).contains(&nix::sys::stat::major(md.rdev()))
}

/// Whether a file is `/dev/tty` (5:0), the controlling terminal's alias.
fn is_dev_tty(md: &std::fs::Metadata) -> bool {
    md.file_type().is_char_device() && md.rdev() == nix::sys::stat::makedev(5, 0)
}

/// CRIU's key of the terminal whose file has metadata `md`.
fn key(md: &std::fs::Metadata) -> String {
    format!("tty[{:x}:{:x}]", md.rdev(), md.dev())
}

/// Dump: the pty slave among init `pid`'s stdio, `/dev/tty` if one of the container's processes `pids` has it
/// open, and whether `/dev/console` is mounted in init's mount namespace; `None` when no stdio is a pty.
pub fn dump(pid: i32, pids: &[i32]) -> Option<Dumped> {
    let slave = (0..3).find_map(|n| {
        let md = std::fs::metadata(format!("/proc/{pid}/fd/{n}")).ok()?;
        is_pty_slave(&md).then(|| key(&md))
    })?;
    let mut keys = vec![slave];
    for p in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(md) = std::fs::metadata(fd.path())
                && is_dev_tty(&md)
                && !keys.contains(&key(&md))
            {
                keys.push(key(&md));
            }
        }
    }
    let console = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/dev/console"));
    Some(Dumped { keys, console })
}

/// Dump: CRIU's arguments for the terminal.
pub fn dump_args(t: &Dumped) -> Vec<String> {
    let mut a = Vec::new();
    for k in &t.keys {
        a.extend(["--external".into(), k.clone()]);
    }
    if t.console {
        a.extend(["--external".into(), "mnt[/dev/console]:/dev/console".into()]);
    }
    a
}

/// Reads the images' terminal record; `None` when the images have none.
pub fn load(image_path: &Path) -> Result<Option<Dumped>> {
    let path = image_path.join(TERMINAL);
    match std::fs::read(&path) {
        Ok(t) => serde_json::from_slice(&t)
            .map(Some)
            .map_err(|e| err!("corrupt {}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading", &path)(e)),
    }
}

/// Restore: a new pty for the restored container, the console socket it goes to, and CRIU's arguments.
pub struct Fresh {
    master: OwnedFd,
    /// Kept open (and inherited by CRIU) until CRIU has run.
    slave: OwnedFd,
    /// More descriptors of the slave, one for each further key.
    copies: Vec<OwnedFd>,
    slave_path: PathBuf,
    socket: UnixStream,
}

impl Fresh {
    /// Makes the pty (with the new spec's console size) and connects to `console_socket`.
    pub fn new(spec: &Spec, console_socket: &Path) -> Result<Fresh> {
        let socket = UnixStream::connect(console_socket)
            .map_err(Error::io("connecting to console socket", console_socket))?;
        let root = crate::console::root()?;
        let (master, n) = crate::console::open_master(&root, "dev/pts/ptmx")?;
        let slave = crate::console::open_slave(&master, n)?;
        let size = spec.process().as_ref().and_then(|p| p.console_size());
        crate::console::set_size(&slave, size.as_ref());
        clear_cloexec(&slave)?;
        let slave_path = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd()))
            .map_err(|e| err!("reading the new pty {n}'s path: {e}"))?;
        Ok(Fresh {
            master,
            slave,
            copies: Vec::new(),
            slave_path,
            socket,
        })
    }

    /// CRIU's arguments: the slave inherited for each dumped key (a copy of it for each after the first, kept
    /// open until [`Fresh::send`]), and bound on `/dev/console` if it was.
    pub fn args(&mut self, dumped: &Dumped) -> Result<Vec<String>> {
        let mut a = Vec::new();
        for (i, k) in dumped.keys.iter().enumerate() {
            let fd = if i == 0 {
                self.slave.as_raw_fd()
            } else {
                let copy = self
                    .slave
                    .try_clone()
                    .map_err(|e| err!("duplicating the new pty's slave: {e}"))?;
                clear_cloexec(&copy)?;
                let raw = copy.as_raw_fd();
                self.copies.push(copy);
                raw
            };
            a.extend(["--inherit-fd".into(), format!("fd[{fd}]:{k}")]);
        }
        if dumped.console {
            a.extend([
                "--external".into(),
                format!("mnt[/dev/console]:{}", path_arg(&self.slave_path)?),
            ]);
        }
        Ok(a)
    }

    /// Once CRIU has run: sends the master to the console socket (and closes crius-runc's copies).
    pub fn send(self) -> Result<()> {
        drop((self.slave, self.copies));
        let name = self.slave_path.to_string_lossy().into_owned();
        crate::console::send_master(&self.socket, &self.master, &name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pty_is_inherited_under_the_dumped_key_and_its_master_sent() {
        let dir = tempfile::tempdir().unwrap();
        let sock_path = dir.path().join("console.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"cwd": "/", "terminal": true, "user": {"uid": 0, "gid": 0},
                "consoleSize": {"height": 40, "width": 100}}
        }))
        .unwrap();
        let mut fresh = Fresh::new(&spec, &sock_path).unwrap();
        let md = std::fs::metadata(&fresh.slave_path).unwrap();
        assert!(is_pty_slave(&md), "{}", fresh.slave_path.display());
        let dumped = Dumped {
            keys: vec!["tty[8800:1a]".into(), "tty[500:6]".into()],
            console: true,
        };
        let a = fresh.args(&dumped).unwrap();
        assert_eq!(a[0], "--inherit-fd");
        assert_eq!(a[1], format!("fd[{}]:tty[8800:1a]", fresh.slave.as_raw_fd()));
        assert_eq!(a[3], format!("fd[{}]:tty[500:6]", fresh.copies[0].as_raw_fd()));
        assert_eq!(a[5], format!("mnt[/dev/console]:{}", fresh.slave_path.display()));
        assert_eq!(
            dump_args(&dumped).join(" "),
            "--external tty[8800:1a] --external tty[500:6] --external mnt[/dev/console]:/dev/console"
        );
        let text = serde_json::to_vec(&dumped).unwrap();
        std::fs::write(dir.path().join(TERMINAL), text).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(dumped));
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
        fresh.send().unwrap();
        let (conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let msg = nix::sys::socket::recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            nix::sys::socket::MsgFlags::empty(),
        )
        .unwrap();
        assert_eq!(msg.cmsgs().unwrap().count(), 1);
    }
}
