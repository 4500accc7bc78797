//! AppArmor under a kernel that has it (the VM's; this host has none): criusd loads crius-default at start-up
//! and RuntimeDefault containers (and those that ask for nothing) run under it, enforced — a write to
//! /proc/sysrq-trigger is denied while ordinary writes work; a Localhost profile the test loads confines as it
//! says; one that is not loaded is refused at CreateContainer, naming it; Unconfined stays unconfined; and an
//! ExecSync runs under its container's profile. hack/test.sh runs this binary inside hack/vm.

use std::io::Write;
use std::process::{Command, Stdio};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container};

const PROFILES: &str = "/sys/kernel/security/apparmor/profiles";
/// The test's own Localhost profile: everything but a write to /denied-by-profile.
const LOCAL: &str = "crius-test-deny-write";

/// Mounts securityfs if the VM's init did not; unmounted again on drop if this mounted it.
struct SecurityFs(bool);

impl SecurityFs {
    fn ensure() -> SecurityFs {
        if std::path::Path::new(PROFILES).exists() {
            return SecurityFs(false);
        }
        let ok = Command::new("mount")
            .args(["-t", "securityfs", "securityfs", "/sys/kernel/security"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok && std::path::Path::new(PROFILES).exists(),
            "no AppArmor securityfs"
        );
        SecurityFs(true)
    }
}

impl Drop for SecurityFs {
    fn drop(&mut self) {
        if self.0 {
            let _ = Command::new("umount").arg("/sys/kernel/security").status();
        }
    }
}

/// A profile loaded with apparmor_parser for the test, removed on drop.
struct Loaded(&'static str);

impl Loaded {
    fn new(name: &'static str, text: &str) -> Loaded {
        let mut child = Command::new("apparmor_parser")
            .args(["-K", "-r"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("apparmor_parser (hack/install-deps.sh installs it)");
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "apparmor_parser refused {name}");
        Loaded(name)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/kernel/security/apparmor/.remove", self.0);
    }
}

fn loaded_profiles() -> String {
    std::fs::read_to_string(PROFILES).unwrap()
}

/// `script` in busybox with `apparmor` (the typed field) or `old` (the deprecated string), and /proc's
/// read-only paths reduced to /proc/bus, so that a denied write to /proc/sysrq-trigger is AppArmor's (a
/// read-only bind would refuse it first, with EROFS).
fn confined(
    name: &str,
    script: &str,
    apparmor: Option<cri::SecurityProfile>,
    old: &str,
) -> cri::ContainerConfig {
    let mut c = container(name, "busybox", script);
    #[allow(deprecated)]
    let sc = cri::LinuxContainerSecurityContext {
        apparmor,
        apparmor_profile: old.into(),
        readonly_paths: vec!["/proc/bus".into()],
        ..Default::default()
    };
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(sc),
        ..Default::default()
    });
    c
}

fn typed(t: cri::security_profile::ProfileType, r: &str) -> Option<cri::SecurityProfile> {
    Some(cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: r.into(),
    })
}

