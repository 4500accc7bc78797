//! A real containerd 1.6 (Debian's) for one test: its root, state and sockets in a temp dir, the CRI plugin
//! off, or on for CRI clients (the pod engine compared on both runtimes). `ctr` talks to it. Stopped when dropped, with every mount under its directory undone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running containerd.
pub struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
}

impl Containerd {
    /// Starts containerd in a temp dir, its CRI plugin off.
    pub fn start() -> Containerd {
        Containerd::with_config(|_| "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n".into())
    }

    /// Starts containerd with its CRI plugin on: runc, overlayfs, CNI from `cni_conf_dir` with Debian's
    /// plugins, `sandbox_image` as the pause image (import it first: it is never pulled), and
    /// `restrict_oom_score_adj` (this host cannot lower oom_score_adj). CRI clients use [`Containerd::socket`].
    pub fn start_cri(cni_conf_dir: &Path, sandbox_image: &str) -> Containerd {
        let (conf, image) = (cni_conf_dir.display().to_string(), sandbox_image.to_string());
        Containerd::with_config(move |_| {
            format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{image}\"\n  \
                 restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  \
                 default_runtime_name = \"runc\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
                 runtime_type = \"io.containerd.runc.v2\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = \"{conf}\"\n"
            )
        })
    }

    fn with_config(extra: impl FnOnce(&Path) -> String) -> Containerd {
        crate::require_root();
        crate::which("containerd");
        let dir = tempfile::Builder::new()
            .prefix("crius-ctrd-")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        // Top-level keys first: a TOML table header would swallow them.
        let config = format!(
            "version = 2\nroot = \"{r}/root\"\nstate = \"{r}/state\"\n{extra}\
             [grpc]\n  address = \"{r}/containerd.sock\"\n[ttrpc]\n  address = \"{r}/containerd.sock.ttrpc\"\n",
            r = d.display(),
            extra = extra(d),
        );
        std::fs::write(d.join("config.toml"), config).expect("config");
        let log = std::fs::File::create(d.join("containerd.log")).expect("log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        let c = Containerd { child, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Command::new("ctr")
            .arg("-a")
            .arg(c.socket())
            .arg("version")
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "containerd did not start: {}", c.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    /// Its gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// Runs `ctr -a <socket> <args>` (stdin closed; output captured: never for a task that keeps the pipes).
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("-a")
            .arg(self.socket())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running ctr")
    }

    /// Runs ctr, asserts success, returns stdout.
    pub fn ctr_ok(&self, args: &[&str]) -> String {
        let out = self.ctr(args);
        assert!(
            out.status.success(),
            "ctr {args:?}: {}{}\ncontainerd log tail:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log().lines().rev().take(15).collect::<Vec<_>>().join("\n")
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The status column of `ctr task ls` for `id` (`RUNNING`, `STOPPED`, …), if listed.
    pub fn task_status(&self, id: &str) -> Option<String> {
        self.ctr_ok(&["task", "ls"])
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
    }
}

/// Mount points under `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = crius_common::mountinfo::mounts()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.mount_point.starts_with(dir))
        .map(|m| m.mount_point.display().to_string())
        .collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.len()));
    v
}

impl Drop for Containerd {
    fn drop(&mut self) {
        crate::terminate(&mut self.child, Duration::from_secs(10));
        let _ = self.child.kill();
        let _ = self.child.wait();
        for m in mounts_under(self.dir.path()) {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        // runc under containerd puts containers in /<namespace>/<id> and removes only <id>: the namespace's
        // cgroup stays. rmdir removes it only once it is empty, so another test's containerd loses nothing.
        if let Some(mount) = crius_common::mountinfo::cgroup2() {
            for ns in ["default", "k8s.io"] {
                let _ = std::fs::remove_dir(mount.join(ns));
            }
        }
    }
}
