//! Fakes of [`Network`] and [`Namespaces`] for unit tests: addresses handed out from a counter, pins as plain
//! files, every call logged.

use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::{Attachment, Namespaces, NetConf, NetError, Network, Pinned, Wanted};

/// A network that gives each pod `10.88.0.<n>`.
#[derive(Default)]
pub struct FakeNetwork {
    /// No config: [`Network::ready`] says so.
    pub not_ready: Mutex<bool>,
    /// ADD fails with this plugin message.
    pub fail_add: Mutex<Option<String>>,
    /// Every call, as `"<CMD> <sandbox id>"`.
    pub calls: Mutex<Vec<String>>,
}

impl FakeNetwork {
    /// The calls made so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Network for FakeNetwork {
    fn ready(&self) -> Result<NetConf, NetError> {
        if *self.not_ready.lock().unwrap() {
            return Err(NetError::NoConfig("/etc/cni/net.d".into()));
        }
        Ok(NetConf {
            name: "fake".into(),
            version: "1.0.0".into(),
            plugins: vec![json!({"type": "fake"})],
            file: "/fake/10-fake.conflist".into(),
        })
    }

    fn add(&self, _: &NetConf, at: &Attachment) -> Result<Value, NetError> {
        let mut calls = self.calls.lock().unwrap();
        calls.push(format!("ADD {}", at.id));
        if let Some(msg) = self.fail_add.lock().unwrap().clone() {
            return Err(NetError::Plugin {
                kind: "bridge".into(),
                cmd: "ADD",
                network: "fake".into(),
                msg,
            });
        }
        let n = calls.iter().filter(|c| c.starts_with("ADD")).count();
        Ok(json!({"ips": [{"address": format!("10.88.0.{}/24", n + 1)}]}))
    }

    fn check(&self, _: &NetConf, at: &Attachment, _: &Value) -> Result<(), NetError> {
        self.calls.lock().unwrap().push(format!("CHECK {}", at.id));
        Ok(())
    }

    fn del(&self, _: &NetConf, at: &Attachment, _: Option<&Value>) -> Result<(), NetError> {
        self.calls.lock().unwrap().push(format!("DEL {}", at.id));
        Ok(())
    }

    fn describe(&self) -> Value {
        json!({"cniConfDir": "/fake"})
    }
}

/// Namespaces as plain files under the pin directory.
#[derive(Default)]
pub struct FakeNamespaces;

impl Namespaces for FakeNamespaces {
    fn pin(&self, dir: &Path, want: &Wanted) -> Result<Pinned, NetError> {
        std::fs::create_dir_all(dir).map_err(|e| NetError::io("creating the pin dir", e))?;
        let mut p = Pinned::default();
        for (on, name, slot) in [
            (want.net, "net", &mut p.net),
            (want.ipc, "ipc", &mut p.ipc),
            (want.uts, "uts", &mut p.uts),
        ] {
            if on {
                std::fs::write(dir.join(name), "").map_err(|e| NetError::io("pinning", e))?;
                *slot = Some(dir.join(name));
            }
        }
        Ok(p)
    }

    fn unpin(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
    }

    fn alive(&self, p: &Pinned) -> bool {
        [&p.net, &p.ipc, &p.uts].into_iter().flatten().all(|f| f.exists())
    }
}
