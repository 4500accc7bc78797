//! `crius-testprog`: one small static program that plays every workload the lifecycle, resize and probe tests
//! need. Options combine; without any it sleeps until signalled.
//!
//! ```text
//! crius-testprog [--log-every MS] [--log-text T] [--stderr] [--term-delay MS] [--term-exit CODE]
//!                [--alloc MIB] [--burn THREADS] [--http PORT] [--exit-after MS] [--exit-code N]
//!                [--print-env] [--write-file PATH TEXT] [--trap-after MS] [--steal-exe] [--overwrite-fd N]
//!                [--syscalls N,...] [--syscalls32 N,...]
//! ```
//! - `--log-every MS`: print `<counter> <text>` every MS milliseconds (stdout, or stderr with `--stderr`).
//! - `--term-delay MS`: on SIGTERM print `got SIGTERM`, wait MS, then exit with `--term-exit` (default 0).
//! - `--alloc MIB`: allocate and touch MIB mebibytes, print `allocated MIB MiB`, keep them.
//! - `--burn THREADS`: spin THREADS busy threads.
//! - `--http PORT`: answer `GET /healthz` and `GET /ready` with 200 `ok`, anything else with 404.
//! - `--exit-after MS`: exit with `--exit-code` (default 0) after MS milliseconds.
//! - `--trap-after MS`: install the SIGTERM/SIGINT handler only MS milliseconds after the start (until then the
//!   default action holds: as PID 1 of a PID namespace, the kernel drops the signal), as a slow-starting
//!   program would.
//! - `--steal-exe`, `--overwrite-fd N`: the CVE-2019-5736 attacker (see `attack.rs`); nothing else runs.
//! - `--syscalls N,...`, `--syscalls32 N,...`: raw x86_64 or i386 system calls, their results printed (see
//!   `syscalls.rs`); nothing else runs.

mod attack;
mod syscalls;

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

#[derive(Default)]
struct Opts {
    log_every: Option<u64>,
    log_text: String,
    stderr: bool,
    term_delay: Option<u64>,
    term_exit: i32,
    alloc: Option<usize>,
    burn: usize,
    http: Option<u16>,
    exit_after: Option<u64>,
    exit_code: i32,
    print_env: bool,
    write_file: Option<(String, String)>,
    trap_after: Option<u64>,
}

fn usage(msg: &str) -> ! {
    eprintln!("crius-testprog: {msg}");
    eprintln!(
        "usage: crius-testprog [--log-every MS] [--log-text T] [--stderr] [--term-delay MS] [--term-exit CODE] \
         [--alloc MIB] [--burn THREADS] [--http PORT] [--exit-after MS] [--exit-code N] [--print-env] \
         [--write-file PATH TEXT] [--trap-after MS] [--steal-exe] [--overwrite-fd N] [--syscalls N,...] \
         [--syscalls32 N,...]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut o = Opts {
        log_text: "tick".into(),
        ..Default::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        let num = |name: &str, v: String| -> u64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{name}: not a number")))
        };
        match a.as_str() {
            "--log-every" => o.log_every = Some(num(&a, val(&a))),
            "--log-text" => o.log_text = val(&a),
            "--stderr" => o.stderr = true,
            "--term-delay" => o.term_delay = Some(num(&a, val(&a))),
            "--term-exit" => o.term_exit = num(&a, val(&a)) as i32,
            "--alloc" => o.alloc = Some(num(&a, val(&a)) as usize),
            "--burn" => o.burn = num(&a, val(&a)) as usize,
            "--http" => o.http = Some(num(&a, val(&a)) as u16),
            "--exit-after" => o.exit_after = Some(num(&a, val(&a))),
            "--exit-code" => o.exit_code = num(&a, val(&a)) as i32,
            "--print-env" => o.print_env = true,
            "--write-file" => {
                let path = val(&a);
                o.write_file = Some((path, val(&a)));
            }
            "--trap-after" => o.trap_after = Some(num(&a, val(&a))),
            "--steal-exe" => attack::steal(),
            "--overwrite-fd" => attack::overwrite(num(&a, val(&a)) as i32),
            "--syscalls" => syscalls::native(&val(&a)),
            "--syscalls32" => syscalls::i386(&val(&a)),
            "--help" | "-h" => usage("a test workload"),
            other => usage(&format!("unknown option {other:?}")),
        }
    }
    o
}

fn say(to_stderr: bool, line: &str) {
    if to_stderr {
        let _ = writeln!(std::io::stderr(), "{line}");
    } else {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn serve(port: u16) {
    let listener = std::net::TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| {
        eprintln!("crius-testprog: listening on port {port}: {e}");
        std::process::exit(3)
    });
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = match path {
                "/healthz" | "/ready" => ("200 OK", "ok\n"),
                _ => ("404 Not Found", "not found\n"),
            };
            let mut c = &conn;
            let _ = write!(
                c,
                "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

fn trap() {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
}

fn main() {
    let o = parse();
    if let Some(ms) = o.trap_after {
        std::thread::sleep(Duration::from_millis(ms));
    }
    trap();
    if o.print_env {
        for (k, v) in std::env::vars() {
            say(false, &format!("{k}={v}"));
        }
    }
    if let Some((path, text)) = &o.write_file
        && let Err(e) = std::fs::write(path, text)
    {
        say(true, &format!("writing {path}: {e}"));
        std::process::exit(1);
    }
    let mut kept: Vec<Vec<u8>> = Vec::new();
    if let Some(mib) = o.alloc {
        for _ in 0..mib {
            // Touch every page so the memory is really charged.
            kept.push(vec![1u8; 1 << 20]);
        }
        say(false, &format!("allocated {mib} MiB"));
    }
    for _ in 0..o.burn {
        std::thread::spawn(|| {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
    }
    if let Some(port) = o.http {
        serve(port);
        say(false, &format!("serving http on port {port}"));
    }
    let start = std::time::Instant::now();
    let mut n = 0u64;
    let mut next_log = Duration::ZERO;
    loop {
        if TERM.load(Ordering::SeqCst) {
            say(false, "got SIGTERM");
            if let Some(ms) = o.term_delay {
                std::thread::sleep(Duration::from_millis(ms));
            }
            say(false, "exiting");
            std::process::exit(o.term_exit);
        }
        let elapsed = start.elapsed();
        if o.exit_after
            .is_some_and(|ms| elapsed >= Duration::from_millis(ms))
        {
            std::process::exit(o.exit_code);
        }
        if let Some(every) = o.log_every
            && elapsed >= next_log
        {
            say(o.stderr, &format!("{n} {}", o.log_text));
            n += 1;
            next_log += Duration::from_millis(every.max(1));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
