//! The `[runtimes.NAME]` tables: runtime handlers (Kubernetes RuntimeClass `handler: NAME`), each an OCI
//! runtime binary with its state root. crius-runc, the default handler (also the empty name), needs no table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crius_cri::handlers::{self, Handler, Handlers};
use crius_cri::shim::OciBinary;
use serde::{Deserialize, Serialize};

/// The only `type` there is: an OCI runtime with runc's command line, run by crius's shim.
pub const OCI: &str = "oci";

/// One `[runtimes.NAME]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerSection {
    /// The runtime binary (absolute), e.g. /usr/sbin/runc.
    pub path: PathBuf,
    /// Its `--root`; empty: /run/crius/shim/<the binary's file name>/k8s.io.
    pub root: PathBuf,
    /// What kind of runtime: only "oci".
    #[serde(rename = "type")]
    pub kind: String,
}

impl Default for HandlerSection {
    fn default() -> HandlerSection {
        HandlerSection {
            path: PathBuf::new(),
            root: PathBuf::new(),
            kind: OCI.into(),
        }
    }
}

/// Every `[runtimes.NAME]` table, by name.
pub type RuntimesSection = BTreeMap<String, HandlerSection>;

/// Whether `name` can be a RuntimeClass handler: a DNS label, as Kubernetes requires.
fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Checks each table: a DNS-label name, an absolute path and root, type "oci".
pub fn check(runtimes: &RuntimesSection) -> Result<(), String> {
    for (name, h) in runtimes {
        let at = format!("runtimes.{name}");
        if !is_dns_label(name) {
            return Err(format!(
                "{at}: a handler's name is a DNS label (lower-case letters, digits, '-')"
            ));
        }
        if !h.path.is_absolute() {
            return Err(format!(
                "{at}: path {:?} must be an absolute path to the runtime binary",
                h.path
            ));
        }
        if !h.root.as_os_str().is_empty() && !h.root.is_absolute() {
            return Err(format!(
                "{at}: root {} must be an absolute path",
                h.root.display()
            ));
        }
        if h.kind != OCI {
            return Err(format!("{at}: type {:?}: only \"{OCI}\" is supported", h.kind));
        }
    }
    Ok(())
}

/// The handlers: crius-runc (as the shim at `shim` finds it) and each table, every binary's features read
/// once. A configured binary that is not there is an error naming its table.
pub fn handlers(runtimes: &RuntimesSection, shim: &Path) -> Result<Handlers, String> {
    let default = handlers::default_binary(shim)
        .map(|b| handlers::probe(&b))
        .unwrap_or_default();
    let mut configured = Vec::new();
    for (name, h) in runtimes {
        if !h.path.is_file() {
            return Err(format!(
                "runtimes.{name}: path {}: no such file",
                h.path.display()
            ));
        }
        configured.push(Handler {
            name: name.clone(),
            runtime: Some(OciBinary {
                binary: h.path.clone(),
                root: (!h.root.as_os_str().is_empty()).then(|| h.root.clone()),
            }),
            runtime_features: handlers::probe(&h.path),
        });
    }
    Ok(Handlers::new(default, configured))
}

/// The tables as the config file has them, with a commented example when there are none.
pub fn render(runtimes: &RuntimesSection, toml_value: impl Fn(&Path) -> String) -> String {
    let mut out = String::from(
        "# Runtime handlers (RuntimeClass handler NAME, RunPodSandbox's runtime_handler): [runtimes.NAME] names an\n\
         # OCI runtime binary with runc's command line (path, absolute) and its state root (root; empty:\n\
         # /run/crius/shim/<binary's file name>/k8s.io); type is \"oci\", the only kind. crius-runc is the default\n\
         # handler (also the empty name) and needs no table; a [runtimes.crius-runc] table replaces it. Every\n\
         # container of a pod runs on its handler. Status lists each handler with the features crius acts on\n\
         # that its binary's `features` command reports. Example:\n\
         #   [runtimes.runc]\n\
         #   path = \"/usr/sbin/runc\"\n\
         #   root = \"/run/crius/runc\"\n\
         #   [runtimes.crun]\n\
         #   path = \"/usr/bin/crun\"\n\
         # default: none\n",
    );
    for (name, h) in runtimes {
        out += &format!(
            "[runtimes.{name}]\npath = {}\nroot = {}\ntype = \"{}\"\n",
            toml_value(&h.path),
            toml_value(&h.root),
            h.kind
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn tables_parse_with_their_defaults() {
        let c: Config = toml::from_str(
            "[runtimes.runc]\npath = \"/usr/sbin/runc\"\nroot = \"/run/crius/runc\"\n\
             [runtimes.crun]\npath = \"/usr/bin/crun\"\n",
        )
        .unwrap();
        assert_eq!(c.runtimes["runc"].root, PathBuf::from("/run/crius/runc"));
        assert_eq!(c.runtimes["crun"].kind, OCI);
        assert!(c.runtimes["crun"].root.as_os_str().is_empty());
        c.check().unwrap();
        assert_eq!(toml::from_str::<Config>(&c.render()).unwrap(), c);
        let e = toml::from_str::<Config>("[runtimes.runc]\nbinary = \"/usr/sbin/runc\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("binary"), "{e}");
    }

    #[test]
    fn bad_tables_are_named() {
        let bad = |text: &str| toml::from_str::<Config>(text).unwrap().check().unwrap_err();
        assert!(bad("[runtimes.runc]\npath = \"runc\"\n").contains("runtimes.runc: path \"runc\""));
        assert!(bad("[runtimes.Runc]\npath = \"/usr/sbin/runc\"\n").contains("DNS label"));
        assert!(bad("[runtimes.runc]\npath = \"/r\"\nroot = \"rel\"\n").contains("root rel"));
        assert!(bad("[runtimes.kata]\npath = \"/k\"\ntype = \"vm\"\n").contains("type \"vm\""));
        let c: Config = toml::from_str("[runtimes.gone]\npath = \"/nonexistent/runc\"\n").unwrap();
        let e = handlers(&c.runtimes, Path::new("/nonexistent/shim")).unwrap_err();
        assert_eq!(e, "runtimes.gone: path /nonexistent/runc: no such file");
    }

    #[test]
    fn handlers_resolve_tables_and_keep_the_default() {
        let c: Config = toml::from_str("[runtimes.sh]\npath = \"/bin/sh\"\nroot = \"/run/x\"\n").unwrap();
        let h = handlers(&c.runtimes, Path::new("/nonexistent/shim")).unwrap();
        let names: Vec<_> = h.all().iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["crius-runc", "sh"]);
        let sh = h.find("RunPodSandbox", "sh").unwrap();
        assert_eq!(
            sh.runtime,
            Some(OciBinary {
                binary: "/bin/sh".into(),
                root: Some("/run/x".into())
            })
        );
        assert_eq!(h.find("RunPodSandbox", "").unwrap().runtime, None);
        assert!(Config::default().render().contains("[runtimes.runc]"));
    }
}
