//! A container's terminal across checkpoint and restore, through CRIU's command line.
//!
//! The container's pty master is outside the container (its caller holds it), so CRIU cannot dump the pair.
//! runc hands CRIU the unpaired slave with the RPC-only option `orphan_pts_master` and gets a new master back over
//! the RPC socket. CRIU's command line has no such option, but it has external terminals, which this module uses:
//! - dump: the slave that is the init's stdio is `--external tty[RDEV:DEV]` (its `st_rdev` and `st_dev`, hex),
//!   and the `/dev/console` bind of it `--external mnt[/dev/console]:/dev/console`; the key goes to
//!   [`TERMINAL`] in the images;
//! - restore: crius-runc makes a new pty (as `create` does, from its own `/dev/pts/ptmx`), hands CRIU the slave
//!   (`--inherit-fd fd[N]:tty[RDEV:DEV]`: CRIU gives it to the restored files and makes it the restored session's
//!   controlling terminal) and binds it on `/dev/console` (`--external mnt[/dev/console]:SLAVE`), then sends the
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

/// The dumped terminal: CRIU's key for it, and whether `/dev/console` was bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dumped {
    /// `tty[RDEV:DEV]`.
    pub key: String,
    /// `/dev/console` is a mount (the slave bound there by create).
    pub console: bool,
}

/// Whether a file's device number is a Unix 98 pty slave (majors 136 to 143).
pub fn is_pty_slave(md: &std::fs::Metadata) -> bool {
    md.file_type().is_char_device() && (136..=143).contains(&nix::sys::stat::major(md.rdev()))
}

/// CRIU's key of the terminal whose slave has metadata `md`.
fn key(md: &std::fs::Metadata) -> String {
    format!("tty[{:x}:{:x}]", md.rdev(), md.dev())
}

/// Dump: the pty slave among init `pid`'s stdio, with whether `/dev/console` is mounted in its mount namespace;
/// `None` when no stdio is a pty.
pub fn dump(pid: i32) -> Option<Dumped> {
    let key = (0..3).find_map(|n| {
        let md = std::fs::metadata(format!("/proc/{pid}/fd/{n}")).ok()?;
        is_pty_slave(&md).then(|| key(&md))
    })?;
    let console = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/dev/console"));
    Some(Dumped { key, console })
}

/// Dump: CRIU's arguments for the terminal.
pub fn dump_args(t: &Dumped) -> Vec<String> {
    let mut a = vec!["--external".into(), t.key.clone()];
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
            slave_path,
            socket,
        })
    }

    /// CRIU's arguments: the slave inherited as the dumped terminal, and bound on `/dev/console` if it was.
    pub fn args(&self, dumped: &Dumped) -> Result<Vec<String>> {
        let mut a = vec![
            "--inherit-fd".into(),
            format!("fd[{}]:{}", self.slave.as_raw_fd(), dumped.key),
        ];
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
        drop(self.slave);
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
        let fresh = Fresh::new(&spec, &sock_path).unwrap();
        let md = std::fs::metadata(&fresh.slave_path).unwrap();
        assert!(is_pty_slave(&md), "{}", fresh.slave_path.display());
        let dumped = Dumped {
            key: "tty[8800:1a]".into(),
            console: true,
        };
        let a = fresh.args(&dumped).unwrap();
        assert_eq!(a[0], "--inherit-fd");
        assert_eq!(a[1], format!("fd[{}]:tty[8800:1a]", fresh.slave.as_raw_fd()));
        assert_eq!(a[3], format!("mnt[/dev/console]:{}", fresh.slave_path.display()));
        assert_eq!(dump_args(&dumped).len(), 4);
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
