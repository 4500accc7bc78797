//! The holder of a pod's shared PID namespace, every container's pid 1, gone through by a container with
//! CAP_SYS_PTRACE: its root, executable, capabilities, environment, descriptors and network namespace read
//! through /proc/1, and a PTRACE_ATTACH of it, in a pod with the host's users and in one with its own.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, config, container, wait_state};

/// The ptracer: attaches to pid 1 and stops it, reads its registers, detaches (compiled static by the test).
const PTRACE_ONE: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
int main(void) {
    if (ptrace(PTRACE_ATTACH, 1, 0, 0) != 0) { printf("attach: %s\n", strerror(errno)); return 0; }
    int st; struct user_regs_struct r;
    waitpid(1, &st, __WALL);
    long regs = ptrace(PTRACE_GETREGS, 1, 0, &r);
    printf("attach: ok, regs %s\n", regs == 0 ? "read" : strerror(errno));
    ptrace(PTRACE_DETACH, 1, 0, 0);
    return 0;
}
"#;

/// What a container learns of pid 1 through /proc, one `key:value` line each; then the ptracer's report.
const PROBE_PID1: &str = r#"echo "root:[$(ls -A /proc/1/root 2>&1 | tr '\n' ' ')]"
cat /proc/1/root/etc/hostname >/dev/null 2>&1 && echo hostname:read || echo hostname:none
ls /proc/1/root/tmp >/dev/null 2>&1 && echo tmp:listed || echo tmp:none
echo "exe:$(readlink /proc/1/exe)"
grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Uid):' /proc/1/status | tr '\t' ' ' | sed 's/: /:/'
echo "environ:[$(tr '\0' ' ' </proc/1/environ)]"
for f in /proc/1/fd/*; do echo "fd:$(readlink $f) $(stat -L -c '%F %t:%T' $f)"; done
echo "cwd:[$(ls -A /proc/1/cwd 2>&1 | tr '\n' ' ')]"
echo "cmdline:$(tr '\0' ' ' </proc/1/cmdline)"
[ "$(readlink /proc/1/ns/net)" = "$(readlink /proc/self/ns/net)" ] && echo net:pods || echo net:other
/ptrace-one"#;

/// The init of a pod's PID namespace, SIGKILLed when the test ends (a failed assertion leaves it running).
struct Holder(i32);

impl Drop for Holder {
    fn drop(&mut self) {
        if crius_test_support::shims::shim_pids("pid-init").contains(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The pod config of the shared-PID attack: PID mode POD, in a user namespace of its own (65536 ids from
/// host 100000) when `userns`.
fn shared_pid(name: &str, userns: bool) -> (cri::PodSandboxConfig, Option<cri::NamespaceOption>) {
    let ids = vec![cri::IdMapping {
        container_id: 0,
        host_id: 100000,
        length: 65536,
    }];
    let ns = cri::NamespaceOption {
        pid: cri::NamespaceMode::Pod as i32,
        userns_options: userns.then(|| cri::UserNamespace {
            mode: cri::NamespaceMode::Pod as i32,
            uids: ids.clone(),
            gids: ids,
        }),
        ..Default::default()
    };
    let mut conf = config(name, &format!("uid-{name}"));
    conf.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(ns.clone()),
            ..Default::default()
        }),
        ..Default::default()
    });
    (conf, userns.then_some(ns))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_ptracing_container_finds_nothing_of_the_host_in_its_shared_pid_namespaces_init() {
    crius_test_support::require_root();
    // The ptracer, static, in a directory a user namespace's root may enter.
    let tools = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = tools.path().join("ptrace-one.c");
    std::fs::write(&src, PTRACE_ONE).unwrap();
    let cc = Command::new("cc")
        .args(["-static", "-O", "-o"])
        .arg(tools.path().join("ptrace-one"))
        .arg(&src)
        .output()
        .expect("running cc (the ptracer is compiled by the test)");
    assert!(cc.status.success(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
    for userns in [false, true] {
        let name = if userns { "ptrace-userns" } else { "ptrace" };
        let (conf, ns) = shared_pid(name, userns);
        let mut pod = Pod::on_network_with(conf).await;
        let mut ctr = container("c", "busybox", "sleep 3600");
        ctr.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["SYS_PTRACE".into()],
                    ..Default::default()
                }),
                namespace_options: ns,
                ..Default::default()
            }),
            ..Default::default()
        });
        ctr.mounts.push(cri::Mount {
            host_path: tools.path().join("ptrace-one").display().to_string(),
            container_path: "/ptrace-one".into(),
            readonly: true,
            ..Default::default()
        });
        let id = pod.started(ctr).await;
        wait_state(&mut pod.c, &id, cri::ContainerState::ContainerRunning).await;
        let holder = crius_test_support::shims::shim_pids("pid-init");
        assert_eq!(holder.len(), 1, "one init for the pod: {holder:?}");
        let _reaped = Holder(holder[0]);
        let r = pod
            .c
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["sh".into(), "-c".into(), PROBE_PID1.into()],
                timeout: 20,
            })
            .await
            .unwrap()
            .into_inner();
        let out = String::from_utf8_lossy(&r.stdout).into_owned();
        eprintln!("{name}: what the container found through pid 1:\n{out}");
        let has = |line: &str| out.lines().any(|l| l == line);
        let value = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in {out}"))
                .to_string()
        };
        // The root is an empty directory (or refused), never the host's.
        let root = value("root:");
        assert!(
            root == "[]" || root.contains("denied"),
            "{name}: /proc/1/root lists {root}"
        );
        assert!(
            has("hostname:none") && has("tmp:none"),
            "{name}: the host's files:\n{out}"
        );
        assert!(
            value("exe:").starts_with("/memfd:"),
            "{name}: /proc/1/exe is not a sealed copy:\n{out}"
        );
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(value(&format!("{set}:")), "0000000000000000", "{name}: {set}");
        }
        assert_eq!(value("NoNewPrivs:"), "1", "{name}");
        assert_eq!(
            value("Uid:"),
            "65534 65534 65534 65534",
            "{name}: pid 1 is not nobody"
        );
        assert_eq!(
            value("environ:"),
            "[]",
            "{name}: criusd's environment reached pid 1"
        );
        let fds: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("fd:")).collect();
        assert!(
            fds.len() == 3
                && fds
                    .iter()
                    .all(|f| f.ends_with("/null character special file 1:3")),
            "{name}: pid 1 holds {fds:?}"
        );
        assert_eq!(value("cwd:"), "[]", "{name}");
        assert!(
            value("cmdline:").contains("pid-init"),
            "{name}: pid 1 is not the pod's init"
        );
        assert!(
            has("net:pods"),
            "{name}: pid 1 is not in the pod's network namespace"
        );
        // Attached or not, the init survives it and still holds the namespace.
        assert!(value("attach: ").len() > 1, "{name}: the ptracer did not report");
        assert!(
            Path::new(&format!("/proc/{}", holder[0])).exists(),
            "{name}: the init died of the ptrace"
        );
        let ps = pod
            .c
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["ps".into(), "-o".into(), "pid,args".into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
        assert!(
            ps.lines()
                .any(|l| l.trim_start().starts_with("1 ") && l.contains("pid-init")),
            "{name}: the container is not in the init's namespace:\n{ps}"
        );
        crius_privileged_tests::cri::stop(&mut pod.c, &pod.id)
            .await
            .unwrap();
        crius_privileged_tests::cri::eventually(
            crius_privileged_tests::cri::in_20s(),
            || format!("{name}: the pod's init {} is still running", holder[0]),
            || crius_test_support::shims::shim_pids("pid-init").is_empty(),
        )
        .await;
    }
}
