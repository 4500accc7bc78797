//! Pod networking and namespaces, behind two seams the sandbox lifecycle takes: [`Network`] (attaching a pod to
//! the node's network: CNI ADD, CHECK and DEL, through the plugins in [`cni`]) and [`Namespaces`] (making and
//! pinning a pod's network, IPC and UTS namespaces, [`netns`]). Both need root in their real form; the fakes
//! (`fake`, tests only) let the sandbox lifecycle be tested without it.

use std::path::Path;

use serde_json::Value;

pub mod cni;
#[cfg(test)]
pub mod fake;
pub mod netns;

pub use cni::{Attachment, Cni, NetConf, PortMapping};
pub use netns::{Pinned, Wanted};

/// Attaching pods to the node's network.
pub trait Network: Send + Sync {
    /// The network pods get now, or why there is none (kubelet's NetworkReady condition).
    fn ready(&self) -> Result<NetConf, String>;
    /// Attaches the pod `at` describes to `net`; returns the result (addresses, interfaces).
    fn add(&self, net: &NetConf, at: &Attachment) -> Result<Value, String>;
    /// Checks that the pod is still attached as `result` says.
    fn check(&self, net: &NetConf, at: &Attachment, result: &Value) -> Result<(), String>;
    /// Detaches the pod (`result`: what ADD returned, if known).
    fn del(&self, net: &NetConf, at: &Attachment, result: Option<&Value>) -> Result<(), String>;
    /// What RuntimeStatus's verbose info says of the setup.
    fn describe(&self) -> Value;
}

impl Network for Cni {
    fn ready(&self) -> Result<NetConf, String> {
        cni::ready(self)
    }

    fn add(&self, net: &NetConf, at: &Attachment) -> Result<Value, String> {
        Cni::add(self, net, at)
    }

    fn check(&self, net: &NetConf, at: &Attachment, result: &Value) -> Result<(), String> {
        Cni::check(self, net, at, result)
    }

    fn del(&self, net: &NetConf, at: &Attachment, result: Option<&Value>) -> Result<(), String> {
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
    fn pin(&self, dir: &Path, want: &Wanted) -> Result<Pinned, String>;
    /// Unpins what is under `dir` and removes it. Idempotent.
    fn unpin(&self, dir: &Path);
    /// Whether every pin of `p` still refers to a namespace (false after a reboot).
    fn alive(&self, p: &Pinned) -> bool;
}

/// The kernel's namespaces, pinned by nsfs bind mounts ([`netns`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pinner;

impl Namespaces for Pinner {
    fn pin(&self, dir: &Path, want: &Wanted) -> Result<Pinned, String> {
        netns::create(dir, want)
    }

    fn unpin(&self, dir: &Path) {
        netns::remove(dir)
    }

    fn alive(&self, p: &Pinned) -> bool {
        p.alive()
    }
}
