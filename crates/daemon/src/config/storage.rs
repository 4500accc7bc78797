//! The `[storage]` table: where containers' writable layers live. Kubernetes' split image filesystem
//! (KEP-4191) lets them sit on another filesystem than the images; ImageFsInfo reports both, and kubelet
//! then watches and garbage-collects each on its own.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `[storage]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// The directory whose `snapshots/` holds containers' writable layers; empty: beside the images.
    pub container_root: PathBuf,
}

impl StorageSection {
    /// Where containers' snapshots go: `<container_root>/snapshots`, or None for the image store's own.
    pub fn snapshot_root(&self) -> Option<PathBuf> {
        (!self.container_root.as_os_str().is_empty()).then(|| self.container_root.join("snapshots"))
    }

    /// Checks the table: a container root must be an absolute path.
    pub fn check(&self) -> Result<(), String> {
        let r: &Path = &self.container_root;
        if !r.as_os_str().is_empty() && !r.is_absolute() {
            return Err(format!(
                "[storage] container_root {}: must be an absolute path",
                r.display()
            ));
        }
        Ok(())
    }

    /// The table as a commented TOML section, its values rendered by `value`.
    pub fn render(&self, value: impl Fn(&Path) -> String) -> String {
        format!(
            "[storage]\n\
             # Where containers' writable layers live: <container_root>/snapshots. Empty: beside the images\n\
             # (<root>/images/snapshots). Another filesystem here splits the image filesystem from the\n\
             # containers' (KEP-4191); ImageFsInfo reports each. Change it only on a node without containers:\n\
             # their layers stay where they were made.\n\
             # default: \"\"\ncontainer_root = {}\n\n",
            value(&self.container_root)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_container_root_keeps_them_beside_the_images() {
        let s = StorageSection::default();
        assert_eq!(s.snapshot_root(), None);
        assert!(s.check().is_ok());
        let s = StorageSection {
            container_root: "/mnt/fast/crius".into(),
        };
        assert_eq!(
            s.snapshot_root(),
            Some(PathBuf::from("/mnt/fast/crius/snapshots"))
        );
        assert!(s.check().is_ok());
        let s = StorageSection {
            container_root: "relative".into(),
        };
        assert!(s.check().unwrap_err().contains("container_root relative"));
    }

    #[test]
    fn the_table_is_rendered_checked_and_read_back() {
        let mut c = crate::config::Config::default();
        c.storage.container_root = "/mnt/fast/crius".into();
        let text = c.render();
        assert!(text.contains("[storage]\n"), "{text}");
        assert!(text.contains("container_root = \"/mnt/fast/crius\"\n"), "{text}");
        assert_eq!(toml::from_str::<crate::config::Config>(&text).unwrap(), c);
        c.storage.container_root = "fast".into();
        assert!(c.check().unwrap_err().contains("[storage] container_root fast"));
    }
}
