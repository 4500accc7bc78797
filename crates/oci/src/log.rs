//! The runtime's log: `--log FILE` with `--log-format text|json`, as runc writes it, so containerd and other
//! callers can read the last error. Without a file, warnings go to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `time="..." level=... msg="..."`.
    Text,
    /// One JSON object per line: `{"level":..,"msg":..,"time":..}`.
    Json,
}

static TARGET: OnceLock<(Option<PathBuf>, Format)> = OnceLock::new();

/// Sets the log destination once per process.
pub fn init(file: Option<PathBuf>, format: Format) {
    let _ = TARGET.set((file, format));
}

/// Writes one entry at `level`.
pub fn write(level: &str, msg: &str) {
    let (file, format) = TARGET.get().cloned().unwrap_or((None, Format::Text));
    let time = crate::state::now_rfc3339();
    let line = match format {
        Format::Json => serde_json::json!({"level": level, "msg": msg, "time": time}).to_string(),
        Format::Text => format!("time={time:?} level={level} msg={msg:?}"),
    };
    match file {
        Some(f) => {
            if let Ok(mut out) = crius_common::private::append(&f) {
                let _ = writeln!(out, "{line}");
            }
        }
        None if level != "error" => eprintln!("crius-runc: {level}: {msg}"),
        None => {}
    }
}

/// Logs a warning.
pub fn warn(msg: &str) {
    write("warning", msg);
}
