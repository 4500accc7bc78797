//! cgroup v2, and only v2: placement, limits, live updates, freeze, kill and stats.
//!
//! crius uses the host's cgroup2 tree wherever it is mounted — `/sys/fs/cgroup` on a pure v2 host, or the
//! controller-less `/sys/fs/cgroup/unified` of a hybrid host, where grouping, `cgroup.kill`, `cgroup.freeze`,
//! pid listing and basic `cpu.stat` still work. A limit whose controller the tree lacks is an error that names the
//! controller, never a silent skip.
//!
//! The design card names cgroups-rs for this; crius writes the cgroup files itself (`plan` turns OCI resources
//! into a list of file writes), because neither of cgroups-rs 0.5's layers writes what runc does on v2:
//! - its `manager` layer converts cpu shares to `cpu.weight` with the old linear formula
//!   `1 + ((shares - 2) * 9999) / 262142` (`src/manager/conv.rs`: the 1024 shares of a 1-CPU request become weight
//!   39), while runc ≥ 1.3.2, crun ≥ 1.23 and youki moved in 2025 to the quadratic mapping that
//!   [`shares_to_weight`] implements (1024 becomes 100, the kernel's default);
//! - its `fs` layer converts nothing: `Cpu::set_shares` writes the shares value itself into `cpu.weight`, and
//!   `set_memswap_limit` writes OCI's memory+swap total into `memory.swap.max`, which on v2 is swap alone
//!   (`src/fs/cpu.rs`, `src/fs/memory.rs`). `plan` writes the total minus the memory limit, as runc does.
//!
//! What is written is then a pure function of the OCI resources, which `plan`'s unit tests pin file by file.

mod devices;
mod plan;
pub mod psi;
mod stats;
pub mod systemd;

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use oci_spec::runtime::LinuxResources;

pub use plan::{Write, plan, shares_to_weight};
pub use stats::Stats;

use crate::{Error, Result, err};

/// A container's cgroup directory.
#[derive(Debug, Clone)]
pub struct Cgroup {
    /// Where the cgroup2 filesystem is mounted.
    pub mount: PathBuf,
    /// The cgroup directory (below `mount`).
    pub dir: PathBuf,
}

/// Finds the cgroup2 mount: `/sys/fs/cgroup` if it is cgroup2, else the first cgroup2 mount in mountinfo.
pub fn mount_point() -> Result<PathBuf> {
    crius_common::mountinfo::cgroup2()
        .ok_or_else(|| err!("no cgroup2 filesystem is mounted (crius needs cgroup v2)"))
}

impl Cgroup {
    /// The cgroup for `cgroups_path` (OCI `linux.cgroupsPath`, absolute or relative to the mount) or, if unset,
    /// `/crius/<id>`. A path that would leave the mount (`..`) is refused.
    pub fn resolve(cgroups_path: Option<&Path>, id: &str) -> Result<Cgroup> {
        let mount = mount_point()?;
        let rel = match cgroups_path {
            Some(p) if !p.as_os_str().is_empty() => {
                let s = p.to_string_lossy();
                if systemd::is_systemd_form(&s) {
                    return Err(err!(
                        "cgroupsPath {s:?} is in systemd form (slice:prefix:name): run with --systemd-cgroup, or \
                         give a cgroupfs path"
                    ));
                }
                p.to_path_buf()
            }
            _ => PathBuf::from("crius").join(id),
        };
        let mut dir = mount.clone();
        for c in rel.components() {
            match c {
                Component::Normal(n) => dir.push(n),
                Component::RootDir | Component::CurDir => {}
                _ => return Err(err!("cgroupsPath {} must not contain '..'", rel.display())),
            }
        }
        if dir == mount {
            return Err(err!("cgroupsPath {} is the cgroup root", rel.display()));
        }
        Ok(Cgroup { mount, dir })
    }

    /// The cgroup of the systemd scope `scope` (which systemd makes: see [`systemd`]).
    pub fn of_scope(scope: &systemd::Scope) -> Result<Cgroup> {
        let mount = mount_point()?;
        Ok(Cgroup {
            dir: mount.join(scope.relative_dir()?),
            mount,
        })
    }

    /// Opens an existing cgroup directory (from a state record).
    pub fn at(dir: &Path) -> Result<Cgroup> {
        Ok(Cgroup {
            mount: mount_point()?,
            dir: dir.to_path_buf(),
        })
    }

