//! Mounts and isolation: bidirectional propagation, a shared PID namespace, seccomp profiles, the sealed
//! runtime copy and a container targeting another's PID namespace.

use super::*;

/// A directory of the test's own made a shared mount (as kubelet's Bidirectional volumes must be), unmounted
/// with what was mounted under it when dropped.
struct SharedDir(tempfile::TempDir);

impl SharedDir {
    fn new() -> SharedDir {
        let d = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("mount").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "mount {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let p = d.path().to_str().unwrap().to_string();
        run(&["--bind", &p, &p]);
        run(&["--make-shared", &p]);
        SharedDir(d)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        for m in crius_test_support::containerd::mounts_under(self.0.path()) {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_bidirectional_mount_propagates_both_ways_and_host_to_container_one_way() {
    require_root();
    let mut p = Pod::on_host_network("propagation").await;
    let (shared, slave) = (SharedDir::new(), SharedDir::new());
    let mount = |host: &Path, at: &str, prop: cri::MountPropagation| cri::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        propagation: prop as i32,
        ..Default::default()
    };
    let mut c = container(
        "mounter",
        "busybox",
        "mount -t tmpfs tmpfs /shared/from-container && mount -t tmpfs tmpfs /slave/from-container && \
         echo mounted; sleep 3600",
    );
    c.mounts = vec![
        mount(
            shared.0.path(),
            "/shared",
            cri::MountPropagation::PropagationBidirectional,
        ),
        mount(
            slave.0.path(),
            "/slave",
            cri::MountPropagation::PropagationHostToContainer,
        ),
    ];
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    for d in [&shared, &slave] {
        std::fs::create_dir(d.0.path().join("from-container")).unwrap();
        std::fs::create_dir(d.0.path().join("from-host")).unwrap();
    }
    let id = p.started(c).await;
    p.wait_for_log("mounter", "mounted").await;
    let host_mounts = || crius_test_support::containerd::mounts_under(Path::new("/"));
    let on_host =
        |d: &SharedDir| host_mounts().contains(&d.0.path().join("from-container").display().to_string());
    assert!(
        on_host(&shared),
        "the container's mount reached the host through the Bidirectional mount"
    );
    assert!(!on_host(&slave), "a HostToContainer mount carries nothing back");
    for d in [&shared, &slave] {
        let to = d.0.path().join("from-host");
        nix::mount::mount(
            Some("tmpfs"),
            &to,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
    }
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["cat".into(), "/proc/mounts".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let inside = String::from_utf8_lossy(&r.stdout);
    for at in ["/shared/from-host", "/slave/from-host"] {
        assert!(
            inside.contains(&format!(" {at} ")),
            "the host's mount reaches {at}: {inside}"
        );
    }
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_pod_sharing_its_pid_namespace_has_an_init_of_its_own_and_sees_every_container() {
    require_root();
    let mut conf = host_network(config("sharepid", "uid-sharepid"));
    let ns = conf
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
        .unwrap();
    ns.pid = cri::NamespaceMode::Pod as i32;
    let d = Daemon::start(&[]);
    import_busybox(&d);
    let mut c = client(&d).await;
    conf.log_directory = d.dir().join("logs").display().to_string();
    let pod = run(&mut c, conf).await.unwrap();
    let sleeper = format!("sleep {}", 3000 + std::process::id() % 1000);
    let ids = [
        create(&mut c, &pod, container("first", "busybox", &sleeper))
            .await
            .unwrap(),
        create(&mut c, &pod, container("second", "busybox", "sleep 3600"))
            .await
            .unwrap(),
    ];
    for id in &ids {
        start(&mut c, id).await;
        wait_state(&mut c, id, cri::ContainerState::ContainerRunning).await;
    }
    let exec = |id: &str, cmd: &[&str]| cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 10,
    };
    let out = |r: cri::ExecSyncResponse| String::from_utf8_lossy(&r.stdout).into_owned();
    let init = out(c
        .exec_sync(exec(&ids[1], &["cat", "/proc/1/cmdline"]))
        .await
        .unwrap()
        .into_inner());
    assert!(
        init.contains("pid-init"),
        "pid 1 is the pod's init, not a container's process: {init:?}"
    );
    let ps = out(c
        .exec_sync(exec(&ids[1], &["ps", "-o", "args"]))
        .await
        .unwrap()
        .into_inner());
    assert!(
        ps.contains(&sleeper),
        "the second container sees the first's process: {ps}"
    );
    let holder = shim_pids("pid-init");
    assert_eq!(holder.len(), 1, "one init for the pod: {holder:?}");
    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
    eventually(
        in_20s(),
        || format!("the pod's init and {sleeper} are gone"),
        || shim_pids("pid-init").is_empty() && pids_running(&sleeper).is_empty(),
    )
    .await;
    assert!(entries(&d.state().join("ns")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn seccomp_localhost_and_runtime_default_profiles_apply_and_a_missing_one_is_refused_naming_it() {
    require_root();
    let mut p = Pod::on_host_network("seccomp").await;
    let profile = p.d.dir().join("block-chmod.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["chmod", "fchmodat", "fchmodat2"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let with = |name: &str, profile: Option<cri::SecurityProfile>| {
        let mut c = container(name, "busybox", "sleep 3600");
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                seccomp: profile,
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    };
    let localhost = |path: &Path| cri::SecurityProfile {
        profile_type: cri::security_profile::ProfileType::Localhost as i32,
        localhost_ref: path.display().to_string(),
    };
    let confined = p.started(with("confined", Some(localhost(&profile)))).await;
    let free = p.started(with("free", None)).await;
    let default = p
        .started(with(
            "default",
            Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                localhost_ref: String::new(),
            }),
        ))
        .await;
    let run = |id: &str, cmd: &[&str]| cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 10,
    };
    for (id, mode, chmod_ok) in [(&confined, "2", false), (&free, "0", true), (&default, "2", true)] {
        wait_state(&mut p.c, id, cri::ContainerState::ContainerRunning).await;
        let st =
            p.c.exec_sync(run(id, &["grep", "Seccomp:", "/proc/self/status"]))
                .await
                .unwrap()
                .into_inner();
        let st = String::from_utf8_lossy(&st.stdout);
        assert!(st.contains(&format!("Seccomp:\t{mode}")), "{st}");
        let r =
            p.c.exec_sync(run(id, &["chmod", "400", "/tmp"]))
                .await
                .unwrap()
                .into_inner();
        assert_eq!(
            r.exit_code == 0,
            chmod_ok,
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        if !chmod_ok {
            assert!(String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"));
        }
    }
    // RuntimeDefault: ordinary work goes on; a new user namespace (no capability needed) is refused.
    let r =
        p.c.exec_sync(run(
            &default,
            &["sh", "-c", "ls / >/dev/null && date >/dev/null && echo fine"],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "fine\n",
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let r =
        p.c.exec_sync(run(&default, &["unshare", "-U", "true"]))
            .await
            .unwrap()
            .into_inner();
    assert_ne!(r.exit_code, 0, "RuntimeDefault refuses unshare");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let gone = p.d.dir().join("no-such-profile.json");
    let e = p
        .create(with("missing", Some(localhost(&gone))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(&gone.display().to_string()), "{e:?}");
    std::fs::write(&gone, "{not json").unwrap();
    let e = p
        .create(with("invalid", Some(localhost(&gone))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for id in [&confined, &free, &default] {
        cstop(&mut p.c, id, 0).await;
        cremove(&mut p.c, id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_localhost_seccomp_profile_blocking_sethostname_stops_even_cap_sys_admin() {
    require_root();
    // A pod of its own network, so its containers have a UTS namespace of their own: the control container's
    // sethostname changes only that, never the host's name.
    let mut p = Pod::on_network("pod-uts").await;
    let profile = p.d.dir().join("block-sethostname.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let with = |name: &str, seccomp: Option<cri::SecurityProfile>| {
        let mut c = container(name, "busybox", "sleep 3600");
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["SYS_ADMIN".into()],
                    ..Default::default()
                }),
                seccomp,
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    };
    let blocked = p
        .started(with(
            "blocked",
            Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::Localhost as i32,
                localhost_ref: profile.display().to_string(),
            }),
        ))
        .await;
    let control = p.started(with("control", None)).await;
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for (id, allowed) in [(&blocked, false), (&control, true)] {
        wait_state(&mut p.c, id, cri::ContainerState::ContainerRunning).await;
        let r =
            p.c.exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: ["hostname", "renamed-by-test"].map(String::from).to_vec(),
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.exit_code == 0, allowed, "{id}: {err}");
        if !allowed {
            assert!(err.contains("Operation not permitted"), "{err}");
        }
    }
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_name,
        "the host's name is untouched"
    );
    for id in [&blocked, &control] {
        cstop(&mut p.c, id, 0).await;
        cremove(&mut p.c, id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn shims_run_the_runtime_from_criusds_sealed_copy() {
    require_root();
    let mut p = Pod::on_host_network("sealed").await;
    let id = p.started(container("sealed", "busybox", "sleep 3600")).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    // criusd made one copy of the runtime (named crius-runtime) and handed it to the pod's shim, which ran
    // `create` and `start` through it.
    let shims = shim_pids(&id);
    assert_eq!(shims.len(), 1, "{shims:?}");
    let holds = |pid: i32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.display().to_string() == "/memfd:crius-runtime (deleted)")
            })
    };
    assert!(holds(p.d.pid() as i32), "criusd holds the sealed copy");
    assert!(holds(shims[0]), "the shim holds the sealed copy");
    let log = std::fs::read_to_string(p.d.state().join("containers").join(&id).join("shim.log")).unwrap();
    assert!(log.contains("runs from criusd's sealed copy"), "{log}");
    // An exec goes through it too, and works.
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["echo".into(), "through the copy".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "through the copy\n");
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_container_with_pid_mode_target_sees_its_targets_processes() {
    require_root();
    let mut p = Pod::on_host_network("pidtarget").await;
    let sleeper = format!("sleep {}", 4000 + std::process::id() % 1000);
    let target = p
        .started(container("app", "busybox", &format!("exec {sleeper}")))
        .await;
    wait_state(&mut p.c, &target, cri::ContainerState::ContainerRunning).await;
    let mut debug = container("debug", "busybox", "sleep 3600");
    let sc = debug
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default);
    sc.namespace_options = Some(cri::NamespaceOption {
        pid: cri::NamespaceMode::Target as i32,
        target_id: target.clone(),
        ..Default::default()
    });
    let mut refused = debug.clone();
    refused.metadata.as_mut().unwrap().name = "debug-nowhere".into();
    if let Some(o) = refused
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
    {
        o.target_id = "nosuchcontainer".into();
    }
    let e = p.create(refused).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("target_id"), "{}", e.message());
    let id = p.started(debug).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["cat".into(), "/proc/1/cmdline".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let init = String::from_utf8_lossy(&r.stdout).replace('\0', " ");
    assert_eq!(init.trim(), sleeper, "pid 1 is the target's process");
}
