//! A pod's user namespace (`hostUsers: false`): NamespaceOption's `userns_options` with mode POD and
//! kubelet's uid and gid mappings. The namespace is made once for the pod, with the pod's network, IPC and UTS
//! namespaces owned by it ([`crate::network::netns`]), pinned, and joined by every container; the containers'
//! rootfs and kubelet's volumes (a Mount with `uidMappings`/`gidMappings`) are idmapped mounts with the same
//! mappings, so the files the host's root owns are the container root's.
//!
//! What is accepted, as containerd does: NODE (the host's user namespace, as without the option); POD with
//! exactly one uid and one gid mapping, each mapping container id 0, of a length of at least 1, within the
//! 32-bit ids; the pod's user namespace with the pod's own network, IPC and PID namespaces (a user namespace
//! with the host's network is not advertised: Status's `user_namespaces_host_network` is false). A PID
//! namespace the pod's containers share is held in the user namespace ([`crate::network::pidns`]). CONTAINER
//! and TARGET are refused: a container's user namespace is its pod's. A container's `userns_options` must be
//! its pod's.

use crius_api::cri;
use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder};

use crate::error::{Error, Result};

/// A user namespace's mappings, as the runtime spec names them: (uids, gids).
pub type Maps = (Vec<LinuxIdMapping>, Vec<LinuxIdMapping>);

fn mode_name(mode: i32) -> String {
    cri::NamespaceMode::try_from(mode).map_or_else(|_| mode.to_string(), |m| m.as_str_name().into())
}

/// The OCI mappings of CRI ones.
pub fn oci_maps(ids: &[cri::IdMapping]) -> Vec<LinuxIdMapping> {
    ids.iter()
        .map(|m| {
            LinuxIdMappingBuilder::default()
                .container_id(m.container_id)
                .host_id(m.host_id)
                .size(m.length)
                .build()
                .expect("every field is set")
        })
        .collect()
}

/// Checks one list of mappings (`field`: where it is, for the error).
fn check_maps(call: &'static str, field: String, ids: &[cri::IdMapping]) -> Result<()> {
    let [m] = ids else {
        return Err(Error::invalid(
            call,
            field,
            format!(
                "has {} mappings: a pod's user namespace takes exactly one",
                ids.len()
            ),
        ));
    };
    if m.container_id != 0 {
        return Err(Error::invalid(
            call,
            field,
            format!(
                "maps container id {} up: container id 0 must be mapped",
                m.container_id
            ),
        ));
    }
    if m.length == 0 {
        return Err(Error::invalid(call, field, "maps a length of 0"));
    }
    if m.host_id == 0 {
        return Err(Error::invalid(
            call,
            field,
            format!(
                "maps host ids 0 to {}: a range with the host's root (id 0) would make the pod's root the \
                 host's; map ids above 0 (kubelet's range starts at 65536)",
                u64::from(m.length) - 1
            ),
        ));
    }
    if u64::from(m.host_id) + u64::from(m.length) > u64::from(u32::MAX) {
        return Err(Error::invalid(
            call,
            field,
            format!(
                "maps host ids {} to {}, past the 32-bit ids",
                m.host_id,
                u64::from(m.host_id) + u64::from(m.length) - 1
            ),
        ));
    }
    Ok(())
}

/// The mappings of a pod's namespace options if it asks for a user namespace of its own (None: the host's);
/// what it asks is checked (`at`: where the options are, for the error).
pub fn wanted(call: &'static str, at: &str, ns: Option<&cri::NamespaceOption>) -> Result<Option<Maps>> {
    let Some(u) = ns.and_then(|n| n.userns_options.as_ref()) else {
        return Ok(None);
    };
    let field = |f: &str| format!("{at}.namespace_options.userns_options.{f}");
    match cri::NamespaceMode::try_from(u.mode) {
        Ok(cri::NamespaceMode::Node) => return Ok(None),
        Ok(cri::NamespaceMode::Pod) => {}
        _ => {
            return Err(Error::invalid(
                call,
                field("mode"),
                format!(
                    "is {}: a pod's user namespace is the node's (NODE) or its own (POD)",
                    mode_name(u.mode)
                ),
            ));
        }
    }
    check_maps(call, field("uids"), &u.uids)?;
    check_maps(call, field("gids"), &u.gids)?;
    let ns = ns.expect("userns_options is in it");
    for (name, mode) in [("network", ns.network), ("pid", ns.pid), ("ipc", ns.ipc)] {
        if mode == cri::NamespaceMode::Node as i32 {
            return Err(Error::invalid(
                call,
                field("mode"),
                format!("is POD with the node's {name} namespace: a pod's user namespace needs its own"),
            ));
        }
    }
    Ok(Some((oci_maps(&u.uids), oci_maps(&u.gids))))
}

