//! Task events: the typed [`Event`] a shim reports (created, started, exited, deleted, exec added and started,
//! paused, resumed, OOM-killed, checkpointed) and its wire form, a topic and an `Any` as containerd's shims publish them.
//! The shim encodes with [`Event::to_wire`] (the publisher) and its owner decodes with [`Event::from_wire`]
//! (`client::serve_events`): one table, so what a shim sends and what criusd reads cannot drift apart.

use std::time::SystemTime;

use containerd_shim_protos as protos;
use protos::events::task as ev;
use protos::protobuf::Message;
use protos::protobuf::well_known_types::{any::Any, timestamp::Timestamp};
use protos::topics;

use crate::mounts::Mount;

/// Something that happened to a task (a container) or one of its exec processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `/tasks/create`: the runtime created the container; its init waits for Start.
    Create {
        /// The container.
        container_id: String,
        /// Its bundle directory.
        bundle: String,
        /// The mounts that make its rootfs (empty: the bundle has one).
        rootfs: Vec<Mount>,
        /// Its stdin, as the Create call named it.
        stdin: String,
        /// Its stdout (a FIFO path, or a `crius-log://` CRI log).
        stdout: String,
        /// Its stderr.
        stderr: String,
        /// Whether it has a terminal.
        terminal: bool,
        /// Its init's pid.
        pid: u32,
    },
    /// `/tasks/start`: the container's init runs.
    Start {
        /// The container.
        container_id: String,
        /// Its init's pid.
        pid: u32,
    },
    /// `/tasks/exit`: a process ended: the container's init (`exec_id` empty) or an exec.
    Exit {
        /// The container.
        container_id: String,
        /// The exec process, or empty for the init.
        exec_id: String,
        /// The process's pid.
        pid: u32,
        /// Its exit status: the exit code, or 128 + the signal that killed it.
        exit_status: u32,
        /// When it was reaped, ns since the epoch.
        exited_at_ns: i64,
    },
    /// `/tasks/delete`: the container is gone from the shim and its runtime.
    Delete {
        /// The container.
        container_id: String,
        /// Its init's pid.
        pid: u32,
        /// How its init ended (0 if it never ran).
        exit_status: u32,
        /// When its init ended, ns since the epoch; None if it never did.
        exited_at_ns: Option<i64>,
    },
    /// `/tasks/exec-added`: an exec process was defined, to be started.
    ExecAdded {
        /// The container.
        container_id: String,
        /// The exec process.
        exec_id: String,
    },
    /// `/tasks/exec-started`: an exec process runs.
    ExecStarted {
        /// The container.
        container_id: String,
        /// The exec process.
        exec_id: String,
        /// Its pid.
        pid: u32,
    },
    /// `/tasks/paused`: the container is frozen.
    Paused {
        /// The container.
        container_id: String,
    },
    /// `/tasks/resumed`: the container runs again.
    Resumed {
        /// The container.
        container_id: String,
    },
    /// `/tasks/oom`: the kernel OOM-killed a process of the container.
    Oom {
        /// The container.
        container_id: String,
    },
    /// `/tasks/checkpointed`: CRIU dumped the container.
    Checkpointed {
        /// The container.
        container_id: String,
    },
}

/// ns since the epoch of a protobuf timestamp.
pub(crate) fn ns_of(t: &Timestamp) -> i64 {
    t.seconds * 1_000_000_000 + i64::from(t.nanos)
}

/// A protobuf timestamp of ns since the epoch.
fn timestamp_of_ns(ns: i64) -> Timestamp {
    Timestamp {
        seconds: ns.div_euclid(1_000_000_000),
        nanos: ns.rem_euclid(1_000_000_000) as i32,
        ..Default::default()
    }
}

/// ns since the epoch (0 before it).
pub(crate) fn ns_since_epoch(t: SystemTime) -> i64 {
    crius_common::time::unix_ns(t)
}

fn mount_to_wire(m: &Mount) -> protos::types::mount::Mount {
    protos::types::mount::Mount {
        type_: m.kind.clone(),
        source: m.source.clone(),
        target: m.target.clone(),
        options: m.options.clone(),
        ..Default::default()
    }
}

