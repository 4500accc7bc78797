//! UpdatePodSandboxResources (CRI 1.33+, in-place pod resize): kubelet has resized the pod's cgroup itself
//! and tells the runtime the pod's new totals. crius checks the sandbox and the resources, and writes them to
//! the pod cgroup too when it can: a `cgroup_parent` that names a directory below the cgroup2 mount, a path
//! under the cgroupfs driver or a slice under systemd's (whose properties stay kubelet's to set). A parent in
//! the other driver's form, or one not made yet, is left to kubelet. The sandbox's recorded config keeps the
//! resources it was run with (PodSandboxStatus does not report them).

use std::path::Path;

use crius_api::cri;

use crate::error::{Error, Result};
use crate::sandbox::Pods;

const CALL: &str = "UpdatePodSandboxResources";

/// What the pod cgroup is to hold: the containers' `resources` plus the RuntimeClass's `overhead`, as kubelet
/// sizes the pod cgroup. A limit the containers leave unset (zero) stays unset.
pub fn pod_total(
    resources: &cri::LinuxContainerResources,
    overhead: Option<&cri::LinuxContainerResources>,
) -> cri::LinuxContainerResources {
    let mut total = resources.clone();
    let Some(o) = overhead else { return total };
    let add = |a: i64, b: i64| if a > 0 { a.saturating_add(b.max(0)) } else { a };
    total.memory_limit_in_bytes = add(total.memory_limit_in_bytes, o.memory_limit_in_bytes);
    total.cpu_shares = add(total.cpu_shares, o.cpu_shares);
    // A quota is per period: the overhead's adds only over the same period.
    if o.cpu_period == 0 || o.cpu_period == total.cpu_period {
        total.cpu_quota = add(total.cpu_quota, o.cpu_quota);
    }
    total
}

impl Pods {
    /// UpdatePodSandboxResources of sandbox `id`: NotFound naming it if there is none; the resources are
    /// checked as UpdateContainerResources checks a container's, then written to the pod cgroup if crius can
    /// (see the module doc). A write the kernel refuses is the answer, naming the file.
    pub fn update_pod_resources(
        &self,
        id: &str,
        overhead: Option<&cri::LinuxContainerResources>,
        resources: Option<&cri::LinuxContainerResources>,
    ) -> Result<()> {
        let s = self.get(CALL, id)?;
        if let Some(o) = overhead {
            crate::validate::resources(CALL, "overhead", o)?;
        }
        let Some(r) = resources else { return Ok(()) };
        crate::validate::resources(CALL, "resources", r)?;
        let parent = s.cgroup_parent();
        let Some(cgroup) = writable_pod_cgroup(self.cgroup_driver(), parent) else {
            tracing::info!(sandbox = %s.record.id, cgroup_parent = parent, "pod resources: the pod cgroup is kubelet's to update");
            return Ok(());
        };
        let total = pod_total(r, overhead);
        let mut oci = crate::convert::resources(Some(&total), crate::convert::cpu_controller())?;
        // Limits only: the device rules are each container's.
        oci.set_devices(None);
        cgroup.apply(&oci).map_err(|e| {
            Error::io(
                format!(
                    "{CALL}: writing sandbox {id}'s pod cgroup {}",
                    cgroup.dir.display()
                ),
                std::io::Error::other(e.to_string()),
            )
        })?;
        tracing::info!(sandbox = %s.record.id, cgroup = %cgroup.dir.display(), "pod resources updated");
        Ok(())
    }
}

/// The pod cgroup of `parent` if crius may write it: a directory below the cgroup2 mount that exists, named by a
/// cgroupfs path or, under the systemd `driver`, by its slice.
pub(super) fn writable_pod_cgroup(
    driver: crate::cgroup_driver::Driver,
    parent: &str,
) -> Option<crius_oci::cgroup::Cgroup> {
    let dir = driver.pod_dir(parent)?;
    let cgroup = crius_oci::cgroup::Cgroup::resolve(Some(&Path::new("/").join(dir)), "").ok()?;
    cgroup.dir.is_dir().then_some(cgroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(mem: i64, shares: i64, quota: i64, period: i64) -> cri::LinuxContainerResources {
        cri::LinuxContainerResources {
            memory_limit_in_bytes: mem,
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            ..Default::default()
        }
    }

    #[test]
    fn the_pod_total_adds_the_overhead_to_what_the_containers_limit() {
        let r = res(100 << 20, 512, 50_000, 100_000);
        assert_eq!(pod_total(&r, None), r);
        let total = pod_total(&r, Some(&res(10 << 20, 2, 5_000, 100_000)));
        assert_eq!(total, res(110 << 20, 514, 55_000, 100_000));
        // Unlimited stays unlimited; a quota over another period is not added.
        let total = pod_total(
            &res(0, 0, 50_000, 100_000),
            Some(&res(10 << 20, 2, 5_000, 50_000)),
        );
        assert_eq!(total, res(0, 0, 50_000, 100_000));
    }

    #[test]
    fn an_unknown_sandbox_is_not_found_and_a_known_one_without_a_parent_is_fine() {
        use std::sync::Arc;

        use crate::network::fake::{FakeNamespaces, FakeNetwork};
        let dir = tempfile::tempdir().unwrap();
        let pods = Pods::open(
            &dir.path().join("sandboxes"),
            dir.path().join("ns"),
            dir.path().join("files"),
            Arc::new(FakeNetwork::default()),
            Arc::new(FakeNamespaces),
            Arc::new(crate::store::intents::Intents::open(&dir.path().join("intents")).unwrap()),
        )
        .unwrap();
        let e = pods
            .update_pod_resources("nope", None, Some(&res(64 << 20, 0, 0, 0)))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        assert!(e.to_string().contains("sandbox \"nope\""), "{e}");
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "uid-p".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let id = pods.run(config, String::new()).unwrap();
        pods.update_pod_resources(&id, None, Some(&res(64 << 20, 0, 0, 0)))
            .unwrap();
        let e = pods
            .update_pod_resources(&id, None, Some(&res(4096, 0, 0, 0)))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains("UpdatePodSandboxResources"), "{e}");
    }

    #[test]
    fn only_an_existing_cgroupfs_parent_is_written() {
        use crate::cgroup_driver::Driver::{Cgroupfs, Systemd};
        assert!(writable_pod_cgroup(Cgroupfs, "").is_none());
        assert!(
            writable_pod_cgroup(Systemd, "/kubepods/pod1").is_none(),
            "not a slice"
        );
        assert!(writable_pod_cgroup(Cgroupfs, "/").is_none());
        assert!(writable_pod_cgroup(Cgroupfs, "kubepods.slice:crius:abc").is_none());
        assert!(writable_pod_cgroup(Cgroupfs, "/crius-test-no-such-parent/pod1").is_none());
        assert!(writable_pod_cgroup(Cgroupfs, "/../etc").is_none());
    }
}
