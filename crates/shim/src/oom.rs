//! OOM kills: each container's cgroup v2 `memory.events` is watched with inotify; when its `oom_kill` count
//! grows, a `/tasks/oom` event is published for the container (kubelet's "OOMKilled" comes from it).

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::events::Event;
use crate::publisher::Publish;
use crate::reactor::{Next, READ, Reactor};

struct Watched {
    id: String,
    file: PathBuf,
    kills: u64,
}

/// The watcher; cheap to clone.
#[derive(Clone)]
pub(crate) struct OomWatcher {
    inotify: Arc<Inotify>,
    watched: Arc<Mutex<HashMap<WatchDescriptor, Watched>>>,
}

fn kills(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
pub fn cgroup2_mount() -> Option<PathBuf> {
    crius_common::mountinfo::cgroup2()
}

impl OomWatcher {
    /// Starts watching, in `reactor`.
    pub(crate) fn start(publisher: Arc<dyn Publish>, reactor: &Reactor) -> std::io::Result<OomWatcher> {
        let flags = InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK;
        let inotify = Inotify::init(flags).map_err(std::io::Error::from)?;
        let w = OomWatcher {
            inotify: Arc::new(inotify),
            watched: Arc::new(Mutex::new(HashMap::new())),
        };
        let me = w.clone();
        reactor.add(w.inotify.as_fd(), READ, move |_, _| {
            me.check(&*publisher);
            Next::Keep
        })?;
        Ok(w)
    }

    fn check(&self, publisher: &dyn Publish) {
        while let Ok(events) = self.inotify.read_events() {
            for e in events {
                let mut all = self.watched.lock().unwrap_or_else(|p| p.into_inner());
                let Some(w) = all.get_mut(&e.wd) else { continue };
                let now = kills(&w.file);
                if now > w.kills {
                    w.kills = now;
                    publisher.publish(Event::Oom {
                        container_id: w.id.clone(),
                    });
                }
            }
        }
    }

    /// Watches the cgroup that process `pid` (container `id`'s init) is in; without a memory controller there
    /// is nothing to watch.
    pub(crate) fn watch(&self, id: &str, pid: u32) {
        let Some(rel) = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)))
        else {
            return;
        };
        let Some(mount) = cgroup2_mount() else { return };
        let file = mount.join(rel.trim_start_matches('/')).join("memory.events");
        if !file.exists() {
            return;
        }
        if let Ok(wd) = self.inotify.add_watch(&file, AddWatchFlags::IN_MODIFY) {
            let kills = kills(&file);
            self.watched.lock().unwrap_or_else(|p| p.into_inner()).insert(
                wd,
                Watched {
                    id: id.to_string(),
                    file,
                    kills,
                },
            );
        }
    }

    /// Stops watching container `id`.
    pub(crate) fn unwatch(&self, id: &str) {
        let mut all = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        let wds: Vec<WatchDescriptor> = all
            .iter()
            .filter(|(_, w)| w.id == id)
            .map(|(wd, _)| *wd)
            .collect();
        for wd in wds {
            all.remove(&wd);
            let _ = self.inotify.rm_watch(wd);
        }
    }
}
