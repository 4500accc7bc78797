//! User namespaces (`hostUsers: false`): crius-runc's idmapped bind mounts and a user namespace joined by
//! path, then a pod with a user namespace of its own through criusd (its mappings inside, its network
//! namespace owned by it, a volume written by the container's root, nothing left behind).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Child, Command};

use crius_test_support::{Bundle, Runtime, unique};
use serde_json::{Value, json};

const MAP: &str = "0 100000 65536";

fn maps() -> Value {
    json!([{"containerID": 0, "hostID": 100000, "size": 65536}])
}

fn run(rt: &Runtime, b: &Bundle) -> (i32, String, String) {
    let dir = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &dir, &unique("userns")]);
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
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
    let (code, out, err) = run(&rt, &b);
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
    let (code, out, err) = run(&rt, &b);
    assert_eq!(code, 0, "{err}");
    let ns = std::fs::read_link(&path).unwrap();
    assert_eq!(
        words(&out),
        [&words(MAP)[..], &["0", "hello", ns.to_str().unwrap()]].concat()
    );
}
