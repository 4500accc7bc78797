//! The `[cdi]` table: where CDI (Container Device Interface) spec files are, which CreateContainer reads to
//! resolve the devices a container asks for by CDI name (`crius_cri::cdi`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The `[cdi]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CdiSection {
    /// The spec directories, in order: a device in a later one overrides one of the same name before it.
    pub spec_dirs: Vec<PathBuf>,
}

impl Default for CdiSection {
    fn default() -> CdiSection {
        CdiSection {
            spec_dirs: crius_cri::cdi::DEFAULT_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
        }
    }
}

impl CdiSection {
    /// Checks that every directory is an absolute path.
    pub fn check(&self) -> Result<(), String> {
        if let Some(d) = self.spec_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(format!("[cdi] spec_dirs {}: must be absolute paths", d.display()));
        }
        Ok(())
    }

    /// The table as a commented TOML section, each path rendered by `value`.
    pub fn render(&self, value: impl Fn(&Path) -> String) -> String {
        let dirs: Vec<String> = self.spec_dirs.iter().map(|d| value(d)).collect();
        format!(
            "[cdi]\n\
             # Where CDI spec files (*.json, *.yaml) are, in order: a device in a later directory\n\
             # overrides one of the same name in an earlier one. They are read again at each\n\
             # CreateContainer that asks for a CDI device (CDI_devices, cdi.k8s.io/* annotations).\n\
             # (--cdi-spec-dir, repeatable)\n\
             # default: [\"/etc/cdi\", \"/var/run/cdi\"]\nspec_dirs = [{}]\n\n",
            dirs.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_is_rendered_checked_and_read_back() {
        let mut c = crate::config::Config::default();
        assert_eq!(
            c.cdi.spec_dirs,
            [std::path::Path::new("/etc/cdi"), "/var/run/cdi".as_ref()]
        );
        c.cdi.spec_dirs = vec!["/opt/cdi".into(), "/run/cdi".into()];
        let text = c.render();
        assert!(text.contains("[cdi]\n"), "{text}");
        assert!(
            text.contains("spec_dirs = [\"/opt/cdi\", \"/run/cdi\"]\n"),
            "{text}"
        );
        assert_eq!(toml::from_str::<crate::config::Config>(&text).unwrap(), c);
        assert!(c.check().is_ok());
        c.cdi.spec_dirs.push("cdi".into());
        assert!(c.check().unwrap_err().contains("[cdi] spec_dirs cdi"));
    }
}
