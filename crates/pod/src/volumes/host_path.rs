//! `hostPath` volumes: the path's `type` checked, and made for the `…OrCreate` types.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use crate::Error;

/// Checks (and for the `…OrCreate` types, makes) a hostPath of `type_`, for volume `at`.
pub(super) fn host_path(p: &Path, type_: &str, at: &str) -> Result<(), Error> {
    let meta = std::fs::metadata(p);
    let want = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(Error::manifest(
                at,
                format!("hostPath {} is not {what}", p.display()),
            ))
        }
    };
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_err() => {
            std::fs::create_dir_all(p).map_err(Error::io(format!("{at}: creating {}", p.display())))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                .map_err(Error::io(format!("{at}: chmod {}", p.display())))
        }
        "FileOrCreate" if meta.is_err() => {
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
            }
            std::fs::write(p, b"").map_err(Error::io(format!("{at}: creating {}", p.display())))
        }
        t => {
            let m = meta.map_err(Error::io(format!("{at}: hostPath {} ({t})", p.display())))?;
            let ft = m.file_type();
            match t {
                "Directory" | "DirectoryOrCreate" => want(ft.is_dir(), "a directory"),
                "File" | "FileOrCreate" => want(ft.is_file(), "a file"),
                "Socket" => want(ft.is_socket(), "a socket"),
                "CharDevice" => want(ft.is_char_device(), "a character device"),
                "BlockDevice" => want(ft.is_block_device(), "a block device"),
                other => Err(Error::manifest(at, format!("hostPath type {other:?}"))),
            }
        }
    }
}