fn mount_of_wire(m: &protos::types::mount::Mount) -> Mount {
    Mount {
        kind: m.type_.clone(),
        source: m.source.clone(),
        target: m.target.clone(),
        options: m.options.clone(),
    }
}

fn decode<M: Message>(any: &Any) -> Option<M> {
    M::parse_from_bytes(&any.value).ok()
}

impl Event {
    /// The topic and the packed message, as containerd's shims publish this event.
    pub(crate) fn to_wire(&self) -> (&'static str, Any) {
        match self {
            Event::Create {
                container_id,
                bundle,
                rootfs,
                stdin,
                stdout,
                stderr,
                terminal,
                pid,
            } => (
                topics::TASK_CREATE_EVENT_TOPIC,
                to_any(&ev::TaskCreate {
                    container_id: container_id.clone(),
                    bundle: bundle.clone(),
                    rootfs: rootfs.iter().map(mount_to_wire).collect(),
                    io: Some(ev::TaskIO {
                        stdin: stdin.clone(),
                        stdout: stdout.clone(),
                        stderr: stderr.clone(),
                        terminal: *terminal,
                        ..Default::default()
                    })
                    .into(),
                    pid: *pid,
                    ..Default::default()
                }),
            ),
            Event::Start { container_id, pid } => (
                topics::TASK_START_EVENT_TOPIC,
                to_any(&ev::TaskStart {
                    container_id: container_id.clone(),
                    pid: *pid,
                    ..Default::default()
                }),
            ),
            Event::Exit {
                container_id,
                exec_id,
                pid,
                exit_status,
                exited_at_ns,
            } => (
                topics::TASK_EXIT_EVENT_TOPIC,
                to_any(&ev::TaskExit {
                    container_id: container_id.clone(),
                    // containerd names the process: the container's id for its init.
                    id: if exec_id.is_empty() {
                        container_id.clone()
                    } else {
                        exec_id.clone()
                    },
                    pid: *pid,
                    exit_status: *exit_status,
                    exited_at: Some(timestamp_of_ns(*exited_at_ns)).into(),
                    ..Default::default()
                }),
            ),
            Event::Delete {
                container_id,
                pid,
                exit_status,
                exited_at_ns,
            } => (
                topics::TASK_DELETE_EVENT_TOPIC,
                to_any(&ev::TaskDelete {
                    container_id: container_id.clone(),
                    id: container_id.clone(),
                    pid: *pid,
                    exit_status: *exit_status,
                    exited_at: exited_at_ns.map(timestamp_of_ns).into(),
                    ..Default::default()
                }),
            ),
            Event::ExecAdded {
                container_id,
                exec_id,
            } => (
                topics::TASK_EXEC_ADDED_EVENT_TOPIC,
                to_any(&ev::TaskExecAdded {
                    container_id: container_id.clone(),
                    exec_id: exec_id.clone(),
                    ..Default::default()
                }),
            ),
            Event::ExecStarted {
                container_id,
                exec_id,
                pid,
            } => (
                topics::TASK_EXEC_STARTED_EVENT_TOPIC,
                to_any(&ev::TaskExecStarted {
                    container_id: container_id.clone(),
                    exec_id: exec_id.clone(),
                    pid: *pid,
                    ..Default::default()
                }),
            ),
            Event::Paused { container_id } => (
                topics::TASK_PAUSED_EVENT_TOPIC,
                to_any(&ev::TaskPaused {
                    container_id: container_id.clone(),
                    ..Default::default()
                }),
            ),
            Event::Resumed { container_id } => (
                topics::TASK_RESUMED_EVENT_TOPIC,
                to_any(&ev::TaskResumed {
                    container_id: container_id.clone(),
                    ..Default::default()
                }),
            ),
            Event::Oom { container_id } => (
                topics::TASK_OOM_EVENT_TOPIC,
                to_any(&ev::TaskOOM {
                    container_id: container_id.clone(),
                    ..Default::default()
                }),
            ),
            Event::Checkpointed { container_id } => (
                topics::TASK_CHECKPOINTED_EVENT_TOPIC,
                to_any(&ev::TaskCheckpointed {
                    container_id: container_id.clone(),
                    ..Default::default()
                }),
            ),
        }
    }

