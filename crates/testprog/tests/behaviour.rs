//! The test program does what the other suites rely on.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn prog() -> Command {
    Command::new(env!("CARGO_BIN_EXE_crius-testprog"))
}

#[test]
fn exits_with_the_asked_code_and_logs() {
    let out = prog()
        .args([
            "--log-every",
            "10",
            "--log-text",
            "hi",
            "--exit-after",
            // Far beyond two log periods, so a loaded machine still logs twice before the exit.
            "1000",
            "--exit-code",
            "9",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("0 hi\n1 hi\n"), "{text}");
}

#[test]
fn sigterm_waits_the_delay_then_exits_with_the_code() {
    let mut child = prog()
        .args([
            "--term-delay",
            "300",
            "--term-exit",
            "4",
            "--log-every",
            "1000000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // The first log line comes after the handler is installed.
    let mut line = [0u8; 7];
    stdout.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"0 tick\n");
    let sent = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "exited after {:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(4));
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    assert_eq!(out, "got SIGTERM\nexiting\n");
}

#[test]
fn serves_probes_and_allocates() {
    // Below the ephemeral range (32768 and up), so no outgoing connection holds it.
    let port = 12000 + (std::process::id() % 20000) as u16;
    let mut child = prog()
        .args([
            "--http",
            &port.to_string(),
            "--alloc",
            "16",
            "--exit-after",
            "5000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    while !first.contains("serving") {
        stdout.read_exact(&mut byte).unwrap();
        first.push(byte[0] as char);
    }
    assert!(first.starts_with("allocated 16 MiB\n"), "{first}");
    let status_of = |path: &str| {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(c, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        resp.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(status_of("/healthz"), "HTTP/1.0 200 OK");
    assert_eq!(status_of("/ready"), "HTTP/1.0 200 OK");
    assert_eq!(status_of("/nope"), "HTTP/1.0 404 Not Found");
    let rss: u64 = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .map(|v| v.trim().trim_end_matches(" kB").parse().unwrap())
        })
        .unwrap();
    assert!(rss >= 16 * 1024, "VmRSS {rss} kB below the 16 MiB allocated");
    child.kill().unwrap();
    child.wait().unwrap();
}
