//! Mount points runc refuses: a proc or sysfs whose destination is a symlink (runc's mask.bats "prohibit
//! symlink /proc" and "/sys", with a rootfs that, like runc's test image, has no /proc or /sys of its own).

use crius_test_support::{Bundle, Runtime};
use serde_json::json;

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_proc_or_sysfs_on_a_symlink_is_refused() {
    let rt = Runtime::from_env();
    for fstype in ["proc", "sysfs"] {
        // A dangling link, and one to a directory that exists: neither is an ordinary directory.
        for link in ["/nonexistent", "/tmp"] {
            let dir = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink(link, dir.path().join("p")).unwrap();
            let mut b = Bundle::sh("true");
            let mounts = b.config["mounts"].as_array_mut().unwrap();
            mounts.push(
                json!({"destination": "/tmp/d", "type": "bind", "source": dir.path(),
                "options": ["rbind"]}),
            );
            mounts.push(json!({"destination": "/tmp/d/p", "type": fstype, "source": fstype}));
            let (code, _, err) = rt.run_bundle(&b, "compat");
            assert_ne!(code, 0, "{fstype} on a link to {link}");
            assert!(
                err.contains("must be mounted on ordinary directory"),
                "{fstype} on a link to {link}: {err}"
            );
            assert!(
                std::fs::read_link(dir.path().join("p")).is_ok(),
                "the link is left as it was"
            );
        }
    }
}
