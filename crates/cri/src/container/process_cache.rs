//! The process settings of each container's config.json, parsed once: an exec's process starts from them,
//! and reading and parsing the bundle's config.json on every ExecSync was a share of each probe's cost. An
//! entry is good while config.json is the same file unchanged (inode, size, mtime): a rewrite of it (an
//! update, a restore) is read again. RemoveContainer drops the container's entry.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use oci_spec::runtime::Process;

use crate::error::{Error, Result};

/// Which file, as it was: (inode, size, mtime in ns).
type Version = (u64, u64, i128);

/// The cache, by container id.
#[derive(Default)]
pub(crate) struct ProcessCache(Mutex<HashMap<String, (Version, Arc<Process>)>>);

fn version(m: &std::fs::Metadata) -> Version {
    (
        m.ino(),
        m.size(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    )
}

impl ProcessCache {
    /// Container `id`'s process settings from `config` (its config.json), read only if it changed since the
    /// last call. Errors name the file and `call`.
    pub(crate) fn get(&self, call: &'static str, id: &str, config: &Path) -> Result<Arc<Process>> {
        let read = |e: std::io::Error| Error::io(format!("{call}: reading {}", config.display()), e);
        let now = version(&std::fs::metadata(config).map_err(read)?);
        if let Some((v, p)) = self.lock().get(id)
            && *v == now
        {
            return Ok(p.clone());
        }
        let file = std::fs::File::open(config).map_err(read)?;
        // The version of the file read, not of the path's next occupant.
        let v = version(&file.metadata().map_err(read)?);
        let spec: oci_spec::runtime::Spec =
            serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| read(e.into()))?;
        let p = Arc::new(spec.process().clone().unwrap_or_default());
        self.lock().insert(id.to_string(), (v, p.clone()));
        Ok(p)
    }

    /// Drops container `id`'s entry.
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Version, Arc<Process>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_once_and_again_after_a_rewrite() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config.json");
        let spec = |cwd: &str| {
            format!(
                r#"{{"ociVersion":"1.0.2","process":{{"cwd":"{cwd}","args":["sh"],"user":{{"uid":0,"gid":0}}}}}}"#
            )
        };
        std::fs::write(&config, spec("/a")).unwrap();
        let c = ProcessCache::default();
        let p = c.get("ExecSync", "c1", &config).unwrap();
        assert_eq!(p.cwd().display().to_string(), "/a");
        assert!(
            Arc::ptr_eq(&p, &c.get("ExecSync", "c1", &config).unwrap()),
            "cached"
        );
        // Rewritten as criusd writes files (a new file renamed over it): read again.
        let tmp = d.path().join("config.json.tmp");
        std::fs::write(&tmp, spec("/bb")).unwrap();
        std::fs::rename(&tmp, &config).unwrap();
        assert_eq!(
            c.get("ExecSync", "c1", &config)
                .unwrap()
                .cwd()
                .display()
                .to_string(),
            "/bb"
        );
        c.forget("c1");
        std::fs::remove_file(&config).unwrap();
        let e = c.get("ExecSync", "c1", &config).unwrap_err().to_string();
        assert!(
            e.contains("ExecSync: reading") && e.contains("config.json"),
            "{e}"
        );
    }
}
