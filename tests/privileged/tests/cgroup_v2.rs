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

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn events_reports_an_oom_kill_and_ends_with_the_container() {
    // runc's events.bats "events oom": `events` prints {"type":"oom","id":ID} when the OOM killer takes a
    // process of the container, and returns once the container is deleted (crius-runc used to print stats
    // only, forever: the bats run stalled there).
    require_pure_cgroup_v2();
    use std::io::BufRead;
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/tmp/testprog",
        "type": "bind", "source": crius_test_support::testprog_binary(), "options": ["bind", "ro"]}));
    b.config["linux"]["resources"]["memory"] = json!({"limit": 33554432, "swap": 33554432});
    let id = started(&rt, &b);
    let mut events = rt
        .command(&["events", "--interval", "1s", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = events.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait = std::time::Duration::from_secs(60);
    let first = rx.recv_timeout(wait).expect("a first stats event");
    assert!(
        first.starts_with(&format!(r#"{{"type":"stats","id":"{id}","data":"#)),
        "{first}"
    );
    let status = rt
        .command(&["exec", "-d", &id, "/tmp/testprog", "--alloc", "64"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "exec -d: {status}");
    let oom = format!(r#"{{"type":"oom","id":"{id}"}}"#);
    loop {
        let line = rx.recv_timeout(wait).expect("an oom event within 60 s");
        if line == oom {
            break;
        }
        assert!(line.starts_with(r#"{"type":"stats""#), "{line}");
    }
    assert!(read(&b, "memory.events").contains("oom_kill 1"));
    rt.ok(&["delete", "--force", &id]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let code = loop {
        if let Some(s) = events.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = events.kill();
            panic!("events still running 20 s after delete --force");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(code.success(), "events: {code}");
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn delete_force_removes_the_cgroups_made_below_the_containers() {
    // runc's delete.bats "delete --force in cgroupv2 with subcgroups": the container's process moved into
    // sub-cgroups of its own; delete --force kills it and removes them all (crius-runc's rmdir got EBUSY).
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = started(&rt, &b);
    let status = rt
        .command(&["exec", "-d", &id, "sleep", "1001"])
        .status()
        .unwrap();
    assert!(status.success(), "exec -d: {status}");
    let sub = cgroup_dir(&b).join("foo/bar");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir(cgroup_dir(&b).join("other")).unwrap();
    // `exec -d` returns once the process is started, which with runc can be before its `runc init` has
    // exec'd the command: wait for the sleep to show up, rather than read the cgroup once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let pid = loop {
        let found = read(&b, "cgroup.procs").lines().find_map(|p| {
            let cmdline = std::fs::read_to_string(format!("/proc/{p}/cmdline")).ok()?;
            cmdline.contains("1001").then(|| p.to_string())
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the exec'd sleep is not in the container's cgroup after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::fs::write(sub.join("cgroup.procs"), &pid).unwrap();
    rt.ok(&["delete", "--force", &id]);
    assert!(!rt.run(&["state", &id]).status.success(), "state after delete");
    assert!(!cgroup_dir(&b).exists(), "cgroup left behind");
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn exec_falls_back_to_inits_cgroup_when_the_containers_takes_no_process() {
    // runc's exec.bats "exec --cgroup subcgroup [v2]": init moved to a sub-cgroup and a domain controller
    // enabled below the container's cgroup, which then takes no process (EBUSY): a plain exec joins init's
    // cgroup, `--cgroup /` fails with runc's words, as does a missing sub-cgroup; `--cgroup foobar` works.
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = started(&rt, &b);
    let dir = cgroup_dir(&b);
    let pid = rt.state(&id)["pid"].as_i64().unwrap().to_string();
    std::fs::create_dir(dir.join("foobar")).unwrap();
    std::fs::write(dir.join("foobar/cgroup.procs"), &pid).unwrap();
    let cgroup_of = |args: &[&str]| {
        let mut all = vec!["exec"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[id.as_str(), "cat", "/proc/self/cgroup"]);
        rt.run(&all)
    };
    let out = cgroup_of(&[]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim_end()
            .ends_with(&b.cgroups_path())
    );
    std::fs::write(dir.join("cgroup.subtree_control"), "+memory").unwrap();
    let out = cgroup_of(&[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.trim_end().ends_with("/foobar"), "{said}");
    let out = cgroup_of(&["--cgroup", "/"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(" adding pid ") && err.contains("/cgroup.procs: device or resource busy"),
        "{err}"
    );
    let out = cgroup_of(&["--cgroup", "nonexistent"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(" adding pid ") && err.contains("/nonexistent/cgroup.procs: no such file "),
        "{err}"
    );
    let out = cgroup_of(&["--cgroup", "foobar"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim_end()
            .ends_with("/foobar")
    );
    rt.ok(&["delete", "--force", &id]);
    assert!(!dir.exists(), "cgroup left behind");
}

#[test]
#[ignore = "needs cgroup v2: run through hack/test.sh"]
fn update_takes_sizes_with_units_and_lifts_swap_with_memory() {
    // runc's update.bats: `update --memory 50M` (crius-runc took bytes only); `--memory -1` after a swap limit
    // (crius-runc refused: a swap limit without a memory limit).
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = started(&rt, &b);
    rt.ok(&["update", &id, "--memory", "50M"]);
    assert_eq!(read(&b, "memory.max"), "52428800");
    rt.ok(&[
        "update",
        &id,
        "--memory",
        "1.5g",
        "--memory-reservation",
        "512KiB",
    ]);
    assert_eq!(read(&b, "memory.max"), "1610612736");
    assert_eq!(read(&b, "memory.low"), "524288");
    // A memory+swap total, then an unlimited memory limit alone: swap unlimited too, as runc does.
    rt.ok(&["update", &id, "--memory", "52428800", "--memory-swap", "96468992"]);
    assert_eq!(read(&b, "memory.swap.max"), "44040192");
    rt.ok(&["update", &id, "--memory", "-1"]);
    assert_eq!(read(&b, "memory.max"), "max");
    assert_eq!(read(&b, "memory.swap.max"), "max");
    rt.ok(&["delete", "--force", &id]);
}
