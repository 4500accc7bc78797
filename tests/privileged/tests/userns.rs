//! User namespaces (`hostUsers: false`): crius-runc's idmapped bind mounts and a user namespace joined by
//! path, then a pod with a user namespace of its own through criusd (its mappings inside, its network
//! namespace owned by it, an idmapped rootfs and volume written by the container's root, one namespace for
//! every container and exec, after a criusd restart too, nothing left behind), Status, and bad mappings.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Child, Command};

use crius_test_support::{Bundle, Runtime};
use serde_json::{Value, json};

const MAP: &str = "0 100000 65536";

fn maps() -> Value {
    json!([{"containerID": 0, "hostID": 100000, "size": 65536}])
}

/// A directory only the host's root may enter (as criusd's are), holding `data/` (0755, with a file `f`).
fn private_data() -> (tempfile::TempDir, std::path::PathBuf) {
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = top.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("f"), "hello\n").unwrap();
    (top, data)
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_idmapped_bind_mounts_in_a_new_user_namespace() {
    let rt = Runtime::from_env();
    let (_top, data) = private_data();
    let (_top2, plain) = private_data();
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        "cat /proc/self/uid_map; stat -c %u /tmp/idmapped/f /tmp/plain/f; cat /tmp/plain/f; \
         echo x > /tmp/idmapped/new && stat -c %u /tmp/idmapped/new; id -u",
    ]);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = maps();
    b.config["linux"]["gidMappings"] = maps();
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.push(
        json!({"destination": "/tmp/idmapped", "type": "bind", "source": data,
        "options": ["rbind", "rw", "idmap"], "uidMappings": maps(), "gidMappings": maps()}),
    );
    mounts.push(
        json!({"destination": "/tmp/plain", "type": "bind", "source": plain, "options": ["rbind", "ro"]}),
    );
    let (code, out, err) = rt.run_bundle(&b, "userns");
    assert_eq!(code, 0, "{err}");
    // The host's root owns both files: the idmapped mount shows it as the namespace's root, the plain one
    // as the overflow uid; a file the container's root writes through the idmapped mount is the host's root's.
    assert_eq!(
        words(&out),
        [&words(MAP)[..], &["0", "65534", "hello", "0", "0"]].concat()
    );
    assert_eq!(std::fs::metadata(data.join("new")).unwrap().uid(), 0);
}

/// A process in a user namespace of its own with [`MAP`], as a pod's would be held.
struct Held(Child);

impl Held {
    fn new() -> Held {
        let child = Command::new("unshare")
            .args(["--user", "sleep", "60"])
            .spawn()
            .unwrap();
        let pid = child.id();
        for _ in 0..100 {
            let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
            if std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|l| l != mine) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), MAP).unwrap();
        std::fs::write(format!("/proc/{pid}/gid_map"), MAP).unwrap();
        Held(child)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_a_user_namespace_joined_by_path() {
    let rt = Runtime::from_env();
    let held = Held::new();
    let (_top, data) = private_data();
    let mut b = Bundle::new(&[
        "sh",
        "-c",
        "cat /proc/self/uid_map; id -u; cat /data/f; readlink /proc/self/ns/user",
    ]);
    let path = format!("/proc/{}/ns/user", held.0.id());
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user", "path": path}));
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/data", "type": "bind",
        "source": data, "options": ["rbind", "ro"], "uidMappings": maps(), "gidMappings": maps()}));
    let (code, out, err) = rt.run_bundle(&b, "userns");
    assert_eq!(code, 0, "{err}");
    let ns = std::fs::read_link(&path).unwrap();
    assert_eq!(
        words(&out),
        [&words(MAP)[..], &["0", "hello", ns.to_str().unwrap()]].concat()
    );
}

mod pod {
    //! A pod with `hostUsers: false` through criusd, as kubelet 1.36 asks for one.

    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use crius_api::cri;
    use crius_privileged_tests::cri::{self as c, Pod, container};
    use crius_test_support::require_root;

