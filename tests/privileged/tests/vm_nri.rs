//! NRI plugins changing cpu.weight, under a pure cgroup-v2 kernel (this host's hybrid cgroups give containers
//! no cpu controller): the test plugin gives a container 2048 cpu shares in its CreateContainer adjustment,
//! and another, already running, 512 shares with an UpdateContainers call of its own, then 4096 in the answer
//! to a third container's create; each container's cgroup shows the weight (crius's shares-to-weight
//! formula: 2048 → 174, 512 → 59, 4096 → 303). hack/test.sh runs this
//! binary inside hack/vm.

use crius_privileged_tests::cri::{Pod, container, eventually, in_20s};
use crius_privileged_tests::nri::{LOOP, connect, nri_args};
use crius_test_support::require_pure_cgroup_v2;

fn weight(p: &Pod, id: &str) -> String {
    let path = p.cgroup(id).join("cpu.weight");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a pure cgroup v2 kernel: hack/test.sh runs it in hack/vm"]
async fn a_plugin_sets_cpu_weight_at_create_and_updates_another_container() {
    require_pure_cgroup_v2();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    let mut p = Pod::in_the_vm_with("weights", nri_args(h)).await;
    let plugin = connect(h, "40", "weights", "weight,update,bump", &h.join("weights.log"));

    let target = p.started(container("target", "busybox", LOOP)).await;
    assert_eq!(weight(&p, &target), "100", "no shares asked for: the default");
    let weighted = p.started(container("weighted", "busybox", LOOP)).await;
    assert_eq!(weight(&p, &weighted), "174", "2048 shares from the adjustment");

    // The trigger's create makes the plugin update the target, outside any event.
    p.create(container("trigger", "busybox", LOOP)).await.unwrap();
    eventually(
        in_20s(),
        || {
            format!(
                "target's cpu.weight {}; plugin: {:?}",
                weight(&p, &target),
                plugin.lines()
            )
        },
        || weight(&p, &target) == "59",
    )
    .await;
    // The answer reaches the plugin after the update is applied.
    eventually(
        in_20s(),
        || format!("{:?}", plugin.lines()),
        || plugin.lines().iter().any(|l| l == "UpdateContainers target ok"),
    )
    .await;
    // The answer to the bumper's create updates the target too, applied by that create.
    p.create(container("bumper", "busybox", LOOP)).await.unwrap();
    assert_eq!(weight(&p, &target), "303", "4096 shares from a create's update");
    println!(
        "cpu.weight: target {} (updated), weighted {}",
        weight(&p, &target),
        weight(&p, &weighted)
    );
}
