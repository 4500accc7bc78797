//! systemd's manager over the D-Bus system bus: start a transient scope, set its properties, stop it.

use std::time::{Duration, Instant};

use zbus::blocking::Connection;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value as Z};

use super::props::{Property, Value};
use crate::{Result, err};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// How long a start or stop job may take before the caller is told.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to systemd's manager.
pub struct Systemd {
    conn: Connection,
}

fn zvalue(v: &Value) -> Z<'_> {
    match v {
        Value::U64(n) => Z::U64(*n),
        Value::Bool(b) => Z::Bool(*b),
        Value::Str(s) => Z::from(s.as_str()),
        Value::Bytes(b) => Z::from(b.clone()),
        Value::U32s(u) => Z::from(u.clone()),
    }
}

fn zprops(props: &[Property]) -> Vec<(&str, Z<'_>)> {
    props.iter().map(|p| (p.name, zvalue(&p.value))).collect()
}

/// The D-Bus error name of `e`, if systemd answered with one.
fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

impl Systemd {
    /// Connects through the system bus, as runc does first. (systemd's private socket would need no bus
    /// daemon, but zbus 5 cannot read the replies systemd sends there: their sender is not a unique name.)
    pub fn connect() -> Result<Systemd> {
        // A call systemd never answers (it is busy, or stuck) fails after the job timeout instead of hanging.
        let conn = zbus::blocking::connection::Builder::system()
            .and_then(|b| b.method_timeout(JOB_TIMEOUT).build())
            .map_err(|e| {
            err!(
                "connecting to systemd through the D-Bus system bus: {e} (the systemd cgroup driver needs \
                 systemd as PID 1 and dbus-daemon running)"
            )
        })?;
        Ok(Systemd { conn })
    }

    fn call<B>(&self, method: &str, body: &B) -> zbus::Result<zbus::message::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(DEST), PATH, Some(MANAGER), method, body)
    }

    /// Starts the transient unit `unit` with `props` and waits until it is active. A failed unit of the same
    /// name left from before is reset first.
    pub fn start(&self, unit: &str, props: &[Property]) -> Result<()> {
        let aux: Vec<(&str, Vec<(&str, Z<'_>)>)> = Vec::new();
        let body = (unit, "replace", zprops(props), aux);
        let started = match self.call("StartTransientUnit", &body) {
            Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => {
                let _ = self.call("ResetFailedUnit", &(unit,));
                self.call("StartTransientUnit", &body)
            }
            r => r,
        };
        started.map_err(|e| err!("systemd: starting {unit}: {e}"))?;
        self.wait_for(unit, "start", |state| match state {
            Some("active") => Some(Ok(())),
            Some("failed") | None => Some(Err(())),
            _ => None,
        })
    }

    /// Sets `props` on the running unit `unit` (runtime only: nothing is written under /etc).
    pub fn set(&self, unit: &str, props: &[Property]) -> Result<()> {
        if props.is_empty() {
            return Ok(());
        }
        self.call("SetUnitProperties", &(unit, true, zprops(props)))
            .map(drop)
            .map_err(|e| err!("systemd: setting {} of {unit}: {e}", names(props)))
    }

    /// Stops `unit` and waits until systemd has let it go; a unit that is gone already is fine.
    pub fn stop(&self, unit: &str) -> Result<()> {
        match self.call("StopUnit", &(unit, "replace")) {
            Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => return Ok(()),
            Err(e) => return Err(err!("systemd: stopping {unit}: {e}")),
            Ok(_) => {}
        }
        let r = self.wait_for(unit, "stop", |state| match state {
            None | Some("inactive") | Some("failed") => Some(Ok(())),
            _ => None,
        });
        let _ = self.call("ResetFailedUnit", &(unit,));
        r
    }

    /// The ActiveState of `unit`; None when systemd has no such unit loaded.
    pub fn active_state(&self, unit: &str) -> Result<Option<String>> {
        let path: OwnedObjectPath = match self.call("GetUnit", &(unit,)) {
            Ok(reply) => reply
                .body()
                .deserialize()
                .map_err(|e| err!("systemd: GetUnit {unit}: {e}"))?,
            Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => return Ok(None),
            Err(e) => return Err(err!("systemd: GetUnit {unit}: {e}")),
        };
        let reply = self
            .conn
            .call_method(
                Some(DEST),
                &path,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &("org.freedesktop.systemd1.Unit", "ActiveState"),
            )
            .map_err(|e| err!("systemd: ActiveState of {unit}: {e}"))?;
        let v: OwnedValue = reply
            .body()
            .deserialize()
            .map_err(|e| err!("systemd: ActiveState of {unit}: {e}"))?;
        let s: String = v
            .try_into()
            .map_err(|e| err!("systemd: ActiveState of {unit}: {e}"))?;
        Ok(Some(s))
    }

    /// Polls the unit's state until `done` says so (Ok) or gives up on it (Err), for at most [`JOB_TIMEOUT`].
    fn wait_for(
        &self,
        unit: &str,
        what: &str,
        done: impl Fn(Option<&str>) -> Option<std::result::Result<(), ()>>,
    ) -> Result<()> {
        let deadline = Instant::now() + JOB_TIMEOUT;
        let mut pause = Duration::from_micros(200);
        loop {
            let state = self.active_state(unit)?;
            match done(state.as_deref()) {
                Some(Ok(())) => return Ok(()),
                Some(Err(())) => {
                    return Err(err!(
                        "systemd: {what} of {unit} failed (state {}; see journalctl -u {unit})",
                        state.as_deref().unwrap_or("not loaded")
                    ));
                }
                None if Instant::now() > deadline => {
                    return Err(err!(
                        "systemd: {what} of {unit} did not finish in {}s (state {})",
                        JOB_TIMEOUT.as_secs(),
                        state.as_deref().unwrap_or("not loaded")
                    ));
                }
                None => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }
}

fn names(props: &[Property]) -> String {
    props.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}
