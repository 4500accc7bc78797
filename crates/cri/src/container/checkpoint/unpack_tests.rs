//! Hostile checkpoint archives: each is refused with InvalidArgument naming the archive and the entry, and
//! nothing is written outside the directory or rootfs it is unpacked into.

use super::*;

/// A tar builder of raw entries (names as given, unchecked, as a hostile archive would have them).
struct Tar(tar::Builder<Vec<u8>>);

impl Tar {
    fn new() -> Tar {
        Tar(tar::Builder::new(Vec::new()))
    }

    fn header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        // Written into the raw name field: `set_path` refuses `..` and absolute names.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_cksum();
        h
    }

    fn file(mut self, name: &str, data: &[u8]) -> Tar {
        let h = Tar::header(name, tar::EntryType::Regular, data.len() as u64);
        self.0.append(&h, data).unwrap();
        self
    }

    fn dir(mut self, name: &str) -> Tar {
        let h = Tar::header(name, tar::EntryType::Directory, 0);
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    fn link(mut self, kind: tar::EntryType, name: &str, target: &str) -> Tar {
        let mut h = Tar::header(name, kind, 0);
        h.set_link_name(target).unwrap();
        h.set_cksum();
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    fn device(mut self, name: &str) -> Tar {
        let mut h = Tar::header(name, tar::EntryType::Char, 0);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        h.set_cksum();
        self.0.append(&h, &[][..]).unwrap();
        self
    }

    fn write(self, to: &Path) {
        std::fs::write(to, self.0.into_inner().unwrap()).unwrap();
    }
}

/// A scratch place: `work/` holds what is unpacked, `outside/sentinel` must survive.
struct Place {
    d: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("work/rootfs/etc")).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::fs::write(d.path().join("outside/sentinel"), b"host").unwrap();
        Place { d }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.d.path().join(rel)
    }

    fn untouched(&self) {
        assert_eq!(std::fs::read(self.p("outside/sentinel")).unwrap(), b"host");
        let outside: Vec<_> = std::fs::read_dir(self.p("outside")).unwrap().collect();
        assert_eq!(outside.len(), 1, "something was written outside");
        assert!(!self.p("work/evil").exists() && !self.d.path().join("evil").exists());
    }

    /// Unpacks `archive` (a checkpoint archive) into `work/restore` and expects a refusal naming `entry`.
    fn refused_archive(&self, archive: Tar, entry: &str, why: &str) {
        let at = self.p("work/c.tar");
        archive.write(&at);
        let e = unpack(&at, &self.p("work/restore")).unwrap_err();
        self.check(e, &at, entry, why);
    }

    /// Applies `diff` as `rootfs-diff.tar` (and `deleted` as `deleted.files`) to `work/rootfs`, expecting a
    /// refusal naming `entry`.
    fn refused_diff(&self, diff: Tar, deleted: Option<&[&str]>, entry: &str, why: &str) {
        let dir = self.p("work/restore");
        std::fs::create_dir_all(&dir).unwrap();
        diff.write(&dir.join(ROOTFS_DIFF));
        if let Some(list) = deleted {
            std::fs::write(dir.join(DELETED_FILES), serde_json::to_vec(list).unwrap()).unwrap();
        }
        let at = self.p("work/c.tar");
        let e = apply_rootfs_diff(&at, &dir, &self.p("work/rootfs")).unwrap_err();
        self.check(e, &at, entry, why);
    }

    fn check(&self, e: Error, archive: &Path, entry: &str, why: &str) {
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        let text = e.to_string();
        assert!(text.contains(&archive.display().to_string()), "{text}");
        assert!(text.contains(entry), "no {entry:?} in: {text}");
        assert!(text.contains(why), "no {why:?} in: {text}");
        self.untouched();
    }
}

#[test]
fn names_with_dot_dot_or_absolute_are_refused() {
    let w = Place::new();
    w.refused_archive(
        Tar::new().file("../../outside/evil", b"x"),
        "\"../../outside/evil\"",
        "'..'",
    );
    let abs = w.p("outside/evil").display().to_string();
    w.refused_archive(Tar::new().file(&abs, b"x"), &abs, "absolute");
    w.refused_diff(
        Tar::new().file("../outside/evil", b"x"),
        None,
        "rootfs-diff.tar:\"../outside/evil\"",
        "'..'",
    );
}

