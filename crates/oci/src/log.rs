//! The runtime's log: `--log FILE` with `--log-format text|json`, as runc writes it, so containerd and other
//! callers can read the last error. Without a file, warnings go to stderr. With `--debug`, each step of
//! create, start, exec and delete is logged at level `debug` too: to the file, else to stderr in the text
//! format (`level=debug`), as runc does.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `time="..." level=... msg="..."`.
    Text,
    /// One JSON object per line: `{"level":..,"msg":..,"time":..}`.
    Json,
}

static TARGET: OnceLock<(Option<PathBuf>, Format)> = OnceLock::new();
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Sets the log destination once per process, and whether debug entries are written.
pub fn init(file: Option<PathBuf>, format: Format, debug: bool) {
    let _ = TARGET.set((file, format));
    DEBUG.store(debug, Ordering::Relaxed);
}

/// One entry as a line of `format`: JSON fields in the order runc's logger writes them.
fn line(format: Format, level: &str, msg: &str) -> String {
    let time = crate::state::now_rfc3339();
    match format {
        Format::Json => {
            let q = |s: &str| serde_json::Value::from(s).to_string();
            format!(
                "{{\"level\":{},\"msg\":{},\"time\":{}}}",
                q(level),
                q(msg),
                q(&time)
            )
        }
        Format::Text => format!("time={time:?} level={level} msg={msg:?}"),
    }
}

/// Writes one entry at `level`.
pub fn write(level: &str, msg: &str) {
    let (file, format) = TARGET.get().cloned().unwrap_or((None, Format::Text));
    match file {
        Some(f) => {
            if let Ok(mut out) = crius_common::private::append(&f) {
                let _ = writeln!(out, "{}", line(format, level, msg));
            }
        }
        None if level == "debug" => eprintln!("{}", line(Format::Text, level, msg)),
        None if level != "error" => eprintln!("crius-runc: {level}: {msg}"),
        None => {}
    }
}

/// Logs a step at level `debug`, when `--debug` asked for them.
pub fn debug(msg: impl FnOnce() -> String) {
    if DEBUG.load(Ordering::Relaxed) {
        write("debug", &msg());
    }
}

/// Logs a warning.
pub fn warn(msg: &str) {
    write("warning", msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_logfmt_or_json_with_runcs_field_order() {
        let t = line(Format::Text, "debug", "a \"step\"");
        assert!(
            t.starts_with("time=\"") && t.ends_with(r#"level=debug msg="a \"step\"""#),
            "{t}"
        );
        let j = line(Format::Json, "debug", "a step");
        assert!(
            j.starts_with(r#"{"level":"debug","msg":"a step","time":""#),
            "{j}"
        );
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["msg"], "a step");
    }
}
