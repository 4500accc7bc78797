//! A process's state machine: a container's init or one of its exec processes. A call that changes a state
//! moves it first, under the task table's lock, then runs the OCI runtime, then settles: a runtime failure
//! moves it back. So two calls never act on one state (of two Starts one starts, the other is refused), and a
//! refusal names the state found and the one asked for (`Error::FailedPrecondition { from, to }`).
//!
//! ```text
//!               start                   started
//!   Created ───────────► Starting ───────────────► Running ◄──────┐
//!    │  ▲   start_failed   │                         │ pause       │ resume
//!    │  └──────────────────┤                         ▼             │
//!    │                     │                       Paused ─────────┘
//!    │ exited              │ exited                  │ exited (from Running too)
//!    ▼                     ▼                         ▼
//!   Exited ◄───────────────┴─────────────────────────┘
//!    │  ▲ delete_failed
//!    ▼  │  (Created, too, deletes and falls back)
//!   Deleting ──► gone from the table once the runtime deleted it
//! ```
//!
//! An exit is recorded in any state; it moves every state but Deleting to Exited, and it stands: a Start or
//! Resume that settles after the process died leaves it Exited.

use std::fmt;

use crate::error::{Error, Result};
use crate::reaper::Exit;

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Made by the runtime (an init waiting for Start), or defined (an exec not started yet).
    Created,
    /// The runtime is starting it.
    Starting,
    /// It runs.
    Running,
    /// Its container is frozen (an init only).
    Paused,
    /// It ended; its exit is known.
    Exited,
    /// The runtime is deleting it.
    Deleting,
}

impl State {
    /// Why a move from `from` to `to` is refused, for the caller.
    pub(crate) fn refusal(from: State, to: State) -> &'static str {
        match (from, to) {
            (State::Deleting, _) => "it is being deleted",
            (_, State::Starting) => "only a created process starts",
            (_, State::Paused) => "only a running container pauses",
            (_, State::Running) => "only a paused container resumes",
            (_, State::Deleting) => "kill it before delete",
            (_, State::Created | State::Exited) => "no call moves a process there",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Created => "created",
            State::Starting => "starting",
            State::Running => "running",
            State::Paused => "paused",
            State::Exited => "exited",
            State::Deleting => "deleting",
        })
    }
}

/// A process's state, its exit once it happened, and its name for errors.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    what: String,
    state: State,
    exit: Option<Exit>,
}

impl Lifecycle {
    /// A created process, named `what` in errors ("the init process of container \"c1\"").
    pub(crate) fn new(what: String) -> Lifecycle {
        Lifecycle {
            what,
            state: State::Created,
            exit: None,
        }
    }

    /// The state now.
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// How it ended, once it did.
    pub(crate) fn exit(&self) -> Option<Exit> {
        self.exit
    }

    /// Moves from one of `from` to `to`, or refuses.
    fn go(&mut self, from: &[State], to: State) -> Result<()> {
        if !from.contains(&self.state) {
            return Err(Error::FailedPrecondition {
                what: self.what.clone(),
                from: self.state,
                to,
            });
        }
        self.state = to;
        Ok(())
    }

    /// Settles a move: `from` becomes `to` unless something (an exit) moved it meanwhile.
    fn settle(&mut self, from: State, to: State) {
        if self.state == from {
            self.state = to;
        }
    }

    /// Start begins: Created → Starting.
    pub(crate) fn start(&mut self) -> Result<()> {
        self.go(&[State::Created], State::Starting)
    }

    /// The runtime started it: Starting → Running.
    pub(crate) fn started(&mut self) {
        self.settle(State::Starting, State::Running);
    }

    /// The runtime failed to start it: Starting → Created, to be started again.
    pub(crate) fn start_failed(&mut self) {
        self.settle(State::Starting, State::Created);
    }

    /// Pause begins: Running → Paused.
    pub(crate) fn pause(&mut self) -> Result<()> {
        self.go(&[State::Running], State::Paused)
    }

    /// The runtime failed to pause it: Paused → Running.
    pub(crate) fn pause_failed(&mut self) {
        self.settle(State::Paused, State::Running);
    }

    /// Resume begins: Paused → Running.
    pub(crate) fn resume(&mut self) -> Result<()> {
        self.go(&[State::Paused], State::Running)
    }

    /// The runtime failed to resume it: Running → Paused.
    pub(crate) fn resume_failed(&mut self) {
        self.settle(State::Running, State::Paused);
    }

    /// Delete begins: Created or Exited → Deleting. A live process is killed first.
    pub(crate) fn delete(&mut self) -> Result<()> {
        self.go(&[State::Created, State::Exited], State::Deleting)
    }

    /// The runtime failed to delete it: back to Exited (or Created, if it never ran).
    pub(crate) fn delete_failed(&mut self) {
        let back = if self.exit.is_some() {
            State::Exited
        } else {
            State::Created
        };
        self.settle(State::Deleting, back);
    }

