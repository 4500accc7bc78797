//! Runtime handlers (RuntimeClass) on the host: criusd configured with runc and crun (see
//! crius_privileged_tests::handlers) runs a pod on the default handler, on crius-runc by name and on runc, each
//! container on its pod's runtime, also for a container made after a criusd restart. An unknown handler is
//! NotFound naming the configured ones; Status lists every handler; PodSandboxStatus and ListPodSandbox report
//! each pod's. crun refuses this host's hybrid cgroup layout ("cgroups in hybrid mode not supported"), so its
//! pod runs in the VM twin, vm_runtime_handlers.rs.

use crius_api::cri;
use crius_privileged_tests::handlers::{Handlers, RUNC, pods_on};
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn status_lists_every_handler_and_an_unknown_one_is_not_found() {
    let mut h = Handlers::start().await;
    let st =
        h.c.status(cri::StatusRequest { verbose: true })
            .await
            .unwrap()
            .into_inner();
    let names: Vec<_> = st.runtime_handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["", "crius-runc", "crun", "runc"]);
    // Recursive read-only mounts where the runtime lists `rro` (crius-runc, runc 1.1; not crun 1.8); user
    // namespaces where it lists idmapped mounts too (crius-runc alone: the default and by name).
    for rh in &st.runtime_handlers {
        let f = rh.features.unwrap();
        let rro = rh.name != "crun";
        assert_eq!(f.recursive_read_only_mounts, rro, "{rh:?}");
        let userns = rh.name.is_empty() || rh.name == "crius-runc";
        assert_eq!(f.user_namespaces, userns, "{rh:?}");
    }
    let info: serde_json::Value = serde_json::from_str(&st.info["runtimeHandlers"]).unwrap();
    let runc = info
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "runc")
        .unwrap();
    assert_eq!(runc["binary"], RUNC);
    assert_eq!(
        runc["runtimeFeatures"]["recursive_read_only_mounts"], true,
        "{info}"
    );

    let e = h.pod("kata-pod", "kata").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message().contains("\"kata\"") && e.message().contains("crius-runc, crun, runc"),
        "{}",
        e.message()
    );
    assert!(
        h.listed_handlers().await.is_empty(),
        "the refused pod left a sandbox"
    );
    // The name was not kept either: the same pod on a known handler runs.
    let id = h.pod("kata-pod", "runc").await.unwrap();
    h.remove_pod(&id, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn pods_run_on_the_default_on_crius_runc_and_on_runc_also_after_a_restart() {
    pods_on(&[
        ("on-default", ""),
        ("on-crius-runc", "crius-runc"),
        ("on-runc", "runc"),
    ])
    .await;
}
