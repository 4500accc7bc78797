//! cgroup v2 limits: at create, live updates up and down with the same pid, refusal below usage, pids.max, the
//! shares→weight mapping. Needs a pure cgroup-v2 kernel: hack/test.sh runs this file inside the VM (hack/vm),
//! once with crius-runc and once with runc (`crius_only_*` excepted).

use std::path::PathBuf;

use crius_test_support::{Bundle, Runtime, cgroup2_mount, require_pure_cgroup_v2, unique};
use serde_json::json;

fn cgroup_dir(b: &Bundle) -> PathBuf {
    cgroup2_mount().join(b.cgroups_path().trim_start_matches('/'))
}

fn read(b: &Bundle, file: &str) -> String {
    let p = cgroup_dir(b).join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn started(rt: &Runtime, b: &Bundle) -> String {
    let id = unique("cg");
    rt.create_started(&id, b);
    id
}

fn update(rt: &Runtime, b: &Bundle, id: &str, res: serde_json::Value) -> std::process::Output {
    let file = b.path().join("resources.json");
    std::fs::write(&file, res.to_string()).unwrap();
    rt.run(&["update", "--resources", file.to_str().unwrap(), id])
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn limits_are_in_place_at_create() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 50000, "period": 100000});
    b.config["linux"]["resources"]["memory"] = json!({"limit": 67108864});
    b.config["linux"]["resources"]["pids"] = json!({"limit": 64});
    b.config["linux"]["resources"]["cpu"]["cpus"] = json!("0");
    b.config["linux"]["resources"]["cpu"]["mems"] = json!("0");
    b.config["linux"]["resources"]["hugepageLimits"] = json!([{"pageSize": "2MB", "limit": 4194304}]);
    // The VM has a scratch disk /dev/vda for io limits.
    let dev = std::fs::read_to_string("/sys/block/vda/dev").expect("the VM's /dev/vda");
    let (major, minor) = dev.trim().split_once(':').unwrap();
    let (major, minor): (u64, u64) = (major.parse().unwrap(), minor.parse().unwrap());
    b.config["linux"]["resources"]["blockIO"] =
        json!({"throttleReadBpsDevice": [{"major": major, "minor": minor, "rate": 1048576}]});
    let id = started(&rt, &b);
    assert_eq!(read(&b, "cpu.max"), "50000 100000");
    assert_eq!(read(&b, "memory.max"), "67108864");
    assert_eq!(read(&b, "pids.max"), "64");
    assert_eq!(read(&b, "cpuset.cpus"), "0");
    assert_eq!(read(&b, "cpuset.mems"), "0");
    assert_eq!(read(&b, "hugetlb.2MB.max"), "4194304");
    let io = read(&b, "io.max");
    assert!(
        io.starts_with(&format!("{major}:{minor} rbps=1048576 ")),
        "io.max: {io}"
    );
    let pid = rt.state(&id)["pid"].as_i64().unwrap();
    assert!(read(&b, "cgroup.procs").lines().any(|l| l == pid.to_string()));
    rt.ok(&["delete", "--force", &id]);
    assert!(!cgroup_dir(&b).exists(), "cgroup left behind");
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn update_raises_and_lowers_limits_live() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 50000, "period": 100000});
    b.config["linux"]["resources"]["memory"] = json!({"limit": 67108864});
    let id = started(&rt, &b);
    let pid = rt.state(&id)["pid"].clone();

    let out = update(
        &rt,
        &b,
        &id,
        json!({"cpu": {"quota": 200000, "period": 100000}, "memory": {"limit": 134217728}}),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read(&b, "cpu.max"), "200000 100000");
    assert_eq!(read(&b, "memory.max"), "134217728");

    rt.ok(&["update", "--cpu-quota", "20000", "--memory", "33554432", &id]);
    assert_eq!(read(&b, "cpu.max"), "20000 100000");
    assert_eq!(read(&b, "memory.max"), "33554432");

    assert_eq!(rt.status(&id), "running");
    assert_eq!(
        rt.state(&id)["pid"],
        pid,
        "an update must not restart the container"
    );
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn pids_max_stops_a_fork_bomb() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        "for i in $(seq 1 40); do sleep 1000 & done; sleep 1000",
    ]);
    b.config["linux"]["resources"]["pids"] = json!({"limit": 10});
    let id = started(&rt, &b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !read(&b, "pids.events").starts_with("max ") || read(&b, "pids.events") == "max 0" {
        assert!(
            std::time::Instant::now() < deadline,
            "pids.max never hit: {}",
            read(&b, "pids.events")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let current: u32 = read(&b, "pids.current").parse().unwrap();
    assert!(current <= 10, "pids.current {current} above pids.max 10");
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn crius_only_memory_limit_below_usage_is_refused() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        "head -c 41943040 /dev/zero > /dev/shm/fill; sleep 1000",
    ]);
    b.config["linux"]["resources"]["memory"] = json!({"limit": 134217728});
    let id = started(&rt, &b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while read(&b, "memory.current").parse::<u64>().unwrap() < 40 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the container never used 40 MiB"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = rt.run(&["update", "--memory", "10485760", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "lowering below usage must fail");
    assert!(
        err.contains("10485760") && err.contains("current usage"),
        "the error names both numbers: {err}"
    );
    assert_eq!(read(&b, "memory.max"), "134217728", "the limit must be unchanged");
    assert_eq!(rt.status(&id), "running", "nothing may be OOM-killed");
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn crius_only_shares_map_to_weight_quadratically_and_unified_keys_apply() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["linux"]["resources"]["cpu"] = json!({"shares": 1024});
    b.config["linux"]["resources"]["memory"] = json!({"limit": 67108864, "swap": 100663296});
    b.config["linux"]["resources"]["unified"] = json!({"memory.oom.group": "1", "memory.high": "50331648"});
    let id = started(&rt, &b);
    assert_eq!(
        read(&b, "cpu.weight"),
        "100",
        "1024 shares are cpu.weight 100 (the linear formula gave 39)"
    );
    assert_eq!(read(&b, "memory.oom.group"), "1");
    assert_eq!(read(&b, "memory.high"), "50331648");
    if cgroup_dir(&b).join("memory.swap.max").exists() {
        assert_eq!(
            read(&b, "memory.swap.max"),
            "33554432",
            "swap.max = OCI swap - limit"
        );
    }
    for (shares, weight) in [(2, "1"), (262144, "10000")] {
        rt.ok(&["update", "--cpu-share", &shares.to_string(), &id]);
        assert_eq!(read(&b, "cpu.weight"), weight, "{shares} shares");
    }
    rt.ok(&["delete", "--force", &id]);
}

/// The controllers a cgroup's children get: its `cgroup.controllers`.
fn offered(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn a_container_without_limits_has_every_controller_and_is_charged_from_the_start() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = Bundle::new(&[
        "sh",
        "-c",
        "head -c 16777216 /dev/zero > /dev/shm/fill; sleep 1000",
    ]);
    let id = unique("cg");
    rt.create(&id, &b, &[]);
    let dir = cgroup_dir(&b);
    let have = offered(&dir);
    for c in ["cpu", "io", "memory", "pids"] {
        assert!(have.iter().any(|h| h == c), "{c} missing: {have:?}");
    }
    assert_eq!(have, offered(dir.parent().unwrap()), "all its parent offers");
    assert_eq!(read(&b, "memory.max"), "max");
    rt.ok(&["start", &id]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while read(&b, "memory.current").parse::<u64>().unwrap() < 16 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the 16 MiB in /dev/shm never showed in memory.current"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(read(&b, "pids.current").parse::<u64>().unwrap() >= 1);
    rt.ok(&["delete", "--force", &id]);
}