/// A container's `userns_options` (in `ctr`, if it has namespace options) against its pod's (`pod`): the
/// same, or none.
pub fn same_as_pod(
    call: &'static str,
    ctr: Option<&cri::NamespaceOption>,
    pod: &cri::NamespaceOption,
) -> Result<()> {
    let Some(mine) = ctr.and_then(|n| n.userns_options.as_ref()) else {
        return Ok(());
    };
    let node = cri::UserNamespace {
        mode: cri::NamespaceMode::Node as i32,
        ..Default::default()
    };
    let pods = pod.userns_options.clone().unwrap_or_else(|| node.clone());
    let norm = |u: &cri::UserNamespace| {
        if u.mode == node.mode {
            node.clone()
        } else {
            u.clone()
        }
    };
    if norm(mine) != norm(&pods) {
        return Err(Error::invalid(
            call,
            "linux.security_context.namespace_options.userns_options",
            format!(
                "is {} with {} uid and {} gid mappings, not its pod's ({}): a container's user namespace is its pod's",
                mode_name(mine.mode),
                mine.uids.len(),
                mine.gids.len(),
                mode_name(pods.mode)
            ),
        ));
    }
    Ok(())
}

/// Idmaps a container's `rootfs` (its overlay, mounted) with the user namespace of its pod `s`, if it has one.
pub fn idmap_rootfs(rootfs: &std::path::Path, s: &crate::store::sandbox::Sandbox) -> Result<()> {
    let Some(user) = &s.record.namespaces.user else {
        return Ok(());
    };
    let ns = crate::validate::namespace_options(&s.config);
    let Some((uids, gids)) = wanted("CreateContainer", "the pod's linux.security_context", Some(&ns))? else {
        return Ok(());
    };
    let root = (uids[0].host_id(), gids[0].host_id());
    crius_oci::rootfs::idmap_overlay::idmap_overlay(rootfs, user, root)
        .map_err(|e| Error::io("idmapping the rootfs", std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(container_id: u32, host_id: u32, length: u32) -> cri::IdMapping {
        cri::IdMapping {
            container_id,
            host_id,
            length,
        }
    }

    fn opts(mode: cri::NamespaceMode, ids: Vec<cri::IdMapping>) -> cri::NamespaceOption {
        cri::NamespaceOption {
            userns_options: Some(cri::UserNamespace {
                mode: mode as i32,
                uids: ids.clone(),
                gids: ids,
            }),
            ..Default::default()
        }
    }

    fn refused(o: &cri::NamespaceOption) -> String {
        let e = wanted("RunPodSandbox", "linux.security_context", Some(o)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.to_string()
    }

    #[test]
    fn node_and_one_mapping_of_id_0_are_taken() {
        assert_eq!(wanted("T", "x", None).unwrap(), None);
        assert_eq!(
            wanted("T", "x", Some(&opts(cri::NamespaceMode::Node, vec![]))).unwrap(),
            None
        );
        let (u, g) = wanted(
            "T",
            "x",
            Some(&opts(cri::NamespaceMode::Pod, vec![map(0, 1000, 100000)])),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (u[0].container_id(), u[0].host_id(), u[0].size()),
            (0, 1000, 100000)
        );
        assert_eq!(u, g);
    }

    #[test]
    fn what_critest_and_containerd_refuse_is_invalid_argument_naming_the_field() {
        let at = "linux.security_context.namespace_options.userns_options";
        let two = vec![map(0, 1000, 100000), map(0, 2000, 100000)];
        let msg = refused(&opts(cri::NamespaceMode::Pod, two));
        assert!(msg.contains(&format!("{at}.uids has 2 mappings")), "{msg}");
        let msg = refused(&opts(cri::NamespaceMode::Pod, vec![map(1, 1000, 100000)]));
        assert!(
            msg.contains(&format!("{at}.uids maps container id 1")) && msg.contains("0 must be mapped"),
            "{msg}"
        );
        for mode in [cri::NamespaceMode::Container, cri::NamespaceMode::Target] {
            let msg = refused(&opts(mode, vec![]));
            assert!(
                msg.contains(&format!("{at}.mode is {}", mode.as_str_name())),
                "{msg}"
            );
        }
        let msg = refused(&opts(cri::NamespaceMode::Pod, vec![]));
        assert!(msg.contains("has 0 mappings"), "{msg}");
        let msg = refused(&opts(cri::NamespaceMode::Pod, vec![map(0, 0, 65536)]));
        assert!(
            msg.contains(&format!("{at}.uids maps host ids 0 to 65535")) && msg.contains("host's root"),
            "{msg}"
        );
        let msg = refused(&opts(cri::NamespaceMode::Pod, vec![map(0, 0, 1)]));
        assert!(msg.contains("maps host ids 0 to 0"), "{msg}");
        let msg = refused(&opts(cri::NamespaceMode::Pod, vec![map(0, u32::MAX - 10, 100)]));
        assert!(msg.contains("past the 32-bit ids"), "{msg}");
        let msg = refused(&cri::NamespaceOption {
            network: cri::NamespaceMode::Node as i32,
            ..opts(cri::NamespaceMode::Pod, vec![map(0, 1000, 10)])
        });
        assert!(msg.contains("the node's network namespace"), "{msg}");
    }

    #[test]
    fn a_container_s_user_namespace_is_its_pod_s() {
        let pod = opts(cri::NamespaceMode::Pod, vec![map(0, 1000, 10)]);
        assert!(same_as_pod("C", None, &pod).is_ok());
        assert!(same_as_pod("C", Some(&pod), &pod).is_ok());
        let other = opts(cri::NamespaceMode::Pod, vec![map(0, 2000, 10)]);
        let e = same_as_pod("C", Some(&other), &pod).unwrap_err();
        assert!(e.to_string().contains("not its pod's (POD)"), "{e}");
        let node = opts(cri::NamespaceMode::Node, vec![]);
        assert!(same_as_pod("C", Some(&node), &cri::NamespaceOption::default()).is_ok());
        assert!(same_as_pod("C", Some(&node), &pod).is_err());
    }

    /// The spec of a container with `mounts` in a pod with `pod_ns` and the user namespace pinned at
    /// `/ns/user` (if `pinned`), or why it is refused.
    fn spec_in(
        pod_ns: &cri::NamespaceOption,
        pinned: bool,
        ctr: cri::ContainerConfig,
    ) -> Result<serde_json::Value> {
        let sandbox = crate::store::sandbox::Sandbox {
            record: crate::store::sandbox::Record {
                namespaces: crate::network::Pinned {
                    net: Some("/ns/net".into()),
                    user: pinned.then(|| "/ns/user".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            config: cri::PodSandboxConfig {
                linux: Some(cri::LinuxPodSandboxConfig {
                    security_context: Some(cri::LinuxSandboxSecurityContext {
                        namespace_options: Some(pod_ns.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        };
        let input = crate::convert::Input {
            id: "c",
            config: &ctr,
            sandbox: &sandbox,
            sandbox_files: std::path::Path::new("/pod"),
            image_config: &serde_json::json!({"config": {"Cmd": ["sh"]}}),
            rootfs: std::path::Path::new("/rootfs"),
            pid_target: None,
        };
        crate::convert::spec(&input, &crate::convert::Host::default())
            .map(|s| serde_json::to_value(s).unwrap())
    }

    #[test]
    fn containers_join_the_pod_s_user_namespace_and_their_volumes_are_idmapped() {
        use serde_json::json;
        let ids = vec![map(0, 1000, 100000)];
        let pod = opts(cri::NamespaceMode::Pod, ids.clone());
        let volume = cri::Mount {
            host_path: "/var/lib/vol".into(),
            container_path: "/vol".into(),
            uid_mappings: ids.clone(),
            gid_mappings: ids.clone(),
            ..Default::default()
        };
        let ctr = |ns: Option<cri::NamespaceOption>| cri::ContainerConfig {
            mounts: vec![volume.clone()],
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: ns,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = spec_in(&pod, true, ctr(Some(pod.clone()))).unwrap();
        let want = json!([{"containerID": 0, "hostID": 1000, "size": 100000}]);
        assert!(
            s["linux"]["namespaces"]
                .as_array()
                .unwrap()
                .contains(&json!({"type": "user", "path": "/ns/user"}))
        );
        assert_eq!(
            (&s["linux"]["uidMappings"], &s["linux"]["gidMappings"]),
            (&want, &want)
        );
        let vol = s["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/vol")
            .unwrap();
        assert_eq!((&vol["uidMappings"], &vol["gidMappings"]), (&want, &want));
        // Without options of its own the container gets the pod's.
        assert_eq!(
            spec_in(&pod, true, ctr(None)).unwrap()["linux"]["uidMappings"],
            want
        );

        let e = spec_in(&pod, true, ctr(Some(opts(cri::NamespaceMode::Node, vec![])))).unwrap_err();
        assert!(
            e.to_string()
                .contains("is NODE with 0 uid and 0 gid mappings, not its pod's (POD)"),
            "{e}"
        );
        let node = cri::NamespaceOption::default();
        let e = spec_in(&node, false, ctr(None)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.to_string()
                .contains("mounts[0].uidMappings is set in a pod without a user namespace"),
            "{e}"
        );
        let plain = spec_in(&node, false, cri::ContainerConfig::default()).unwrap();
        assert!(plain["linux"]["uidMappings"].is_null());
        assert!(
            !plain["linux"]["namespaces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["type"] == "user")
        );
    }
}
