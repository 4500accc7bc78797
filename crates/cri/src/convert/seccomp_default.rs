//! crius's RuntimeDefault seccomp profile, written from the rules Docker and containerd document for theirs:
//! everything is refused with EPERM except an allowlist of the syscalls ordinary programs make; `personality`
//! only with the personas programs use; `clone` without new namespaces and `clone3` answered ENOSYS (so libc
//! falls back to `clone`) unless the container has CAP_SYS_ADMIN; `socket` for every family but AF_VSOCK; and
//! the syscalls a capability guards are allowed only to containers that have it (the kernel would refuse them
//! anyway; the filter keeps their code paths out of reach); `ptrace` and `process_vm_readv/writev` on kernels
//! from 4.8 on (earlier ones let a tracer bypass seccomp) or with CAP_SYS_PTRACE; x86's `arch_prctl` and
//! `modify_ldt` on x86 only. The tests compare it, syscall by syscall, with Docker's conditional rules.
//!
//! It is produced in Docker's form (rules with `includes`/`excludes` by capability) and resolved for the
//! container by [`super::seccomp::parse`], as a Localhost profile is.

use serde_json::{Value, json};

/// Syscalls every container may make, grouped by what they are for.
#[rustfmt::skip]
const ALLOWED: &[&[&str]] = &[
    // files and directories
    &[
        "access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range", "creat",
        "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fchdir",
        "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync",
        "flock", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64",
        "futimesat", "getcwd", "getdents", "getdents64", "lchown", "lchown32", "link", "linkat", "_llseek",
        "lseek", "lstat", "lstat64", "mkdir", "mkdirat", "mknod", "mknodat", "newfstatat", "open", "openat",
        "openat2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead",
        "readlink", "readlinkat", "readv", "rename", "renameat", "renameat2", "rmdir", "sendfile",
        "sendfile64", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat",
        "sync", "sync_file_range", "syncfs", "tee", "truncate", "truncate64", "umask", "unlink", "unlinkat",
        "utime", "utimensat", "utimensat_time64", "utimes", "vmsplice", "write", "writev",
    ],
    // extended attributes
    &[
        "fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr", "listxattr",
        "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
    ],
    // memory
    &[
        "brk", "cachestat", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret",
        "mincore", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mremap", "msync", "munlock",
        "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages",
    ],
    // processes, threads, identity and limits
    &[
        "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork",
        "get_robust_list", "get_thread_area", "getcpu", "getegid", "getegid32", "geteuid", "geteuid32",
        "getgid", "getgid32", "getgroups", "getgroups32", "getpgid", "getpgrp", "getpid", "getppid",
        "getpriority", "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "getrusage",
        "getsid", "gettid", "getuid", "getuid32", "ioprio_get", "ioprio_set", "kill",
        "pidfd_open", "pidfd_send_signal", "prctl", "prlimit64", "process_mrelease", "rseq",
        "sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
        "sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
        "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
        "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsgid32", "setfsuid",
        "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setpgid", "setpriority", "setregid",
        "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32",
        "setrlimit", "setsid", "setuid", "setuid32", "tgkill", "tkill", "ugetrlimit", "uname", "vfork",
        "wait4", "waitid", "waitpid",
    ],
    // signals
    &[
        "alarm", "pause", "restart_syscall", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
        "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
        "rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn",
    ],
    // time and timers
    &[
        "adjtimex", "clock_adjtime", "clock_adjtime64", "clock_getres", "clock_getres_time64", "clock_gettime",
        "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "getitimer", "gettimeofday",
        "nanosleep", "setitimer", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
        "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime",
        "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
    ],
    // waiting and events
    &[
        "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
        "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark", "futex", "futex_requeue",
        "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "inotify_add_watch", "inotify_init",
        "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents",
        "io_pgetevents_time64", "io_setup", "io_submit", "ioctl", "_newselect", "pipe", "pipe2", "poll",
        "ppoll", "ppoll_time64", "pselect6", "pselect6_time64", "select",
    ],
    // sockets (socket itself is below: every family but AF_VSOCK)
    &[
        "accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen", "recv",
        "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg", "sendmsg", "sendto",
        "setsockopt", "shutdown", "socketcall", "socketpair",
    ],
    // System V and POSIX IPC (the pod's own IPC namespace)
    &[
        "ipc", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
        "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd", "semctl",
        "semget", "semop", "semtimedop", "semtimedop_time64", "shmat", "shmctl", "shmdt", "shmget",
    ],
    // information, randomness, sandboxing
    &[
        "getrandom", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "sysinfo",
    ],
];