    /// The event published under `topic` as `any`; None for a topic that is not a task event here (another
    /// service's) or a message that does not decode.
    pub(crate) fn from_wire(topic: &str, any: &Any) -> Option<Event> {
        Some(match topic {
            topics::TASK_CREATE_EVENT_TOPIC => {
                let e: ev::TaskCreate = decode(any)?;
                let io = e.io.clone().unwrap_or_default();
                Event::Create {
                    container_id: e.container_id,
                    bundle: e.bundle,
                    rootfs: e.rootfs.iter().map(mount_of_wire).collect(),
                    stdin: io.stdin,
                    stdout: io.stdout,
                    stderr: io.stderr,
                    terminal: io.terminal,
                    pid: e.pid,
                }
            }
            topics::TASK_START_EVENT_TOPIC => {
                let e: ev::TaskStart = decode(any)?;
                Event::Start {
                    container_id: e.container_id,
                    pid: e.pid,
                }
            }
            topics::TASK_EXIT_EVENT_TOPIC => {
                let e: ev::TaskExit = decode(any)?;
                Event::Exit {
                    exec_id: if e.id == e.container_id {
                        String::new()
                    } else {
                        e.id
                    },
                    container_id: e.container_id,
                    pid: e.pid,
                    exit_status: e.exit_status,
                    exited_at_ns: e.exited_at.as_ref().map(ns_of).unwrap_or(0),
                }
            }
            topics::TASK_DELETE_EVENT_TOPIC => {
                let e: ev::TaskDelete = decode(any)?;
                Event::Delete {
                    exited_at_ns: e.exited_at.as_ref().map(ns_of),
                    container_id: e.container_id,
                    pid: e.pid,
                    exit_status: e.exit_status,
                }
            }
            topics::TASK_EXEC_ADDED_EVENT_TOPIC => {
                let e: ev::TaskExecAdded = decode(any)?;
                Event::ExecAdded {
                    container_id: e.container_id,
                    exec_id: e.exec_id,
                }
            }
            topics::TASK_EXEC_STARTED_EVENT_TOPIC => {
                let e: ev::TaskExecStarted = decode(any)?;
                Event::ExecStarted {
                    container_id: e.container_id,
                    exec_id: e.exec_id,
                    pid: e.pid,
                }
            }
            topics::TASK_PAUSED_EVENT_TOPIC => Event::Paused {
                container_id: decode::<ev::TaskPaused>(any)?.container_id,
            },
            topics::TASK_RESUMED_EVENT_TOPIC => Event::Resumed {
                container_id: decode::<ev::TaskResumed>(any)?.container_id,
            },
            topics::TASK_OOM_EVENT_TOPIC => Event::Oom {
                container_id: decode::<ev::TaskOOM>(any)?.container_id,
            },
            topics::TASK_CHECKPOINTED_EVENT_TOPIC => Event::Checkpointed {
                container_id: decode::<ev::TaskCheckpointed>(any)?.container_id,
            },
            _ => return None,
        })
    }
}

/// A protobuf timestamp.
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
        ..Default::default()
    }
}

/// A message with its full protobuf type name, known without the reflection tables (building those costs a
/// long-lived shim memory for nothing).
pub(crate) trait Named: Message {
    /// `containerd.events.TaskExit`, …
    const TYPE: &'static str;
}

macro_rules! named {
    ($($t:ty => $n:literal),* $(,)?) => {
        $(impl Named for $t {
            const TYPE: &'static str = $n;
        })*
    };
}

named! {
    ev::TaskCreate => "containerd.events.TaskCreate",
    ev::TaskStart => "containerd.events.TaskStart",
    ev::TaskExit => "containerd.events.TaskExit",
    ev::TaskDelete => "containerd.events.TaskDelete",
    ev::TaskExecAdded => "containerd.events.TaskExecAdded",
    ev::TaskExecStarted => "containerd.events.TaskExecStarted",
    ev::TaskPaused => "containerd.events.TaskPaused",
    ev::TaskResumed => "containerd.events.TaskResumed",
    ev::TaskOOM => "containerd.events.TaskOOM",
    ev::TaskCheckpointed => "containerd.events.TaskCheckpointed",
    protos::cgroups_v2::metrics::Metrics => "io.containerd.cgroups.v2.Metrics",
}