#[test]
fn a_symlink_then_a_write_through_it_is_refused() {
    let w = Place::new();
    let outside = w.p("outside").display().to_string();
    // The archive itself holds no links at all.
    w.refused_archive(
        Tar::new().link(tar::EntryType::Symlink, "checkpoint", &outside),
        "\"checkpoint\"",
        "only files and directories",
    );
    // The rootfs diff may make a symlink, but never writes through one.
    w.refused_diff(
        Tar::new()
            .link(tar::EntryType::Symlink, "escape", &outside)
            .file("escape/evil", b"x"),
        None,
        "rootfs-diff.tar:\"escape/evil\"",
        "a parent is a symlink",
    );
    assert_eq!(
        std::fs::read_link(w.p("work/rootfs/escape")).unwrap(),
        w.p("outside"),
        "the symlink itself is the container's to have"
    );
    // Nor through a relative one leading up and out.
    w.refused_diff(
        Tar::new()
            .link(tar::EntryType::Symlink, "up", "../../outside")
            .dir("up/sub"),
        None,
        "rootfs-diff.tar:\"up/sub\"",
        "a parent is a symlink",
    );
    // A hard link to a file outside, through a symlink or by `..`.
    w.refused_diff(
        Tar::new()
            .link(tar::EntryType::Symlink, "escape2", &outside)
            .link(tar::EntryType::Link, "stolen", "escape2/sentinel"),
        None,
        "rootfs-diff.tar:\"stolen\"",
        "not a file reached inside the rootfs",
    );
    w.refused_diff(
        Tar::new().link(tar::EntryType::Link, "stolen", "../../outside/sentinel"),
        None,
        "rootfs-diff.tar:\"stolen\"",
        "'..'",
    );
}

#[test]
fn device_nodes_are_refused() {
    let w = Place::new();
    w.refused_diff(
        Tar::new().device("dev/mem"),
        None,
        "rootfs-diff.tar:\"dev/mem\"",
        "a device node",
    );
    w.refused_archive(
        Tar::new().device("checkpoint/x"),
        "\"checkpoint/x\"",
        "only files and directories",
    );
}

#[test]
fn a_huge_config_dump_is_refused_before_it_is_read() {
    let w = Place::new();
    let at = w.p("work/c.tar");
    // A header claiming more than the cap, with only a little behind it: refused on its size alone.
    let mut b = tar::Builder::new(Vec::new());
    let h = Tar::header(CONFIG_DUMP, tar::EntryType::Regular, MAX_DUMP_BYTES + 1);
    b.append(&h, &[][..]).ok();
    let mut bytes = b.into_inner().unwrap();
    bytes.truncate(512);
    bytes.extend(vec![b'{'; 4096]);
    std::fs::write(&at, &bytes).unwrap();
    let e = unpack(&at, &w.p("work/restore")).unwrap_err();
    w.check(e, &at, "\"config.dump\"", "the cap");
    // And one really that big, read for its config: no more than the cap is held.
    let mut big = b"{\"id\":\"".to_vec();
    big.resize((MAX_DUMP_BYTES + 10) as usize, b'a');
    Tar::new().file(CONFIG_DUMP, &big).write(&at);
    let e = read_config(&at).unwrap_err();
    w.check(e, &at, "\"config.dump\"", "the cap");
}

#[test]
fn deleted_files_that_escape_the_rootfs_are_refused() {
    let w = Place::new();
    for bad in ["../../etc", "/../outside/sentinel", "etc/../../outside/sentinel"] {
        w.refused_diff(
            Tar::new().dir("etc"),
            Some(&[bad]),
            &format!("deleted.files:{bad:?}"),
            "escape the rootfs",
        );
    }
    assert!(w.p("work/rootfs/etc").is_dir());
}

#[test]
fn a_name_twice_in_the_archive_is_refused() {
    let w = Place::new();
    w.refused_archive(
        Tar::new().file(SPEC_DUMP, b"{}").file(SPEC_DUMP, b"{}"),
        "\"spec.dump\"",
        "appears twice",
    );
}

#[test]
fn a_plain_diff_applies_files_dirs_links_and_owners() {
    let w = Place::new();
    let dir = w.p("work/restore");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(w.p("work/rootfs/etc/old"), b"old").unwrap();
    Tar::new()
        .dir("data")
        .file("data/a.txt", b"aaa")
        .link(tar::EntryType::Link, "data/b.txt", "data/a.txt")
        .link(tar::EntryType::Symlink, "data/c", "/etc/passwd")
        .file("etc/old", b"new")
        .write(&dir.join(ROOTFS_DIFF));
    apply_rootfs_diff(&w.p("work/c.tar"), &dir, &w.p("work/rootfs")).unwrap();
    let r = |p: &str| std::fs::read(w.p("work/rootfs").join(p)).unwrap();
    assert_eq!(r("data/a.txt"), b"aaa");
    assert_eq!(r("data/b.txt"), b"aaa");
    assert_eq!(r("etc/old"), b"new");
    assert_eq!(
        std::fs::read_link(w.p("work/rootfs/data/c")).unwrap(),
        Path::new("/etc/passwd")
    );
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(w.p("work/rootfs/data/a.txt")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.nlink()), (0o644, 2));
    w.untouched();
}
