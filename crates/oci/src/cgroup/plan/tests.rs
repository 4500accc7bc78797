use super::*;

fn res(json: &str) -> LinuxResources {
    serde_json::from_str(json).unwrap()
}

fn files(json: &str) -> Vec<(String, String)> {
    plan(&res(json))
        .unwrap()
        .into_iter()
        .map(|w| (w.file, w.value))
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn weight_formula_fixed_points() {
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(1024), 100);
    assert_eq!(shares_to_weight(262_144), 10_000);
    assert_eq!(shares_to_weight(1), 1);
    assert_eq!(shares_to_weight(u64::MAX), 10_000);
    // Monotonic over the whole range.
    let mut last = 0;
    for s in 2..=262_144u64 {
        let w = shares_to_weight(s);
        assert!(w >= last, "{s}");
        last = w;
    }
}

#[test]
fn cpu_and_memory() {
    let got = files(
        r#"{"cpu":{"shares":1024,"quota":50000,"period":100000,"cpus":"0-1"},
                      "memory":{"limit":1048576,"swap":3145728,"reservation":524288}}"#,
    );
    assert_eq!(
        got,
        pairs(&[
            ("cpu.weight", "100"),
            ("cpu.max", "50000 100000"),
            ("cpuset.cpus", "0-1"),
            ("memory.max", "1048576"),
            ("memory.low", "524288"),
            ("memory.swap.max", "2097152"),
        ])
    );
}

#[test]
fn zero_means_unset_and_minus_one_means_max() {
    assert!(
        files(r#"{"cpu":{"quota":0,"period":0,"shares":0},"memory":{"limit":0},"pids":{"limit":0}}"#)
            .is_empty()
    );
    assert_eq!(
        files(r#"{"cpu":{"quota":-1,"period":100000},"memory":{"limit":-1,"swap":-1},"pids":{"limit":-1}}"#),
        pairs(&[
            ("cpu.max", "max 100000"),
            ("memory.max", "max"),
            ("memory.swap.max", "max"),
            ("pids.max", "max")
        ])
    );
    assert_eq!(
        files(r#"{"cpu":{"quota":20000}}"#),
        pairs(&[("cpu.max", "20000")])
    );
}

#[test]
fn swap_needs_a_limit_at_least_as_big() {
    let e = plan(&res(r#"{"memory":{"swap":100}}"#)).unwrap_err().to_string();
    assert!(e.contains("needs a memory limit"), "{e}");
    let e = plan(&res(r#"{"memory":{"limit":200,"swap":100}}"#))
        .unwrap_err()
        .to_string();
    assert!(e.contains("below the memory limit"), "{e}");
}

#[test]
fn io_hugetlb_unified() {
    let got = files(
        r#"{"blockIO":{"weight":500,"throttleReadBpsDevice":[{"major":8,"minor":0,"rate":1048576}]},
            "hugepageLimits":[{"pageSize":"2MB","limit":4194304}],
            "unified":{"memory.oom.group":"1","memory.high":"max"}}"#,
    );
    assert_eq!(
        got,
        pairs(&[
            ("io.weight", "default 4950"),
            ("io.max", "8:0 rbps=1048576"),
            ("hugetlb.2MB.max", "4194304"),
            ("memory.high", "max"),
            ("memory.oom.group", "1"),
        ])
    );
}

#[test]
fn controllers_and_bad_keys() {
    assert_eq!(Write::new("memory.oom.group", 1).controller(), Some("memory"));
    assert_eq!(Write::new("cgroup.max.depth", 1).controller(), None);
    for key in ["../x", "a/b", "", "nodot"] {
        let json = format!(r#"{{"unified":{{"{key}":"1"}}}}"#);
        assert!(plan(&res(&json)).is_err(), "{key}");
    }
    assert!(
        plan(&res(r#"{"network":{"classID":5}}"#))
            .unwrap_err()
            .to_string()
            .contains("cgroup v1")
    );
    assert!(plan(&res(r#"{"cpu":{"realtimeRuntime":5}}"#)).is_err());
}
