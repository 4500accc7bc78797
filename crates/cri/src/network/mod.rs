//! Pod networking and namespaces, behind two seams the sandbox lifecycle takes: [`Network`] (attaching a pod to
//! the node's network: CNI ADD, CHECK and DEL, through the plugins in [`cni`]) and [`Namespaces`] (making and
//! pinning a pod's network, IPC and UTS namespaces and its user namespace, [`netns`], and holding a shared PID
//! namespace, [`pidns`]). Both need root in their real form; the fakes
//! (`fake`, tests only) let the sandbox lifecycle be tested without it.
//!
//! CNI is invoked by our own code ([`cni`]): the protocol is a plugin run with environment variables and JSON
//! on stdin, there is no maintained Rust CNI library (libcni is Go), and ours adds a deadline per plugin run
//! and keeps ADD's result for DEL in the sandbox record.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub mod cni;
#[cfg(test)]
pub mod fake;
pub mod netdev;
pub mod netns;
pub mod pidns;

pub use cni::{Attachment, Cni, NetConf, PortMapping};

/// Why a pod could not be attached, detached or given its namespaces.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The config directory holds no network config (kubelet's NetworkReady=false).
    #[error("no network config found in {}", .0.display())]
    NoConfig(PathBuf),
    /// A network config that cannot be used.
    #[error("CNI config {}: {reason}", file.display())]
    BadConfig {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A plugin type that names a path.
    #[error("CNI plugin type {0:?} is not a plain name")]
    BadPluginName(String),
    /// A plugin that is in none of the plugin directories.
    #[error("CNI plugin {kind:?} not found in {dirs}")]
    NoPlugin {
        /// The plugin type.
        kind: String,
        /// The directories searched, `:`-separated.
        dirs: String,
    },
    /// A plugin failed; `msg` is its own error.
    #[error("CNI plugin {kind} {cmd} for network {network}: {msg}")]
    Plugin {
        /// The plugin type.
        kind: String,
        /// ADD, CHECK or DEL.
        cmd: &'static str,
        /// The network's name.
        network: String,
        /// The plugin's error message.
        msg: String,
    },
    /// A plugin that had not exited by its deadline: its process group was killed.
    #[error("CNI plugin {kind} {cmd} for network {network}: no answer within {}s; killed", after.as_secs_f64())]
    Timeout {
        /// The plugin type.
        kind: String,
        /// ADD, CHECK or DEL.
        cmd: &'static str,
        /// The network's name.
        network: String,
        /// The deadline it had.
        after: Duration,
    },
    /// A plugin's result that does not parse.
    #[error("CNI plugin {kind} {cmd}: its result does not parse: {reason}")]
    BadResult {
        /// The plugin type.
        kind: String,
        /// ADD, CHECK or DEL.
        cmd: &'static str,
        /// The parser's error.
        reason: String,
    },
    /// A file or system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl NetError {
    /// An I/O error while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> NetError {
        NetError::Io {
            context: context.into(),
            source,
        }
    }
}
pub use netns::{Pinned, Wanted};

/// Attaching pods to the node's network.
pub trait Network: Send + Sync {
    /// The network pods get now, or why there is none (kubelet's NetworkReady condition).
    fn ready(&self) -> Result<NetConf, NetError>;
    /// Attaches the pod `at` describes to `net`; returns the result (addresses, interfaces).
    fn add(&self, net: &NetConf, at: &Attachment) -> Result<Value, NetError>;
    /// Checks that the pod is still attached as `result` says.
    fn check(&self, net: &NetConf, at: &Attachment, result: &Value) -> Result<(), NetError>;
    /// Detaches the pod (`result`: what ADD returned, if known).
    fn del(&self, net: &NetConf, at: &Attachment, result: Option<&Value>) -> Result<(), NetError>;
    /// What RuntimeStatus's verbose info says of the setup.
    fn describe(&self) -> Value;
}

impl Network for Cni {
    fn ready(&self) -> Result<NetConf, NetError> {
        cni::ready(self)
    }

    fn add(&self, net: &NetConf, at: &Attachment) -> Result<Value, NetError> {
        Cni::add(self, net, at)
    }

    fn check(&self, net: &NetConf, at: &Attachment, result: &Value) -> Result<(), NetError> {
        Cni::check(self, net, at, result)
    }

    fn del(&self, net: &NetConf, at: &Attachment, result: Option<&Value>) -> Result<(), NetError> {
        Cni::del(self, net, at, result)
    }

    fn describe(&self) -> Value {
        let conf = self.ready().ok().map(|n| n.file.display().to_string());
        serde_json::json!({
            "cniConfDir": self.conf_dir,
            "cniPluginDirs": self.plugin_dirs,
            "cniConfig": conf,
        })
    }
}

/// Making a pod's namespaces, pinned so that no process needs to hold them.
pub trait Namespaces: Send + Sync {
    /// Makes the namespaces `want` asks for, pinned under `dir`.
    fn pin(&self, dir: &Path, want: &Wanted) -> Result<Pinned, NetError>;
    /// Unpins what is under `dir` and removes it. Idempotent.
    fn unpin(&self, dir: &Path);
    /// Whether every pin of `p` still refers to a namespace (false after a reboot).
    fn alive(&self, p: &Pinned) -> bool;
}

/// The kernel's namespaces, pinned by nsfs bind mounts ([`netns`]); a shared PID namespace is held by the
/// shim binary's `pid-init` ([`pidns`]), run from a sealed copy made once.
#[derive(Debug, Clone, Default)]
pub struct Pinner {
    /// The shim binary (its `pid-init` action holds PID namespaces), and its sealed copy.
    holder: Arc<pidns::Holder>,
}

impl Pinner {
    /// Pins namespaces, with the shim binary at `shim` holding the shared PID ones.
    pub fn new(shim: PathBuf) -> Pinner {
        Pinner {
            holder: Arc::new(pidns::Holder::new(shim)),
        }
    }
}

impl Namespaces for Pinner {
    fn pin(&self, dir: &Path, want: &Wanted) -> Result<Pinned, NetError> {
        let mut pinned = netns::create(dir, want)?;
        if want.pid {
            match pidns::create(dir, &self.holder, &pinned) {
                Ok(pin) => pinned.pid = Some(pin),
                Err(e) => {
                    netns::remove(dir);
                    return Err(e);
                }
            }
        }
        Ok(pinned)
    }

    fn unpin(&self, dir: &Path) {
        pidns::remove(dir);
        netns::remove(dir);
    }

    fn alive(&self, p: &Pinned) -> bool {
        p.alive()
    }
}