    /// It exited: recorded, and the state is Exited (a process being deleted stays Deleting).
    pub(crate) fn exited(&mut self, exit: Exit) {
        self.exit = Some(exit);
        if self.state != State::Deleting {
            self.state = State::Exited;
        }
    }

    /// Whether it can be signalled: a process that ended cannot.
    pub(crate) fn signal(&self) -> Result<()> {
        match self.state {
            State::Exited => Err(Error::Finished(self.what.clone())),
            _ => Ok(()),
        }
    }

    /// Whether it runs, as `op` needs of a container's init.
    pub(crate) fn require_running(&self, what: &str, op: &'static str) -> Result<()> {
        match self.state {
            State::Running => Ok(()),
            state => Err(Error::NotRunning {
                what: what.to_string(),
                state,
                op,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    const ALL: [State; 6] = [
        State::Created,
        State::Starting,
        State::Running,
        State::Paused,
        State::Exited,
        State::Deleting,
    ];

    fn at(state: State) -> Lifecycle {
        let mut l = Lifecycle::new("p".into());
        l.state = state;
        l
    }

    fn exit(status: u32) -> Exit {
        Exit {
            status,
            at: SystemTime::now(),
        }
    }

    /// The states from which `call` moves a process, and where to; every other state is refused with
    /// FailedPrecondition naming it and the target.
    fn check(call: fn(&mut Lifecycle) -> Result<()>, allowed: &[State], to: State) {
        for from in ALL {
            let mut l = at(from);
            match call(&mut l) {
                Ok(()) => {
                    assert!(allowed.contains(&from), "{from} → {to} was allowed");
                    assert_eq!(l.state(), to, "from {from}");
                }
                Err(Error::FailedPrecondition { what, from: f, to: t }) => {
                    assert!(!allowed.contains(&from), "{from} → {to} was refused");
                    assert_eq!((what.as_str(), f, t), ("p", from, to));
                    assert_eq!(l.state(), from, "a refusal changes nothing");
                }
                Err(e) => panic!("{from} → {to}: {e}"),
            }
        }
    }

    #[test]
    fn only_a_created_process_starts() {
        check(Lifecycle::start, &[State::Created], State::Starting);
    }

    #[test]
    fn only_a_running_container_pauses_and_a_paused_one_resumes() {
        check(Lifecycle::pause, &[State::Running], State::Paused);
        check(Lifecycle::resume, &[State::Paused], State::Running);
    }

    #[test]
    fn only_a_created_or_exited_process_is_deleted() {
        check(
            Lifecycle::delete,
            &[State::Created, State::Exited],
            State::Deleting,
        );
    }

    #[test]
    fn a_runtime_failure_moves_back() {
        let mut l = at(State::Created);
        l.start().unwrap();
        l.start_failed();
        assert_eq!(l.state(), State::Created);
        l.start().unwrap();
        l.started();
        assert_eq!(l.state(), State::Running);
        l.pause().unwrap();
        l.pause_failed();
        assert_eq!(l.state(), State::Running);
        l.pause().unwrap();
        l.resume().unwrap();
        l.resume_failed();
        assert_eq!(l.state(), State::Paused);
        // A created process whose delete failed is created again; an exited one exited.
        let mut l = at(State::Created);
        l.delete().unwrap();
        l.delete_failed();
        assert_eq!(l.state(), State::Created);
        l.exited(exit(0));
        l.delete().unwrap();
        l.delete_failed();
        assert_eq!(l.state(), State::Exited);
    }

    #[test]
    fn an_exit_stands() {
        // Exited while starting: the start that settles later does not make it run.
        let mut l = at(State::Created);
        l.start().unwrap();
        l.exited(exit(3));
        l.started();
        assert_eq!((l.state(), l.exit().map(|e| e.status)), (State::Exited, Some(3)));
        // Exited during a resume the runtime then failed: it stays exited.
        let mut l = at(State::Paused);
        l.resume().unwrap();
        l.exited(exit(137));
        l.resume_failed();
        assert_eq!(l.state(), State::Exited);
        // Killed by its delete: recorded, still deleting; a failed delete leaves it exited.
        let mut l = at(State::Created);
        l.delete().unwrap();
        l.exited(exit(137));
        assert_eq!(l.state(), State::Deleting);
        l.delete_failed();
        assert_eq!(l.state(), State::Exited);
        // Every other state exits.
        for s in [
            State::Created,
            State::Starting,
            State::Running,
            State::Paused,
            State::Exited,
        ] {
            let mut l = at(s);
            l.exited(exit(1));
            assert_eq!(l.state(), State::Exited, "from {s}");
        }
    }

    #[test]
    fn an_exited_process_cannot_be_signalled_and_exec_needs_a_running_init() {
        for s in ALL {
            assert_eq!(at(s).signal().is_ok(), s != State::Exited, "{s}");
            match at(s).require_running("container \"c\"", "exec") {
                Ok(()) => assert_eq!(s, State::Running),
                Err(Error::NotRunning { state, op, .. }) => assert_eq!((state, op), (s, "exec")),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(matches!(at(State::Exited).signal(), Err(Error::Finished(w)) if w == "p"));
    }
}
