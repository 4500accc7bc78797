//! The config's bind mounts, made by the runtime before the container enters its user namespace.
//!
//! Inside a user namespace the container's root cannot search host directories its ids do not own (criusd's
//! `0700` state and root directories), and it may not idmap a host filesystem's mount: `MOUNT_ATTR_IDMAP`
//! needs `CAP_SYS_ADMIN` where the filesystem was mounted. So stage 1, still the host's root, clones each bind
//! source's tree into a detached mount with its flags, idmaps those with `uidMappings`/`gidMappings`
//! (runtime-spec 1.1's idmapped mounts) through a user namespace with the mount's mappings
//! ([`userns_with`]), and goes to the rootfs (its working directory follows into the new mount namespace);
//! init then attaches the trees it is given and binds its working directory as the root. Without a user
//! namespace nothing is made early.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;

use oci_spec::runtime::{LinuxIdMapping, Mount, Spec};

use super::mountapi::{self, open_source};
use super::mounts::{bind_tree, read_only_later};
use super::options::parse_options;
use crate::namespaces::userns_with;
use crate::{Result, err};

/// The bind mounts of a spec, by index, made by the runtime (None: not a bind mount, or made by init), and
/// whether the rootfs is init's working directory.
#[derive(Debug, Default)]
pub struct Sources {
    /// The rootfs is the working directory (stage 1 went there before the mount namespace was made, so
    /// init's is the rootfs in the container's mount namespace, reached without searching a path).
    pub root_is_cwd: bool,
    /// Each bind mount's tree: detached, with its flags (and idmapped when it asks).
    pub mounts: Vec<Option<OwnedFd>>,
}

impl Sources {
    /// The tree of mount `i`, taken.
    pub fn take(&mut self, i: usize) -> Option<OwnedFd> {
        self.mounts.get_mut(i).and_then(Option::take)
    }
}

/// Whether mount `m` asks for an idmapped mount.
pub fn idmapped(m: &Mount) -> bool {
    m.uid_mappings().as_ref().is_some_and(|v| !v.is_empty())
        || m.gid_mappings().as_ref().is_some_and(|v| !v.is_empty())
}

type Maps = (Vec<(u32, u32, u32)>, Vec<(u32, u32, u32)>);

fn key(uids: &[LinuxIdMapping], gids: &[LinuxIdMapping]) -> Maps {
    let k = |v: &[LinuxIdMapping]| {
        v.iter()
            .map(|m| (m.container_id(), m.host_id(), m.size()))
            .collect()
    };
    (k(uids), k(gids))
}

/// Opens `rootfs` and the bind sources of `spec` (relative ones under `bundle`) when `userns`, idmapping those
/// that ask. An idmapped mount without a user namespace is refused: the runtime-spec ties them to one.
pub fn open(spec: &Spec, rootfs: &Path, bundle: &Path, userns: bool) -> Result<Sources> {
    let mounts = spec.mounts().as_deref().unwrap_or_default();
    if !userns {
        if let Some(i) = mounts.iter().position(idmapped) {
            return Err(err!(
                "mounts[{i}].uidMappings: an idmapped mount needs the container to have a user namespace"
            ));
        }
        return Ok(Sources::default());
    }
    let mut usernss: HashMap<Maps, OwnedFd> = HashMap::new();
    let mut out = Vec::with_capacity(mounts.len());
    for (i, m) in mounts.iter().enumerate() {
        let mut o = parse_options(m.options().as_deref().unwrap_or_default());
        let bind = o.bind || m.typ().as_deref() == Some("bind");
        if read_only_later(m, m.typ().as_deref().unwrap_or_default()) {
            o.flags.remove(nix::mount::MsFlags::MS_RDONLY);
        }
        let what = format!("mount {}", m.destination().display());
        if !bind {
            if idmapped(m) {
                return Err(err!(
                    "mounts[{i}].uidMappings: only a bind mount can be idmapped ({what})"
                ));
            }
            out.push(None);
            continue;
        }
        let Some(src) = m.source() else {
            out.push(None);
            continue;
        };
        let src = if src.is_absolute() {
            src.clone()
        } else {
            bundle.join(src)
        };
        let fd = open_source(&src).map_err(|e| err!("{what}: {e}"))?;
        let tree = bind_tree(&fd, &o, false, &what)?;
        if !idmapped(m) {
            out.push(Some(tree));
            continue;
        }
        let (uids, gids) = (
            m.uid_mappings().as_deref().unwrap_or_default(),
            m.gid_mappings().as_deref().unwrap_or_default(),
        );
        if uids.is_empty() || gids.is_empty() {
            return Err(err!(
                "mounts[{i}]: an idmapped mount needs both uidMappings and gidMappings ({what})"
            ));
        }
        let ns = match usernss.entry(key(uids, gids)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(userns_with(uids, gids)?),
        };
        let recursive = o.flags.contains(nix::mount::MsFlags::MS_REC) && o.idmap_recursive;
        mountapi::set_idmap(&tree, ns, recursive, &what)?;
        out.push(Some(tree));
    }
    nix::unistd::chdir(rootfs).map_err(|e| err!("chdir to the rootfs {}: {e}", rootfs.display()))?;
    Ok(Sources {
        root_is_cwd: true,
        mounts: out,
    })
}

/// Whether the kernel makes idmapped mounts of `path`'s filesystem: a detached copy of it idmapped through a
/// throwaway user namespace, then dropped.
pub fn idmap_supported(path: &Path) -> Result<()> {
    let map = oci_spec::runtime::LinuxIdMappingBuilder::default()
        .container_id(0u32)
        .host_id(100_000u32)
        .size(65_536u32)
        .build()
        .map_err(|e| err!("an id mapping: {e}"))?;
    let ns = userns_with(std::slice::from_ref(&map), std::slice::from_ref(&map))?;
    let what = format!("a copy of {}", path.display());
    let tree = mountapi::clone_tree(&open_source(path)?, false, &what)?;
    mountapi::set_idmap(&tree, &ns, false, &what)
}
