//! A container's overlay rootfs, idmapped for a user namespace: the kernel does not idmap an overlay mount
//! itself (EINVAL), but overlayfs takes idmapped lower layers. So the image's layers under the overlay mounted
//! at the rootfs are each cloned into an idmapped mount attached at a scratch directory next to the rootfs,
//! the overlay is mounted again over those, and the scratch mounts are taken off (overlayfs holds private
//! copies of its layers). The image's files are the container root's; the layers on disk do not change. The
//! upper layer stays as it is (overlayfs works in it as its mounter, the host's root, whom an idmapped upper
//! layer could not map): what the container writes is stored with its host ids, and the upper directory,
//! the container's `/`, is given to the container's root.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use super::mountapi::{self, open_source};
use crate::{Result, err};

/// The layers of the overlay mounted at `at`: (lower dirs, upper dir, work dir), from the mount table.
fn layers(at: &Path) -> Result<(Vec<PathBuf>, PathBuf, PathBuf)> {
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| err!("reading the mount table: {e}"))?;
    let line = table
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(&*at.to_string_lossy()) && l.contains(" - overlay "))
        .ok_or_else(|| err!("{} is no overlay mount", at.display()))?;
    let opts = line.rsplit(' ').next().unwrap_or_default();
    let get = |key: &str| {
        opts.split(',')
            .find_map(|o| o.strip_prefix(key))
            .map(str::to_string)
            .ok_or_else(|| err!("the overlay at {} has no {key}", at.display()))
    };
    let lower = get("lowerdir=")?.split(':').map(PathBuf::from).collect();
    Ok((lower, get("upperdir=")?.into(), get("workdir=")?.into()))
}

/// Clones `src` into a mount idmapped through `ns`, attached at the new directory `at`.
fn idmapped_at(src: &Path, ns: &OwnedFd, at: &Path) -> Result<()> {
    let what = format!("layer {}", src.display());
    std::fs::create_dir_all(at).map_err(|e| err!("creating {}: {e}", at.display()))?;
    let tree = mountapi::clone_tree(&open_source(src)?, false, &what)?;
    mountapi::set_idmap(&tree, ns, false, &what)?;
    mountapi::attach(&tree, &open_source(at)?, &what)
}

/// Mounts the overlay at `rootfs` again over idmapped copies of its lower layers, through the user namespace
/// pinned at `userns`, whose root is host uid and gid `root`. For a runtime manager (criusd), before the
/// container is created.
pub fn idmap_overlay(rootfs: &Path, userns: &Path, root: (u32, u32)) -> Result<()> {
    let ns: OwnedFd = std::fs::File::open(userns)
        .map_err(|e| err!("opening user namespace {}: {e}", userns.display()))?
        .into();
    let (lower, upper, work) = layers(rootfs)?;
    let scratch = rootfs.with_file_name("idmapped");
    let mut made = Vec::new();
    let result = (|| -> Result<()> {
        let mut lowers = Vec::new();
        for (i, l) in lower.iter().enumerate() {
            let at = scratch.join(format!("l{i}"));
            idmapped_at(l, &ns, &at)?;
            made.push(at.clone());
            lowers.push(at.display().to_string());
        }
        nix::unistd::chown(&upper, Some(root.0.into()), Some(root.1.into()))
            .map_err(|e| err!("giving {} to {}:{}: {e}", upper.display(), root.0, root.1))?;
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            lowers.join(":"),
            upper.display(),
            work.display()
        );
        nix::mount::umount2(rootfs, MntFlags::MNT_DETACH)
            .map_err(|e| err!("unmounting the rootfs {} to idmap it: {e}", rootfs.display()))?;
        nix::mount::mount(
            Some("overlay"),
            rootfs,
            Some("overlay"),
            MsFlags::empty(),
            Some(data.as_str()),
        )
        .map_err(|e| {
            err!(
                "mounting the idmapped overlay at {} ({data}): {e}",
                rootfs.display()
            )
        })
    })();
    for at in made.iter().rev() {
        let _ = nix::mount::umount2(at, MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
