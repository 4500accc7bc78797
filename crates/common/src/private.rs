//! Files and directories only their owner (root) may read or enter: what the runtime and the shim keep about
//! a container holds its `process.env`, secrets included. Directories are 0700 and files 0600, as runc makes
//! its state; a file that exists with looser bits is tightened as it is written.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of a private directory.
pub const DIR_MODE: u32 = 0o700;
/// The mode of a private file.
pub const FILE_MODE: u32 = 0o600;

/// Creates (or truncates) `path` as a private file, open for writing.
pub fn create(path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(FILE_MODE)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(f)
}

/// Opens `path` for appending, created as a private file if missing.
pub fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Writes `bytes` to `path`, a private file.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create(path)?.write_all(bytes)
}

/// Creates `dir` and its missing parents as private directories (existing ones keep their modes).
pub fn dir_all(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Creates `dir` and its missing parents as private directories, and tightens `dir` itself to [`DIR_MODE`] if it
/// existed with looser bits (the parents keep theirs).
pub fn dir_all_tightened(dir: &Path) -> std::io::Result<()> {
    dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Creates `dir` as a private directory; its parent must exist (AlreadyExists if `dir` does).
pub fn dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(DIR_MODE).create(dir)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn files_and_directories_are_the_owners_alone_whatever_the_umask_or_the_old_mode() {
        let top = tempfile::tempdir().unwrap();
        let d = top.path().join("a/b");
        dir_all(&d).unwrap();
        assert_eq!((mode(&top.path().join("a")), mode(&d)), (0o700, 0o700));
        dir(&d.join("c")).unwrap();
        assert_eq!(mode(&d.join("c")), 0o700);
        assert_eq!(
            dir(&d.join("c")).unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        let f = d.join("state.json");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&f, b"new").unwrap();
        assert_eq!(
            (mode(&f), std::fs::read_to_string(&f).unwrap()),
            (0o600, "new".into())
        );
        let log = d.join("log");
        writeln!(append(&log).unwrap(), "one").unwrap();
        writeln!(append(&log).unwrap(), "two").unwrap();
        assert_eq!(
            (mode(&log), std::fs::read_to_string(&log).unwrap()),
            (0o600, "one\ntwo\n".into())
        );
    }
}