/// Packs `m` into an Any named by its full protobuf type name, as containerd expects.
pub(crate) fn to_any<M: Named>(m: &M) -> Any {
    Any {
        type_url: M::TYPE.to_string(),
        value: m.write_to_bytes().unwrap_or_default(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protos::protobuf::MessageFull;

    fn same<M: Named + MessageFull>() {
        assert_eq!(M::TYPE, M::descriptor().full_name());
    }

    #[test]
    fn type_names_match_the_descriptors() {
        same::<ev::TaskCreate>();
        same::<ev::TaskStart>();
        same::<ev::TaskExit>();
        same::<ev::TaskDelete>();
        same::<ev::TaskExecAdded>();
        same::<ev::TaskExecStarted>();
        same::<ev::TaskPaused>();
        same::<ev::TaskResumed>();
        same::<ev::TaskOOM>();
        same::<protos::cgroups_v2::metrics::Metrics>();
    }

    fn every_event() -> Vec<Event> {
        let id = || "c1".to_string();
        vec![
            Event::Create {
                container_id: id(),
                bundle: "/b".into(),
                rootfs: vec![Mount {
                    kind: "overlay".into(),
                    source: "overlay".into(),
                    target: String::new(),
                    options: vec!["lowerdir=/l".into(), "upperdir=/u".into()],
                }],
                stdin: "/in".into(),
                stdout: "crius-log:///var/log/0.log".into(),
                stderr: String::new(),
                terminal: true,
                pid: 41,
            },
            Event::Start {
                container_id: id(),
                pid: 41,
            },
            Event::Exit {
                container_id: id(),
                exec_id: String::new(),
                pid: 41,
                exit_status: 137,
                exited_at_ns: 1_795_984_791_237_209_000,
            },
            Event::Exit {
                container_id: id(),
                exec_id: "e1".into(),
                pid: 42,
                exit_status: 3,
                exited_at_ns: 5,
            },
            Event::Delete {
                container_id: id(),
                pid: 41,
                exit_status: 137,
                exited_at_ns: Some(1_795_984_791_000_000_001),
            },
            Event::Delete {
                container_id: id(),
                pid: 41,
                exit_status: 0,
                exited_at_ns: None,
            },
            Event::ExecAdded {
                container_id: id(),
                exec_id: "e1".into(),
            },
            Event::ExecStarted {
                container_id: id(),
                exec_id: "e1".into(),
                pid: 42,
            },
            Event::Paused { container_id: id() },
            Event::Resumed { container_id: id() },
            Event::Oom { container_id: id() },
            Event::Checkpointed { container_id: id() },
        ]
    }

    #[test]
    fn every_event_survives_its_wire_form() {
        for e in every_event() {
            let (topic, any) = e.to_wire();
            assert_eq!(Event::from_wire(topic, &any).as_ref(), Some(&e), "{topic}");
        }
    }

    #[test]
    fn the_wire_form_is_containerds() {
        // containerd names an exit's process by the container's id for the init, by the exec id otherwise.
        let (topic, any) = every_event()[2].to_wire();
        assert_eq!(
            (topic, any.type_url.as_str()),
            ("/tasks/exit", "containerd.events.TaskExit")
        );
        let exit = ev::TaskExit::parse_from_bytes(&any.value).unwrap();
        assert_eq!((exit.id.as_str(), exit.exit_status), ("c1", 137));
        assert_eq!(
            (exit.exited_at.seconds, exit.exited_at.nanos),
            (1_795_984_791, 237_209_000)
        );
        let (_, any) = every_event()[3].to_wire();
        assert_eq!(ev::TaskExit::parse_from_bytes(&any.value).unwrap().id, "e1");
        // What is not a task event here is left to the caller: nothing comes of it.
        assert_eq!(Event::from_wire("/tasks/image-pulled", &any), None);
        let junk = Any {
            value: vec![0xff, 0xff],
            ..Default::default()
        };
        assert_eq!(Event::from_wire("/tasks/oom", &junk), None);
    }
}
