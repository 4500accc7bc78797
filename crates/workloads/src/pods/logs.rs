//! Where `crius logs` reads: the CRI log file of a pod's container (its current run or the previous one),
//! and whether that run still goes on (for `-f`).

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

use crate::{Error, Kind};

use super::Pods;
use crate::{key, ns, status};

impl Pods {
    /// The log file of container `container` of pod `namespace/pod` (its only or first main container when
    /// empty), of its previous run with `previous`, and a watch that turns false when that run has ended.
    pub(crate) fn log_file(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<(PathBuf, tokio::sync::watch::Receiver<bool>), Error> {
        let namespace = ns(namespace).to_string();
        let k = key(&namespace, pod);
        let (path, name) = self.with_container(&namespace, pod, container, |p, name| {
            let st = p
                .status
                .as_ref()
                .and_then(|s| status::status_of(s, &name))
                .cloned();
            let restarts = st.as_ref().map_or(0, |c| c.restart_count).max(0) as u32;
            let attempt = if previous {
                if restarts == 0 {
                    return Err(Error::invalid(format!(
                        "previous terminated container {name:?} in pod {pod:?} not found"
                    )));
                }
                restarts - 1
            } else {
                restarts
            };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let dir = self
                .inner
                .engine
                .log_root
                .join(format!("{namespace}_{pod}_{uid}"));
            Ok((dir.join(&name).join(format!("{attempt}.log")), name))
        })?;
        if !path.exists() {
            return Err(Error::invalid(format!(
                "container {name:?} in pod {pod:?} is waiting to start: no log yet"
            )));
        }
        let (tx, rx) = tokio::sync::watch::channel(!previous);
        if !previous {
            let me = self.clone();
            tokio::spawn(async move {
                loop {
                    let alive = me
                        .store()
                        .pods()
                        .get(&k)
                        .is_some_and(|e| status::running(&e.record.pod, &name));
                    if !alive {
                        let _ = tx.send(false);
                        return;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                        () = tx.closed() => return,
                    }
                }
            });
        }
        Ok((path, rx))
    }

    /// `f` of pod `namespace/pod` and the name of its container `container` (its only or first main container
    /// when empty): NotFound without the pod, InvalidArgument (naming the pod's containers) when it has no
    /// such container. For the verbs that name a container (`logs`, `checkpoint`).
    pub(super) fn with_container<T>(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        f: impl FnOnce(&Pod, String) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let o = self.store().pods();
        let e = o.get(&key(ns(namespace), pod)).ok_or_else(|| Error::NotFound {
            kind: Kind::Pod,
            name: pod.into(),
        })?;
        let p = &e.record.pod;
        let spec = p.spec.clone().unwrap_or_default();
        let name = if container.is_empty() {
            spec.containers
                .first()
                .map(|c| c.name.clone())
                .unwrap_or_default()
        } else {
            container.to_string()
        };
        if status::role(p, &name).is_none() {
            let names: Vec<String> = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .map(|c| c.name.clone())
                .collect();
            return Err(Error::invalid(format!(
                "container {name} is not valid for pod {pod}: choose one of: [{}]",
                names.join(" ")
            )));
        }
        f(p, name)
    }
}