    /// Creates the directory (and parents) with every controller its parent offers, as runc does: each ancestor
    /// enables in its `cgroup.subtree_control` all the controllers listed in its `cgroup.controllers`, so memory,
    /// cpu, io and pids are charged to the container from its first instruction, limits or not. A controller that
    /// cannot be enabled (a threaded subtree, an ancestor with processes of its own) is left out quietly here;
    /// [`Cgroup::enable`] fails naming it if a limit needs it.
    pub fn create(&self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.error(format!("creating: {e}")))?;
        self.enable_all();
        Ok(())
    }

    /// The directories from the mount down to this cgroup's parent: those whose `subtree_control` decides which
    /// controllers this cgroup has.
    fn ancestors(&self) -> Result<Vec<PathBuf>> {
        let rel = self
            .dir
            .strip_prefix(&self.mount)
            .map_err(|_| self.error("not below the cgroup mount"))?;
        let mut cur = self.mount.clone();
        let mut out = Vec::new();
        for part in rel.components() {
            out.push(cur.clone());
            cur.push(part);
        }
        Ok(out)
    }

    /// Enables, top down, every controller each ancestor has but does not pass on yet; best effort (see
    /// [`Cgroup::create`]). One write per ancestor that lacks any, none where all are on already.
    fn enable_all(&self) {
        let Ok(ancestors) = self.ancestors() else {
            return;
        };
        for dir in ancestors {
            let missing = missing_controllers(&dir);
            if missing.is_empty() {
                continue;
            }
            let control = dir.join("cgroup.subtree_control");
            let all: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
            if std::fs::write(&control, all.join(" ")).is_err() {
                // The kernel takes all or none: enable those it accepts one by one.
                for c in &all {
                    let _ = std::fs::write(&control, c);
                }
            }
        }
    }

    fn error(&self, msg: impl Into<String>) -> Error {
        Error::Cgroup {
            path: self.dir.display().to_string(),
            msg: msg.into(),
        }
    }

    /// Reads a file of this cgroup, trimmed.
    pub fn read(&self, file: &str) -> Result<String> {
        std::fs::read_to_string(self.dir.join(file))
            .map(|s| s.trim().to_string())
            .map_err(|e| self.error(format!("reading {file}: {e}")))
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        std::fs::write(self.dir.join(file), value).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::ENOENT) => " (the kernel has no such cgroup file)",
                Some(libc::EINVAL) | Some(libc::ERANGE) => " (value refused by the kernel)",
                _ => "",
            };
            self.error(format!("writing {value:?} to {file}: {e}{hint}"))
        })
    }

    /// Makes `controllers` available in this cgroup by enabling them in every ancestor's `subtree_control`.
    /// Fails naming the controller when the tree lacks it and naming `needed_for` (the file that needs it).
    pub fn enable(&self, controller: &str, needed_for: &str) -> Result<()> {
        if has_word(&self.dir.join("cgroup.controllers"), controller) {
            return Ok(());
        }
        for cur in self.ancestors()? {
            let available = std::fs::read_to_string(cur.join("cgroup.controllers")).unwrap_or_default();
            if !available.split_whitespace().any(|c| c == controller) {
                return Err(self.error(format!(
                    "cgroup controller {controller:?} is not available in {} (needed for {needed_for}); \
                     available: [{}]",
                    cur.display(),
                    available.trim()
                )));
            }
            let enabled = std::fs::read_to_string(cur.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == controller) {
                std::fs::write(cur.join("cgroup.subtree_control"), format!("+{controller}")).map_err(
                    |e| {
                        let hint = match e.raw_os_error() {
                            Some(libc::EBUSY) => " (that cgroup has processes of its own)",
                            Some(libc::EOPNOTSUPP) => " (a threaded subtree takes threaded controllers only)",
                            _ => "",
                        };
                        self.error(format!(
                            "enabling {controller} in {}/cgroup.subtree_control (needed for {needed_for}): \
                             {e}{hint}",
                            cur.display()
                        ))
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Applies `res`: every file write of [`plan`], after making sure its controller is there, and device rules.
    pub fn apply(&self, res: &LinuxResources) -> Result<()> {
        let writes = plan(res)?;
        let mut enabled: Vec<&str> = Vec::new();
        for w in &writes {
            if let Some(c) = w.controller()
                && !enabled.contains(&c)
            {
                self.enable(c, &format!("{}={}", w.file, w.value))?;
                enabled.push(c);
            }
        }
        for w in &writes {
            self.write(&w.file, &w.value)?;
        }
        if let Some(rules) = res.devices() {
            devices::apply(&self.dir, rules).map_err(|e| self.error(format!("device rules: {e}")))?;
        }
        Ok(())
    }

    /// Refuses a `memory.max` below what the cgroup uses now (the kernel would OOM-kill instead of failing).
    pub fn check_memory_decrease(&self, res: &LinuxResources, id: &str) -> Result<()> {
        let Some(limit) = res.memory().as_ref().and_then(|m| m.limit()).filter(|&l| l > 0) else {
            return Ok(());
        };
        let Ok(usage) = self.read("memory.current") else {
            return Ok(());
        };
        let usage: i64 = usage.parse().unwrap_or(0);
        if limit < usage {
            return Err(self.error(format!(
                "refusing memory limit {limit} bytes for container {id:?}: below its current usage of {usage} bytes"
            )));
        }
        Ok(())
    }

    /// Moves process `pid` into this cgroup.
    pub fn add(&self, pid: i32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The pids in this cgroup (not in its children).
    pub fn procs(&self) -> Result<Vec<i32>> {
        Ok(self
            .read("cgroup.procs")?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Checks a cgroup that exists before the container is created in it, as runc does: one whose processes
    /// are frozen would freeze the container's init at its first instruction, so it is refused; one that
    /// holds processes already is allowed with a warning (runc 1.1 warns; later runc refuses it, but a
    /// shared cgroup is still how some callers group processes). A cgroup not there yet passes.
    pub fn check_existing(&self) -> Result<()> {
        if !self.dir.is_dir() {
            return Ok(());
        }
        if self.read("cgroup.freeze").is_ok_and(|v| v == "1") {
            return Err(self.error(
                "container's cgroup unexpectedly frozen (cgroup.freeze is 1): thaw it, or give another cgroupsPath",
            ));
        }
        let n = self.all_procs();
        if n > 0 {
            crate::log::warn(&format!(
                "container's cgroup is not empty: {n} process(es) found in {}; they share its limits, and \
                 deleting the container kills them too",
                self.dir.display()
            ));
        }
        Ok(())
    }

    /// The number of processes in this cgroup and every cgroup below it.
    fn all_procs(&self) -> usize {
        let mut n = 0;
        let mut dirs = vec![self.dir.clone()];
        while let Some(d) = dirs.pop() {
            n += std::fs::read_to_string(d.join("cgroup.procs"))
                .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count())
                .unwrap_or(0);
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
        n
    }

    /// True while a process lives in this cgroup or below.
    pub fn populated(&self) -> bool {
        match self.read("cgroup.events") {
            Ok(ev) => ev.lines().any(|l| l == "populated 1"),
            Err(_) => false,
        }
    }

    /// How many processes the OOM killer took in this cgroup and below (`oom_kill` of `memory.events`; 0
    /// without the memory controller).
    pub fn oom_kills(&self) -> u64 {
        self.read("memory.events")
            .ok()
            .and_then(|ev| {
                ev.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Freezes or thaws the cgroup and waits until the kernel reports it done.
    pub fn freeze(&self, frozen: bool) -> Result<()> {
        self.write("cgroup.freeze", if frozen { "1" } else { "0" })?;
        let want = if frozen { "frozen 1" } else { "frozen 0" };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.read("cgroup.events")?.lines().any(|l| l == want) || !self.populated() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(self.error(format!("timed out waiting for {want:?}")))
    }

    /// Kills every process in the cgroup and its children (`cgroup.kill`, or SIGKILL to each listed pid on older
    /// kernels), then waits until it is empty.
    pub fn kill_all(&self) -> Result<()> {
        if !self.dir.exists() {
            return Ok(());
        }
        if self.write("cgroup.kill", "1").is_err() {
            for pid in self.procs()? {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.populated() {
            if Instant::now() > deadline {
                return Err(self.error("processes still present 10 s after SIGKILL"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Removes the (empty) cgroup directory and the cgroups below it, deepest first (those the container made
    /// for itself, as runc's `delete --force` removes them); missing is fine.
    pub fn remove(&self) -> Result<()> {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let child = Cgroup {
                        mount: self.mount.clone(),
                        dir: e.path(),
                    };
                    child.remove()?;
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(self.error(format!("removing: {e}"))),
            }
        }
    }

    /// Usage figures for `events --stats`.
    pub fn stats(&self) -> Stats {
        stats::read(&self.dir)
    }
}

/// Whether file `path` (a space-separated list such as `cgroup.controllers`) lists `word`.
fn has_word(path: &Path, word: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|s| s.split_whitespace().any(|w| w == word))
}

/// The controllers `dir` has (`cgroup.controllers`) but does not enable for its children
/// (`cgroup.subtree_control`).
fn missing_controllers(dir: &Path) -> Vec<String> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let (available, enabled) = (read("cgroup.controllers"), read("cgroup.subtree_control"));
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    available
        .split_whitespace()
        .filter(|c| !enabled.contains(c))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake tree (plain files): each ancestor gets one write of every controller it lacks, none where all
    /// are on, and nothing is written into the container's own cgroup.
    #[test]
    fn create_enables_every_offered_controller_in_each_ancestor() {
        let t = tempfile::tempdir().unwrap();
        let mount = t.path().to_path_buf();
        let cg = Cgroup {
            mount: mount.clone(),
            dir: mount.join("pod/ctr"),
        };
        std::fs::create_dir_all(mount.join("pod")).unwrap();
        let put = |d: &str, f: &str, v: &str| std::fs::write(mount.join(d).join(f), v).unwrap();
        put("", "cgroup.controllers", "cpuset cpu io memory pids\n");
        put("", "cgroup.subtree_control", "cpu\n");
        put("pod", "cgroup.controllers", "cpu io\n");
        put("pod", "cgroup.subtree_control", "cpu io\n");
        cg.create().unwrap();
        let got = |d: &str| std::fs::read_to_string(mount.join(d).join("cgroup.subtree_control")).unwrap();
        assert_eq!(got(""), "+cpuset +io +memory +pids");
        assert_eq!(got("pod"), "cpu io\n", "all on already: not written");
        assert!(!cg.dir.join("cgroup.subtree_control").exists());
        assert_eq!(missing_controllers(&mount.join("pod")), Vec::<String>::new());
    }
}