/// Syscalls allowed only with a capability: (capability, syscalls).
#[rustfmt::skip]
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
            "lookup_dcookie", "lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr", "mount",
            "mount_setattr", "move_mount", "name_to_handle_at", "open_tree",
            "perf_event_open", "quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog",
            "umount", "umount2", "unshare",
        ],
    ),
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "finit_module", "init_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["ioperm", "iopl"]),
    (
        "CAP_SYS_TIME",
        &["clock_settime", "clock_settime64", "settimeofday", "stime"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    (
        "CAP_SYS_NICE",
        &[
            "get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node",
        ],
    ),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// The namespace flags `clone` may not be given without CAP_SYS_ADMIN: NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
/// NEWUSER, NEWPID, NEWNET.
const NEW_NAMESPACES: u64 =
    0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000;

/// The personas `personality` may set: Linux, with UNAME26, with READ_IMPLIES_EXEC... as Docker's list, and
/// the query (0xffffffff).
const PERSONAS: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Syscalls allowed on kernels from 4.8 on without a capability (with CAP_SYS_PTRACE on any): before 4.8, a
/// ptraced process's seccomp filter could be bypassed by its tracer changing the syscall after the check.
const FROM_4_8: &[&str] = &["process_vm_readv", "process_vm_writev", "ptrace"];

/// Syscalls only some architectures have (as Docker's names them): x86's segment and TLS calls.
const BY_ARCH: &[(&[&str], &[&str])] = &[
    (&["amd64", "x32"], &["arch_prctl"]),
    (&["amd64", "x32", "x86"], &["modify_ldt"]),
];

const AF_VSOCK: u64 = 40;
const ENOSYS: u64 = 38;

/// The profile, in Docker's form, for this machine's architecture.
pub fn profile() -> Value {
    let arches: &[&str] = match std::env::consts::ARCH {
        "x86_64" => &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "aarch64" => &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        _ => &[],
    };
    let mut rules = vec![json!({
        "names": ALLOWED.iter().flat_map(|g| g.iter()).collect::<Vec<_>>(),
        "action": "SCMP_ACT_ALLOW",
    })];
    for p in PERSONAS {
        rules.push(json!({"names": ["personality"], "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": p, "op": "SCMP_CMP_EQ"}]}));
    }
    rules.push(json!({"names": ["socket"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}]}));
    rules.push(json!({"names": ["clone"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": NEW_NAMESPACES, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        "excludes": {"caps": ["CAP_SYS_ADMIN"]}}));
    rules.push(
        json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS,
        "excludes": {"caps": ["CAP_SYS_ADMIN"]}}),
    );
    rules.push(json!({"names": FROM_4_8, "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}}));
    for (arches, names) in BY_ARCH {
        rules.push(json!({"names": names, "action": "SCMP_ACT_ALLOW", "includes": {"arches": arches}}));
    }
    for (cap, names) in BY_CAPABILITY {
        rules.push(json!({"names": names, "action": "SCMP_ACT_ALLOW", "includes": {"caps": [cap]}}));
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": arches,
        "syscalls": rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile resolved for a container with `caps` on kernel `kernel`.
    fn resolved(caps: &[&str], kernel: (u32, u32)) -> oci_spec::runtime::LinuxSeccomp {
        let caps: Vec<String> = caps.iter().map(|c| c.to_string()).collect();
        super::super::seccomp::parse("RuntimeDefault", &profile().to_string(), &caps, kernel).unwrap()
    }

    fn allowed(s: &oci_spec::runtime::LinuxSeccomp, name: &str) -> Vec<String> {
        s.syscalls()
            .iter()
            .flatten()
            .filter(|r| r.names().iter().any(|n| n == name))
            .map(|r| format!("{:?}", r.action()))
            .collect()
    }

    /// Allowed outright: a rule without argument conditions allows it.
    fn allows(s: &oci_spec::runtime::LinuxSeccomp, name: &str) -> bool {
        s.syscalls().iter().flatten().any(|r| {
            r.names().iter().any(|n| n == name)
                && r.action() == oci_spec::runtime::LinuxSeccompAction::ScmpActAllow
                && r.args().as_ref().is_none_or(Vec::is_empty)
        })
    }

    /// A syscall, the capabilities any of which allows it, and the kernel version from which it is allowed
    /// without one.
    type Rule = (&'static str, &'static [&'static str], Option<(u32, u32)>);

    /// The conditional rules of Docker's default profile (moby `profiles/seccomp/default.json`, as of
    /// August 2026), syscall by syscall: a syscall is allowed when the container holds any of the
    /// capabilities, or (where given) on that kernel version or later. containerd's profile has the same
    /// capability rules. Syscalls of Docker's unconditional allowlist and its arch rules are not here.
    #[rustfmt::skip]
    const DOCKER: &[Rule] = &[
        ("ptrace", &["CAP_SYS_PTRACE"], Some((4, 8))),
        ("process_vm_readv", &["CAP_SYS_PTRACE"], Some((4, 8))),
        ("process_vm_writev", &["CAP_SYS_PTRACE"], Some((4, 8))),
        ("kcmp", &["CAP_SYS_PTRACE"], None),
        ("pidfd_getfd", &["CAP_SYS_PTRACE"], None),
        ("process_madvise", &["CAP_SYS_PTRACE"], None),
        ("open_by_handle_at", &["CAP_DAC_READ_SEARCH"], None),
        ("bpf", &["CAP_SYS_ADMIN", "CAP_BPF"], None),
        ("perf_event_open", &["CAP_SYS_ADMIN", "CAP_PERFMON"], None),
        ("syslog", &["CAP_SYS_ADMIN", "CAP_SYSLOG"], None),
        ("clone3", &["CAP_SYS_ADMIN"], None),
        ("fanotify_init", &["CAP_SYS_ADMIN"], None),
        ("fsconfig", &["CAP_SYS_ADMIN"], None),
        ("fsmount", &["CAP_SYS_ADMIN"], None),
        ("fsopen", &["CAP_SYS_ADMIN"], None),
        ("fspick", &["CAP_SYS_ADMIN"], None),
        ("lookup_dcookie", &["CAP_SYS_ADMIN"], None),
        ("lsm_get_self_attr", &["CAP_SYS_ADMIN"], None),
        ("lsm_list_modules", &["CAP_SYS_ADMIN"], None),
        ("lsm_set_self_attr", &["CAP_SYS_ADMIN"], None),
        ("mount", &["CAP_SYS_ADMIN"], None),
        ("mount_setattr", &["CAP_SYS_ADMIN"], None),
        ("move_mount", &["CAP_SYS_ADMIN"], None),
        ("open_tree", &["CAP_SYS_ADMIN"], None),
        ("quotactl", &["CAP_SYS_ADMIN"], None),
        ("quotactl_fd", &["CAP_SYS_ADMIN"], None),
        ("setdomainname", &["CAP_SYS_ADMIN"], None),
        ("sethostname", &["CAP_SYS_ADMIN"], None),
        ("setns", &["CAP_SYS_ADMIN"], None),
        ("umount", &["CAP_SYS_ADMIN"], None),
        ("umount2", &["CAP_SYS_ADMIN"], None),
        ("unshare", &["CAP_SYS_ADMIN"], None),
        ("reboot", &["CAP_SYS_BOOT"], None),
        ("chroot", &["CAP_SYS_CHROOT"], None),
        ("delete_module", &["CAP_SYS_MODULE"], None),
        ("finit_module", &["CAP_SYS_MODULE"], None),
        ("init_module", &["CAP_SYS_MODULE"], None),
        ("acct", &["CAP_SYS_PACCT"], None),
        ("ioperm", &["CAP_SYS_RAWIO"], None),
        ("iopl", &["CAP_SYS_RAWIO"], None),
        ("clock_settime", &["CAP_SYS_TIME"], None),
        ("clock_settime64", &["CAP_SYS_TIME"], None),
        ("settimeofday", &["CAP_SYS_TIME"], None),
        ("stime", &["CAP_SYS_TIME"], None),
        ("vhangup", &["CAP_SYS_TTY_CONFIG"], None),
        ("get_mempolicy", &["CAP_SYS_NICE"], None),
        ("mbind", &["CAP_SYS_NICE"], None),
        ("set_mempolicy", &["CAP_SYS_NICE"], None),
        ("set_mempolicy_home_node", &["CAP_SYS_NICE"], None),
    ];

    #[test]
    fn each_conditional_syscall_is_allowed_exactly_when_dockers_rules_allow_it() {
        let all: Vec<&str> = {
            let mut v: Vec<&str> = DOCKER
                .iter()
                .flat_map(|(_, caps, _)| caps.iter().copied())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        for kernel in [(4, 7), (4, 8), (6, 1)] {
            let mut hosts: Vec<Vec<&str>> = vec![vec![], all.clone()];
            hosts.extend(all.iter().map(|c| vec![*c]));
            // Every capability but one: the one missing must not be made up for by the others.
            hosts.extend(
                all.iter()
                    .map(|c| all.iter().copied().filter(|o| o != c).collect()),
            );
            for caps in &hosts {
                let profile = resolved(caps, kernel);
                for (name, needs, min_kernel) in DOCKER {
                    let docker =
                        needs.iter().any(|c| caps.contains(c)) || min_kernel.is_some_and(|m| kernel >= m);
                    assert_eq!(
                        allows(&profile, name),
                        docker,
                        "{name} with {caps:?} on {}.{}",
                        kernel.0,
                        kernel.1
                    );
                }
            }
        }
        // Where crius is stricter than Docker: name_to_handle_at is CAP_SYS_ADMIN's (as in containerd's own
        // profile), not everyone's.
        assert!(!allows(&resolved(&[], (6, 1)), "name_to_handle_at"));
        assert!(allows(&resolved(&["CAP_SYS_ADMIN"], (6, 1)), "name_to_handle_at"));
        // x86's own syscalls only where the profile is for x86.
        let x86 = std::env::consts::ARCH == "x86_64";
        assert_eq!(allows(&resolved(&[], (6, 1)), "arch_prctl"), x86);
        assert_eq!(allows(&resolved(&[], (6, 1)), "modify_ldt"), x86);
    }

    #[test]
    fn capabilities_open_their_syscalls_and_sys_admin_unfences_clone() {
        let plain = resolved(&["CAP_CHOWN"], (6, 1));
        assert!(allowed(&plain, "mount").is_empty(), "mount needs CAP_SYS_ADMIN");
        assert!(allowed(&plain, "chroot").is_empty());
        assert_eq!(
            allowed(&plain, "clone3"),
            ["ScmpActErrno"],
            "ENOSYS: libc falls back to clone"
        );
        assert_eq!(
            allowed(&plain, "clone").len(),
            1,
            "clone without new namespaces only"
        );
        assert_eq!(allowed(&plain, "read"), ["ScmpActAllow"]);
        assert_eq!(allowed(&plain, "personality").len(), PERSONAS.len());
        let admin = resolved(&["CAP_SYS_ADMIN", "CAP_SYS_CHROOT"], (6, 1));
        assert_eq!(allowed(&admin, "mount"), ["ScmpActAllow"]);
        assert_eq!(allowed(&admin, "chroot"), ["ScmpActAllow"]);
        assert_eq!(allowed(&admin, "clone3"), ["ScmpActAllow"]);
        let no_dupes: std::collections::HashSet<&&str> = ALLOWED.iter().flat_map(|g| g.iter()).collect();
        assert_eq!(
            no_dupes.len(),
            ALLOWED.iter().map(|g| g.len()).sum::<usize>(),
            "a name listed twice"
        );
    }
}
