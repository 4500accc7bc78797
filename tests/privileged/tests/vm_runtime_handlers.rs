//! The VM twin of runtime_handlers.rs: crun, which refuses the host's hybrid cgroup layout, runs a pod's
//! containers on pure cgroup v2, also for a container made after a criusd restart; runc beside it.

use crius_privileged_tests::handlers::pods_on;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and cgroup v2: run through hack/test.sh (in the VM)"]
async fn pods_run_on_crun_and_runc_on_cgroup_v2_also_after_a_restart() {
    pods_on(&[("on-crun", "crun"), ("on-runc", "runc")]).await;
}