    fn ids() -> Vec<cri::IdMapping> {
        vec![cri::IdMapping {
            container_id: 0,
            host_id: 100000,
            length: 65536,
        }]
    }

    fn userns() -> cri::NamespaceOption {
        cri::NamespaceOption {
            pid: cri::NamespaceMode::Container as i32,
            userns_options: Some(cri::UserNamespace {
                mode: cri::NamespaceMode::Pod as i32,
                uids: ids(),
                gids: ids(),
            }),
            ..Default::default()
        }
    }

    fn in_userns(mut ctr: cri::ContainerConfig) -> cri::ContainerConfig {
        ctr.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(userns()),
                ..Default::default()
            }),
            ..Default::default()
        });
        ctr
    }

    /// The processes whose user namespace is the one `link` names (`user:[inode]`).
    fn in_namespace(link: &str) -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let p = e.path().join("ns/user");
            if std::fs::read_link(&p).is_ok_and(|l| l.to_str() == Some(link)) {
                found.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        found
    }

    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "needs root: run through hack/test.sh"]
    async fn a_pod_with_host_users_false_runs_in_its_own_mapped_user_namespace() {
        require_root();
        let mut conf = c::config("userns", "uid-userns");
        conf.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(userns()),
                ..Default::default()
            }),
            // A network sysctl: the pod's network namespace is its user namespace's, so its root may set it.
            sysctls: [(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "99".to_string(),
            )]
            .into(),
            ..Default::default()
        });
        let mut p = Pod::on_network_with(conf).await;
        // Volumes under a directory only the host's root may enter: one idmapped (as kubelet sends its
        // volumes), one not.
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let (vol, plain) = (top.path().join("vol"), top.path().join("plain"));
        for d in [&vol, &plain] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let mut ctr = in_userns(container(
            "main",
            "busybox",
            "cat /proc/self/uid_map /proc/self/gid_map; id -u; \
             cat /proc/sys/net/ipv4/ip_unprivileged_port_start; \
             stat -c 'rootfs %u' /bin; touch /rootfs-file && echo rootfs-writable; \
             stat -c 'vol %u' /vol; echo x > /vol/by-root && stat -c 'written %u' /vol/by-root; stat -c 'image %u' /image/bin; \
             echo y > /plain/by-root; readlink /proc/self/ns/user",
        ));
        for (host, at, mapped) in [(&vol, "/vol", true), (&plain, "/plain", false)] {
            ctr.mounts.push(cri::Mount {
                host_path: host.display().to_string(),
                container_path: at.into(),
                uid_mappings: if mapped { ids() } else { vec![] },
                gid_mappings: if mapped { ids() } else { vec![] },
                ..Default::default()
            });
        }
        // An image volume, which kubelet sends with the mappings too.
        ctr.mounts.push(cri::Mount {
            container_path: "/image".into(),
            image: Some(cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            readonly: true,
            uid_mappings: ids(),
            gid_mappings: ids(),
            ..Default::default()
        });
        let main = p.started(ctr).await;
        let st = c::wait_state(&mut p.c, &main, cri::ContainerState::ContainerExited).await;
        let log = p.log_text("main");
        assert_eq!(st.exit_code, 0, "{log}");
        let out: Vec<String> = log
            .lines()
            .filter_map(|l| {
                l.split_once(" stdout F ")
                    .map(|(_, t)| t.split_whitespace().collect::<Vec<_>>().join(" "))
            })
            .collect();
        assert_eq!(
            out[..9],
            [
                "0 100000 65536",
                "0 100000 65536",
                "0",
                "99",
                "rootfs 0",
                "rootfs-writable",
                "vol 0",
                "written 0",
                "image 0",
            ],
            "{log}"
        );
        // Through the idmapped volume the container's root writes as the host's root; elsewhere as the
        // host uid it is mapped to.
        assert_eq!(std::fs::metadata(vol.join("by-root")).unwrap().uid(), 0);
        assert_eq!(std::fs::metadata(plain.join("by-root")).unwrap().uid(), 100000);
        let link = out[9].clone();
        assert!(link.starts_with("user:["), "{log}");
        assert_ne!(
            std::fs::read_link("/proc/self/ns/user").unwrap().to_str(),
            Some(link.as_str())
        );

        // Every container of the pod is in that one user namespace, after a restart of criusd too.
        p.restart_daemon().await;
        let ready = c::status(&mut p.c, &p.id.clone()).await.unwrap();
        assert_eq!(ready.state, cri::PodSandboxState::SandboxReady as i32);
        let second = p
            .started(in_userns(container(
                "second",
                "busybox",
                "readlink /proc/self/ns/user",
            )))
            .await;
        c::wait_state(&mut p.c, &second, cri::ContainerState::ContainerExited).await;
        assert!(
            p.log_text("second").contains(&format!(" stdout F {link}")),
            "{}",
            p.log_text("second")
        );

        // An exec (kubelet's probes) runs in it too, as the container's root.
        let long = p
            .started(in_userns(container("long", "busybox", "sleep 60")))
            .await;
        let r =
            p.c.exec_sync(cri::ExecSyncRequest {
                container_id: long.clone(),
                cmd: [
                    "sh",
                    "-c",
                    "id -u; readlink /proc/self/ns/user; touch /exec-file && echo ok",
                ]
                .map(String::from)
                .to_vec(),
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        let text = String::from_utf8_lossy(&r.stdout);
        assert_eq!(
            (r.exit_code, text.as_ref()),
            (0, format!("0\n{link}\nok\n").as_str()),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        c::cstop(&mut p.c, &long, 0).await;

        // A container asking for another user namespace than its pod's is refused by name.
        let mut other = container("other", "busybox", "true");
        other.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    userns_options: Some(cri::UserNamespace {
                        mode: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let e = p.create(other).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("userns_options"), "{}", e.message());

        // Once the pod is gone, nothing holds the namespace, and no pin or mount is left.
        for id in [&main, &second, &long] {
            c::cremove(&mut p.c, id).await;
        }
        c::stop(&mut p.c, &p.id.clone()).await.unwrap();
        c::remove(&mut p.c, &p.id.clone()).await.unwrap();
        assert_eq!(in_namespace(&link), Vec::<String>::new());
        assert_eq!(c::entries(&p.d.state().join("ns")), Vec::<String>::new());
        assert_eq!(
            crius_test_support::containerd::mounts_under(p.d.dir()),
            Vec::<String>::new()
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "needs root: run through hack/test.sh"]
    async fn status_advertises_user_namespaces_and_bad_mappings_are_refused_by_field() {
        require_root();
        let mut p = Pod::on_host_network("userns-status").await;
        let st =
            p.c.status(cri::StatusRequest { verbose: false })
                .await
                .unwrap()
                .into_inner();
        let default = st.runtime_handlers.iter().find(|h| h.name.is_empty()).unwrap();
        assert!(default.features.as_ref().unwrap().user_namespaces, "{st:?}");
        let two = vec![
            ids()[0],
            cri::IdMapping {
                host_id: 200000,
                ..ids()[0]
            },
        ];
        for (uids, says) in [
            (two, "uids has 2 mappings"),
            (
                vec![cri::IdMapping {
                    container_id: 1,
                    ..ids()[0]
                }],
                "0 must be mapped",
            ),
        ] {
            let mut conf = c::config("bad", "uid-bad");
            conf.linux = Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        userns_options: Some(cri::UserNamespace {
                            mode: cri::NamespaceMode::Pod as i32,
                            uids,
                            gids: ids(),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
            let e = c::run(&mut p.c, conf).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(
                e.message().contains(says) && e.message().contains("userns_options"),
                "{}",
                e.message()
            );
        }
    }
}
