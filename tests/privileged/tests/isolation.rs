//! What a container must not see or do: namespaces, masked and read-only paths, capabilities, no_new_privs,
//! seccomp, device rules, users, rlimits, sysctls, user namespaces and hooks.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (`crius_only_*` tests excepted).

use crius_test_support::{Bundle, Runtime, unique};
use serde_json::json;

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn own_namespaces_and_hostname() {
    let rt = Runtime::from_env();
    let kinds = ["pid", "mnt", "uts", "ipc", "net"];
    let script = format!(
        "echo $$; hostname; for n in {}; do readlink /proc/self/ns/$n; done",
        kinds.join(" ")
    );
    let (code, out, err) = rt.run_bundle(&Bundle::sh(&script), "iso");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1", "the container's process is pid 1 of its namespace");
    assert_eq!(lines[1], "crius-test");
    for (i, kind) in kinds.iter().enumerate() {
        let host = std::fs::read_link(format!("/proc/self/ns/{kind}")).unwrap();
        assert_ne!(
            lines[2 + i],
            host.to_str().unwrap(),
            "{kind} namespace is the host's"
        );
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn masked_and_readonly_paths_and_readonly_rootfs() {
    let rt = Runtime::from_env();
    let script = "wc -c < /etc/group; ls /var | wc -l; \
                  echo x > /proc/sys/kernel/domainname && echo sys-writable; \
                  touch /rootfile && echo root-writable; touch /tmp/ok && echo tmp-writable";
    let mut b = Bundle::sh(script);
    b.config["linux"]["maskedPaths"]
        .as_array_mut()
        .unwrap()
        .extend([json!("/etc/group"), json!("/var")]);
    std::fs::create_dir_all(crius_test_support::shared_rootfs().join("var/lib")).unwrap();
    let (_, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(out, "0\n0\ntmp-writable\n", "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn capabilities_and_no_new_privs() {
    let rt = Runtime::from_env();
    let (code, out, err) = rt.run_bundle(
        &Bundle::sh("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status"),
        "iso",
    );
    assert_eq!(code, 0, "{err}");
    // CAP_AUDIT_WRITE (29), CAP_KILL (5), CAP_NET_BIND_SERVICE (10).
    let mask = "0000000020000420";
    let want = format!(
        "CapInh:\t0000000000000000\nCapPrm:\t{mask}\nCapEff:\t{mask}\nCapBnd:\t{mask}\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
    );
    assert_eq!(out, want);
    // A dropped capability is really missing: chown needs CAP_CHOWN.
    let (code, _, _) = rt.run_bundle(&Bundle::sh("touch /tmp/f && chown 1 /tmp/f"), "iso");
    assert_ne!(code, 0, "chown without CAP_CHOWN must fail");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn seccomp_profile_denies_a_syscall() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("mkdir /tmp/denied; echo mkdir=$?; touch /tmp/allowed && echo touch-ok");
    b.config["linux"]["seccomp"] = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    });
    let (_, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(out, "mkdir=1\ntouch-ok\n", "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
}

/// System calls a deny-by-default profile allows for the runtimes' last steps and the test program: none
/// newer than `rseq` (x86_64 334, i386 386), and not `getpgrp`, whose refusal the test looks for.
const ALLOWED: &[&str] = &[
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "openat",
    "open",
    "close",
    "fstat",
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "lseek",
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "madvise",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "ioctl",
    "access",
    "faccessat",
    "pipe",
    "pipe2",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "sched_yield",
    "nanosleep",
    "clock_nanosleep",
    "clock_gettime",
    "gettimeofday",
    "getpid",
    "gettid",
    "getppid",
    "clone",
    "fork",
    "vfork",
    "execve",
    "exit",
    "exit_group",
    "wait4",
    "waitid",
    "kill",
    "tgkill",
    "tkill",
    "uname",
    "getcwd",
    "chdir",
    "fchdir",
    "readlink",
    "readlinkat",
    "getdents64",
    "getuid",
    "getgid",
    "geteuid",
    "getegid",
    "getresuid",
    "getresgid",
    "getgroups",
    "setgroups",
    "setuid",
    "setgid",
    "setresuid",
    "setresgid",
    "capget",
    "capset",
    "prctl",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "futex",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "eventfd2",
    "getrandom",
    "sched_getaffinity",
    "prlimit64",
    "getrlimit",
    "setrlimit",
    "rseq",
    "membarrier",
    "umask",
    "fstatfs",
    "statfs",
    "socket",
    "connect",
    "sendmsg",
    "recvmsg",
    "mlock",
];

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_deny_by_default_profile_gives_enosys_for_newer_syscalls() {
    // runc's seccomp.bats "-ENOSYS handling": a call newer than every one the profile names fails with ENOSYS
    // (so a C library falls back from clone3 to clone), on x86_64 and on i386 (int 0x80); a named call keeps
    // its action; an older one left out gets the default action (EPERM).
    let rt = Runtime::from_env();
    let run = |flag: &str, nrs: &str| {
        let mut b = Bundle::new(&["/tmp/testprog", flag, nrs]);
        let mounts = b.config["mounts"].as_array_mut().unwrap();
        mounts.push(json!({"destination": "/tmp/testprog", "type": "bind",
            "source": crius_test_support::testprog_binary(), "options": ["bind", "ro"]}));
        b.config["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            "syscalls": [{"names": ALLOWED, "action": "SCMP_ACT_ALLOW"},
                         {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]
        });
        let (code, out, err) = rt.run_bundle(&b, "enosys");
        assert_eq!(code, 0, "{out}{err}");
        out
    };
    // clone3, openat2, a number nobody has; mkdir (EACCES, where the kernel would say EFAULT); getpgrp
    // (EPERM, where the kernel would give the group); getpid (pid 1).
    let out = run("--syscalls", "435,437,1000,83,111,39");
    assert_eq!(
        out,
        "x86_64 435 -38\nx86_64 437 -38\nx86_64 1000 -38\nx86_64 83 -13\nx86_64 111 -1\nx86_64 39 1\n"
    );
    // The same on i386: clone3 435, mkdir 39, getpgrp 65, getpid 20.
    let out = run("--syscalls32", "435,1000,39,65,20");
    assert_eq!(
        out,
        "i386 435 -38\ni386 1000 -38\ni386 39 -13\ni386 65 -1\ni386 20 1\n"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn device_rules_deny_unlisted_devices() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("head -c 1 /dev/zero | wc -c; mknod /dev/blk b 7 0 && head -c 1 /dev/blk");
    let caps = json!(["CAP_MKNOD", "CAP_KILL"]);
    for set in ["bounding", "effective", "permitted"] {
        b.config["process"]["capabilities"][set] = caps.clone();
    }
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(out, "1\n", "{err}");
    assert_ne!(code, 0);
    assert!(
        err.contains("Operation not permitted"),
        "opening block device 7:0 must be denied: {err}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn user_groups_cwd_env_rlimits_sysctl() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh(
        "id -u; id -g; id -G; pwd; echo $FOO; ulimit -n; cat /proc/sys/net/ipv4/ip_forward; umask",
    );
    b.config["process"]["user"] = json!({"uid": 1000, "gid": 1001, "additionalGids": [10, 20], "umask": 18});
    b.config["process"]["cwd"] = json!("/tmp");
    b.config["process"]["env"] = json!(["PATH=/bin", "FOO=bar"]);
    b.config["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": 512, "soft": 256}]);
    b.config["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": "1"});
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "1000\n1001\n1001 10 20\n/tmp\nbar\n256\n1\n0022\n");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn user_namespace_with_mappings() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("cat /proc/self/uid_map /proc/self/gid_map; id -u");
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(code, 0, "{err}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words, ["0", "100000", "65536", "0", "100000", "65536", "0"]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn hooks_run_at_their_points() {
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["true"]);
    // startContainer runs inside the container: the log directory is bind-mounted there at /hooks.
    let dir = b.path().join("hooks");
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("log");
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/hooks", "type": "bind",
        "source": dir, "options": ["rbind", "rw"]}));
    let hook = |name: &str| {
        let path = if name == "startContainer" {
            "/hooks/log".into()
        } else {
            log.display().to_string()
        };
        // Each hook logs its name and the id in the state it was given on stdin.
        let script = format!(
            "read -r s; id=$(echo \"$s\" | sed 's/.*\"id\": *\"\\([^\"]*\\)\".*/\\1/'); \
             echo {name} $id >> {path}"
        );
        json!([{"path": "/bin/sh", "args": ["sh", "-c", script]}])
    };
    b.config["hooks"] = json!({
        "createRuntime": hook("createRuntime"), "createContainer": hook("createContainer"),
        "startContainer": hook("startContainer"), "poststart": hook("poststart"), "poststop": hook("poststop"),
    });
    let dir_name = b.write().to_str().unwrap().to_string();
    let id = unique("hooks");
    let out = rt.run(&["run", "--bundle", &dir_name, &id]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The state's id is the container's, whatever the bundle directory is called.
    let got = std::fs::read_to_string(&log)
        .unwrap()
        .replace(&format!(" {id}\n"), "\n");
    let want = "createRuntime\ncreateContainer\nstartContainer\npoststart\npoststop\n";
    if rt.is_crius {
        // crius runs startContainer before `start` returns, so poststart always follows it.
        assert_eq!(got, want);
    } else {
        // runc 1.1 may run poststart before startContainer: check that each hook ran once.
        let mut a: Vec<_> = got.lines().collect();
        let mut b: Vec<_> = want.lines().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_oom_score_adj_is_clamped_without_cap_sys_resource() {
    let rt = Runtime::from_env();
    let mine = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
    let mut b = Bundle::sh("cat /proc/self/oom_score_adj");
    b.config["process"]["oomScoreAdj"] = json!(-999);
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(code, 0, "the container must run: {err}");
    let lowered_ok = out.trim() == "-999";
    // On a host without CAP_SYS_RESOURCE (these machines) the value is kept, with a warning that says why.
    assert!(
        lowered_ok || (out.trim() == mine.trim() && err.contains("CAP_SYS_RESOURCE")),
        "{out} / {err}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn devices_cgroup_namespace_and_bind_propagation() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh(
        "stat -c '%F %t:%T' /dev/mydev; grep '^0::' /proc/self/cgroup; \
                    ls /sys/fs/cgroup/cgroup.procs; grep ' /data ' /proc/self/mountinfo | grep -o 'master:[0-9]*' | wc -l",
    );
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/mydev", "type": "c", "major": 1, "minor": 3, "fileMode": 438}]);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "cgroup"}));
    let data = b.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // A shared host mount, bound rslave into the container: its mount is a slave of the host's.
    std::process::Command::new("mount")
        .args(["--bind", "--make-shared"])
        .arg(&data)
        .arg(&data)
        .status()
        .unwrap();
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.push(json!({"destination": "/sys/fs/cgroup", "type": "cgroup2", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "ro"]}));
    mounts.push(
        json!({"destination": "/data", "type": "bind", "source": data, "options": ["rbind", "rslave"]}),
    );
    let (code, out, err) = rt.run_bundle(&b, "iso");
    std::process::Command::new("umount").arg(&data).status().unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "character special file 1:3\n0::/\n/sys/fs/cgroup/cgroup.procs\n1\n"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_domainname() {
    // runc 1.1 ignores `domainname`; crius sets it in the container's uts namespace.
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("cat /proc/sys/kernel/domainname");
    b.config["domainname"] = json!("example.test");
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!((code, out.as_str()), (0, "example.test\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_personality_and_io_priority() {
    // runc 1.1 ignores both (they came in runc 1.2).
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("uname -m; ionice -p $$");
    b.config["linux"]["personality"] = json!({"domain": "LINUX32"});
    b.config["process"]["ioPriority"] = json!({"class": "IOPRIO_CLASS_BE", "priority": 5});
    let (code, out, err) = rt.run_bundle(&b, "iso");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "i686\nbest-effort: prio 5\n");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_recursive_read_only_bind_makes_its_submounts_read_only() {
    // runc ≥ 1.1 and crius-runc: `rro` is mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY) on the bind.
    let rt = Runtime::from_env();
    let mut b = Bundle::sh(
        "touch /rro/sub/f 2>/dev/null && echo rro-sub-writable; \
                    touch /rro/f 2>/dev/null && echo rro-writable; \
                    touch /ro/sub/f && echo ro-sub-writable; \
                    grep -c ' /rro/sub ' /proc/self/mountinfo",
    );
    let src = b.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(src.join("sub"))
        .status()
        .unwrap();
    assert!(status.success());
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.push(json!({"destination": "/rro", "type": "bind", "source": src,
        "options": ["rbind", "rprivate", "ro", "rro"]}));
    mounts.push(json!({"destination": "/ro", "type": "bind", "source": src,
        "options": ["rbind", "rprivate", "ro"]}));
    let (code, out, err) = rt.run_bundle(&b, "iso");
    std::process::Command::new("umount")
        .arg(src.join("sub"))
        .status()
        .unwrap();
    assert_eq!(code, 0, "{err}");
    // Only the plain `ro` bind leaves its submount writable; the submount is there under /rro.
    assert_eq!(out, "ro-sub-writable\n1\n", "{err}");
}