async fn exec_stdout(p: &mut Pod, id: &str, cmd: &[&str]) -> String {
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 20,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.exit_code, 0, "{cmd:?}: {}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

/// All cases in one criusd: each of its own would import busybox again (~8 s in the VM).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with AppArmor: hack/test.sh runs it in the VM"]
async fn runtime_default_localhost_and_unconfined_profiles_confine_containers_and_their_execs() {
    use cri::security_profile::ProfileType as T;
    let on = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").unwrap_or_default();
    assert!(
        on.starts_with('Y'),
        "AppArmor is not enabled in this kernel: run in hack/vm"
    );
    let _securityfs = SecurityFs::ensure();
    // Declared before the pod: removed after its containers are gone.
    let _local = Loaded::new(
        LOCAL,
        &format!(
            "profile {LOCAL} flags=(attach_disconnected,mediate_deleted) {{\n  file,\n  capability,\n  network,\n  \
             signal,\n  ptrace,\n  deny /denied-by-profile w,\n}}\n"
        ),
    );
    let mut p = Pod::in_the_vm("apparmor").await;
    assert!(
        loaded_profiles().contains("crius-default (enforce)"),
        "criusd did not load its profile at start-up: {}",
        loaded_profiles()
    );

    // RuntimeDefault: crius-default, enforced; /proc/sysrq-trigger denied, ordinary writes (a file, the
    // process's own /proc files, the IPC namespace's sysctl) allowed.
    let script = "cat /proc/self/attr/current; \
        { echo h > /proc/sysrq-trigger; } 2>&1; echo \"sysrq=$?\"; \
        echo x > /tmp/f && echo tmp=ok; \
        v=$(cat /proc/$$/oom_score_adj); echo $v > /proc/$$/oom_score_adj && echo oom=ok; \
        v=$(cat /proc/sys/kernel/shmmni); echo $v > /proc/sys/kernel/shmmni && echo shm=ok; \
        { v=$(cat /proc/sys/kernel/domainname); echo $v > /proc/sys/kernel/domainname; } 2>&1; \
        echo \"domainname=$?\"; echo done; sleep 1000";
    let default_id = p
        .started(confined("default", script, typed(T::RuntimeDefault, ""), ""))
        .await;
    p.wait_for_log("default", "done").await;
    let log = p.log_text("default");
    assert!(log.contains("crius-default (enforce)"), "{log}");
    assert!(log.contains("/proc/sysrq-trigger: Permission denied"), "{log}");
    assert!(!log.contains("sysrq=0"), "{log}");
    for ok in ["tmp=ok", "oom=ok", "shm=ok"] {
        assert!(log.contains(ok), "{ok} missing: {log}");
    }
    // kernel.domainname is not the IPC namespace's.
    assert!(
        log.contains("/proc/sys/kernel/domainname: Permission denied"),
        "{log}"
    );
    assert!(!log.contains("domainname=0"), "{log}");
    // Its execs enter the same profile.
    assert_eq!(
        exec_stdout(&mut p, &default_id, &["cat", "/proc/self/attr/current"]).await,
        "crius-default (enforce)"
    );

    // Nothing asked: RuntimeDefault (the CRI's "runtime/default: equivalent to not specifying a profile").
    p.started(container(
        "plain",
        "busybox",
        "cat /proc/self/attr/current; echo done; sleep 1000",
    ))
    .await;
    p.wait_for_log("plain", "done").await;
    assert!(
        p.log_text("plain").contains("crius-default (enforce)"),
        "{}",
        p.log_text("plain")
    );

    // Localhost, by the typed field and by the deprecated string: the test's profile, as it says.
    let script = "cat /proc/self/attr/current; echo a > /allowed && echo allowed=ok; \
        { echo b > /denied-by-profile; } 2>&1; echo \"denied=$?\"; echo done; sleep 1000";
    let local_id = p
        .started(confined("local", script, typed(T::Localhost, LOCAL), ""))
        .await;
    p.started(confined("local-old", script, None, &format!("localhost/{LOCAL}")))
        .await;
    for name in ["local", "local-old"] {
        p.wait_for_log(name, "done").await;
        let log = p.log_text(name);
        assert!(log.contains(&format!("{LOCAL} (enforce)")), "{name}: {log}");
        assert!(log.contains("allowed=ok"), "{name}: {log}");
        assert!(
            log.contains("/denied-by-profile: Permission denied"),
            "{name}: {log}"
        );
        assert!(!log.contains("denied=0"), "{name}: {log}");
    }
    assert_eq!(
        exec_stdout(&mut p, &local_id, &["cat", "/proc/self/attr/current"]).await,
        format!("{LOCAL} (enforce)")
    );
    let e = exec_stdout(
        &mut p,
        &local_id,
        &["sh", "-c", "echo c > /denied-by-profile || echo refused"],
    )
    .await;
    assert_eq!(e, "refused", "the exec is confined by the profile too");

    // A profile that is not loaded: refused at CreateContainer, naming it.
    for (name, conf) in [
        (
            "typed",
            confined(
                "missing",
                "true",
                typed(T::Localhost, "crius-test-not-loaded"),
                "",
            ),
        ),
        (
            "old",
            confined("missing-old", "true", None, "localhost/crius-test-not-loaded"),
        ),
    ] {
        let e = p.create(conf).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{name}: {e:?}");
        assert!(
            e.message().contains("\"crius-test-not-loaded\""),
            "{name}: {}",
            e.message()
        );
    }

    // Unconfined, by either field: no profile, for the container and its execs.
    let script = "cat /proc/self/attr/current; echo done; sleep 1000";
    let unconfined_id = p
        .started(confined("unconfined", script, typed(T::Unconfined, ""), ""))
        .await;
    p.started(confined("unconfined-old", script, None, "unconfined"))
        .await;
    for name in ["unconfined", "unconfined-old"] {
        p.wait_for_log(name, "done").await;
        let log = p.log_text(name);
        assert!(
            log.contains("unconfined") && !log.contains("(enforce)"),
            "{name}: {log}"
        );
    }
    assert_eq!(
        exec_stdout(&mut p, &unconfined_id, &["cat", "/proc/self/attr/current"]).await,
        "unconfined"
    );
}

/// An exec through `crius-runc exec` (criusd's direct exec off) enters the container's profile as the direct
/// path's execs above do.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with AppArmor: hack/test.sh runs it in the VM"]
async fn an_exec_through_crius_runc_exec_enters_the_containers_profile_too() {
    use cri::security_profile::ProfileType as T;
    let _securityfs = SecurityFs::ensure();
    let args = vec!["--direct-exec".to_string(), "false".to_string()];
    let mut p = Pod::in_the_vm_with("apparmor-runc-exec", args).await;
    let id = p
        .started(confined(
            "default",
            "echo done; sleep 1000",
            typed(T::RuntimeDefault, ""),
            "",
        ))
        .await;
    p.wait_for_log("default", "done").await;
    assert_eq!(
        exec_stdout(&mut p, &id, &["cat", "/proc/self/attr/current"]).await,
        "crius-default (enforce)"
    );
}
