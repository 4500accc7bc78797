//! Device nodes the device suites make on the host with mknod, in temp dirs of their own.

use std::path::Path;

use nix::sys::stat::{Mode, SFlag, makedev, mknod};

/// Makes char device `major:minor` at `path`, mode `mode` (the umask not applied), owned by `uid:gid`.
pub fn char_node(path: &Path, major: u64, minor: u64, mode: u32, uid: u32, gid: u32) {
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(mode),
        makedev(major, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}
