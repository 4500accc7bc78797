//! criusd's RuntimeService: Version, Status (NetworkReady from the CNI config), RuntimeConfig; pod sandboxes:
//! pinned namespaces with the pod's hostname, a real CNI network (Debian's bridge and host-local plugins, on a
//! bridge and subnet of the test's own), records that survive a criusd restart, idempotent Stop and Remove, and
//! nothing left behind; and containers in them, through the pod's shim: status, logs, ExecSync, stats, listing,
//! stop, log reopening, events. Each case has a criusd of its own. What needs cgroup v2 (resources) is in
//! vm_pods.rs.

mod clients;
mod containers;
mod isolation;
mod sandboxes;

use std::path::Path;
use std::process::Command;

use crius_api::cri;
use crius_privileged_tests::cri::{
    Client, Pod, client, config, container, containers, create, cremove, cstatus, cstop, entries, eventually,
    host_network, import_busybox, in_20s, list, records, remove, restart, run, start, status, stop,
    wait_state,
};
use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
use tonic::Code;

async fn network_ready(c: &mut Client) -> cri::RuntimeCondition {
    let st = c
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    st.status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .unwrap()
}

fn nsenter(args: &[&str]) -> String {
    let out = Command::new("nsenter").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "nsenter {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// criusd with an empty CNI config directory (the directory goes with the value).
fn without_a_network_config() -> (Daemon, tempfile::TempDir) {
    require_root();
    let empty = tempfile::tempdir().unwrap();
    let d = Daemon::start(&["--cni-conf-dir", &empty.path().display().to_string()]);
    (d, empty)
}

/// Pids of processes whose command line is `cmd`.
fn pids_running(cmd: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmd)
        })
        .collect()
}
