//! Exec, attach and port-forward through criusd's streaming server, against real shims and containers, with
//! crius-stream's client on both transports: output, stdin to EOF, exit codes, a terminal and its resize,
//! two clients attached at once, port-forward into a pod's network namespace and into a host-network pod,
//! tokens used once, and nothing left behind; the exec cases also through `crius-runc exec` (direct exec off).

use std::time::Duration;

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, cstop};
use crius_stream::client::{self, Stdio, Transport};
use crius_stream::status::Outcome;
use crius_test_support::require_root;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Out {
    outcome: Outcome,
    stdout: String,
    stderr: String,
}

async fn read_all(mut r: tokio::io::DuplexStream) -> String {
    let mut s = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), r.read_to_string(&mut s)).await;
    s
}

async fn session(url: &str, t: Transport, stdin: Option<&'static [u8]>, resize: Option<(u16, u16)>) -> Out {
    let (out_w, out_r) = tokio::io::duplex(1 << 22);
    let (err_w, err_r) = tokio::io::duplex(1 << 22);
    // The sizes channel stays open for the session: a closed one is no resize.
    let (sizes, resize) = match resize {
        Some(s) => {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tx.try_send(s).unwrap();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let stdio = Stdio {
        stdin: stdin.map(|b| Box::pin(b) as _),
        stdout: Some(Box::pin(out_w)),
        stderr: Some(Box::pin(err_w)),
        resize,
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), client::remote_command(url, t, stdio))
        .await
        .expect("the session ends")
        .expect("the session runs");
    drop(sizes);
    Out {
        outcome,
        stdout: read_all(out_r).await,
        stderr: read_all(err_r).await,
    }
}

async fn exec_url(p: &mut Pod, id: &str, cmd: &[&str], stdin: bool, tty: bool) -> String {
    p.c.exec(cri::ExecRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    })
    .await
    .unwrap()
    .into_inner()
    .url
}

fn sleeper() -> cri::ContainerConfig {
    container("sleeper", "busybox:latest", "echo up; exec sleep 3600")
}

/// The exec directories (FIFOs) in container `id`'s bundle.
fn exec_dirs(p: &Pod, id: &str) -> Vec<String> {
    let bundle = p.d.state().join("containers").join(id);
    std::fs::read_dir(&bundle)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("exec-"))
        .collect()
}

/// Entries of criusd's /proc/PID/fd.
fn fds(p: &Pod) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", p.d.pid()))
        .map(|d| d.count())
        .unwrap_or(0)
}

async fn exec_cases(t: Transport) {
    exec_cases_with(t, Vec::new()).await;
}

/// The exec cases on the `crius-runc exec` path (the shim's direct exec, the default, turned off).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn exec_cases_through_crius_runc_exec() {
    require_root();
    let args = vec!["--direct-exec".to_string(), "false".to_string()];
    exec_cases_with(Transport::Spdy, args).await;
}

async fn exec_cases_with(t: Transport, daemon_args: Vec<String>) {
    let name = format!("exec-{t:?}").to_lowercase();
    let mut p = Pod::on_host_network_with(&name, daemon_args).await;
    let id = p.started(sleeper()).await;
    p.wait_for_log("sleeper", "up").await;
    let before = fds(&p);

    let url = exec_url(
        &mut p,
        &id,
        &["sh", "-c", "echo hello; echo oops >&2"],
        false,
        false,
    )
    .await;
    let o = session(&url, t, None, None).await;
    assert_eq!(
        (o.outcome, o.stdout.as_str(), o.stderr.as_str()),
        (Outcome::Success, "hello\n", "oops\n")
    );

    let url = exec_url(&mut p, &id, &["cat"], true, false).await;
    let o = session(&url, t, Some(b"one\ntwo\n"), None).await;
    assert_eq!(
        (o.outcome, o.stdout.as_str()),
        (Outcome::Success, "one\ntwo\n"),
        "cat ends at stdin's EOF"
    );

    let url = exec_url(&mut p, &id, &["sh", "-c", "exit 7"], false, false).await;
    assert_eq!(session(&url, t, None, None).await.outcome, Outcome::Exit(7));

    // A terminal made at the client's first size: the command reads it at once.
    let url = exec_url(&mut p, &id, &["stty", "size"], false, true).await;
    let o = session(&url, t, None, Some((123, 45))).await;
    assert_eq!(o.outcome, Outcome::Success);
    assert_eq!(o.stdout.trim(), "45 123", "{:?}", o.stdout);

    // The token was used: a second connection is refused.
    let e = client::remote_command(&url, t, Stdio::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, crius_stream::Error::Refused { status: 404, .. }),
        "{e}"
    );

    // The process runs in the container: its pid namespace, its hostname.
    let url = exec_url(
        &mut p,
        &id,
        &["sh", "-c", "ps -o pid,comm | grep -c sleep"],
        false,
        false,
    )
    .await;
    assert_eq!(session(&url, t, None, None).await.stdout.trim(), "1");

    // Nothing left: no exec directories in the bundle, no fds in criusd.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        fds(&p) <= before,
        "criusd's fds: {before} before, {} after",
        fds(&p)
    );
    let leftovers = exec_dirs(&p, &id);
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A stopped container has nothing to exec in.
    cstop(&mut p.c, &id, 0).await;
    let e =
        p.c.exec(cri::ExecRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let e =
        p.c.exec(cri::ExecRequest {
            container_id: "nope".into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
}

async fn attach_cases(t: Transport) {
    let mut p = Pod::on_host_network(&format!("attach-{t:?}").to_lowercase()).await;
    let mut cfg = container(
        "talker",
        "busybox:latest",
        "echo before; read line; echo got $line; sleep 1; echo bye",
    );
    cfg.stdin = true;
    cfg.stdin_once = true;
    let id = p.started(cfg).await;
    p.wait_for_log("talker", "before").await;
    let attach = |stdin: bool| cri::AttachRequest {
        container_id: id.clone(),
        stdin,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let quiet = p.c.attach(attach(false)).await.unwrap().into_inner().url;
    let talker = p.c.attach(attach(true)).await.unwrap().into_inner().url;
    let watcher = tokio::spawn(async move { session(&quiet, t, None, None).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let o = session(&talker, t, Some(b"hi\n"), None).await;
    let w = watcher.await.unwrap();
    for o in [&o, &w] {
        assert_eq!(o.outcome, Outcome::Success);
        assert!(
            o.stdout.contains("got hi\n") && o.stdout.ends_with("bye\n"),
            "{:?}",
            o.stdout
        );
        assert!(
            !o.stdout.contains("before"),
            "what was written before attach stays in the log"
        );
    }
    assert!(p.log_text("talker").contains("before"));
}

async fn http_pod(p: &mut Pod, port: u16) -> String {
    let script =
        format!("mkdir -p /www; echo hello-from-pod > /www/index.html; httpd -f -p 127.0.0.1:{port} -h /www");
    let id = p.started(container("web", "busybox:latest", &script)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    id
}

async fn get_through(p: &mut Pod, t: Transport, port: u16) -> String {
    let url =
        p.c.port_forward(cri::PortForwardRequest {
            pod_sandbox_id: p.id.clone(),
            port: vec![i32::from(port)],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fwd = tokio::spawn(async move {
        let (conn, _) = listener.accept().await.unwrap();
        client::port_forward(&url, t, port, conn).await
    });
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").await.unwrap();
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut body))
        .await
        .expect("the pod answers")
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), fwd).await;
    body
}

async fn port_forward_cases(t: Transport) {
    let mut p = Pod::on_network(&format!("pf-{t:?}").to_lowercase()).await;
    http_pod(&mut p, 8080).await;
    let body = get_through(&mut p, t, 8080).await;
    assert!(body.contains("hello-from-pod"), "{body}");

    // A port nothing listens on: the client hears why.
    let url =
        p.c.port_forward(cri::PortForwardRequest {
            pod_sandbox_id: p.id.clone(),
            port: vec![9],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fwd = tokio::spawn(async move {
        let (conn, _) = listener.accept().await.unwrap();
        client::port_forward(&url, t, 9, conn).await
    });
    let _s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(15), fwd)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("port 9"), "{e}");
}

async fn host_network_port_forward(t: Transport) {
    let mut p = Pod::on_host_network(&format!("pfh-{t:?}").to_lowercase()).await;
    let port = crius_test_support::free_port();
    http_pod(&mut p, port).await;
    let body = get_through(&mut p, t, port).await;
    assert!(body.contains("hello-from-pod"), "{body}");
}

/// `crius exec`, `crius attach` and `crius port-forward`: the pod and container found by name, stdin passed,
/// the command's exit code returned, a port reached, on both transports.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn the_cli_finds_the_pod_by_name() {
    use std::io::Write;
    use std::process::{Command, Stdio as PStdio};
    require_root();
    let mut p = Pod::on_host_network("cli").await;
    let port = crius_test_support::free_port();
    let script = format!(
        "mkdir -p /www; echo cli-page > /www/index.html; httpd -p 127.0.0.1:{port} -h /www && echo up; exec sleep 3600"
    );
    p.started(container("web", "busybox:latest", &script)).await;
    p.wait_for_log("web", "up").await;
    let crius = crius_test_support::daemon::built_binary("crius");
    let sock = p.d.socket().display().to_string();
    for t in ["spdy", "websocket"] {
        let mut child = Command::new(&crius)
            .args([
                "--address",
                &sock,
                "exec",
                "-i",
                "--transport",
                t,
                "cli",
                "-c",
                "web",
                "--",
            ])
            .args(["sh", "-c", "cat; exit 7"])
            .stdin(PStdio::piped())
            .stdout(PStdio::piped())
            .stderr(PStdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"piped\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(7),
            "{t}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "piped\n", "{t}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("command terminated with exit code 7"),
            "{t}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let missing = Command::new(&crius)
        .args(["--address", &sock, "exec", "nope", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("pods \"nope\" not found in namespace \"default\""),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    // port-forward from a free local port: the first line names it.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut fwd = Killed(
        Command::new(&crius)
            .args(["--address", &sock, "port-forward", "cli", &format!(":{port}")])
            .stdout(PStdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(fwd.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let local: std::net::SocketAddr = line
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let mut s = tokio::net::TcpStream::connect(local).await.unwrap();
    s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").await.unwrap();
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut body))
        .await
        .unwrap()
        .unwrap();
    drop(fwd);
    drop(out);
    assert!(body.contains("cli-page"), "{body}");
}

/// Attach to a container with a terminal: its output (a prompt without a newline included) and its input.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn attach_to_a_terminal() {
    require_root();
    let mut p = Pod::on_host_network("attach-tty").await;
    let mut cfg = container(
        "tty",
        "busybox:latest",
        "sleep 1; printf 'name? '; read n; echo hi $n",
    );
    cfg.tty = true;
    cfg.stdin = true;
    cfg.stdin_once = true;
    let id = p.started(cfg).await;
    let url =
        p.c.attach(cri::AttachRequest {
            container_id: id,
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let o = session(&url, Transport::Spdy, Some(b"bob\n"), Some((80, 24))).await;
    assert_eq!(o.outcome, Outcome::Success);
    assert!(o.stdout.contains("hi bob"), "{:?}", o.stdout);
}

/// A session open when criusd restarts ends; the container goes on; the restarted criusd kills and deletes
/// the exec and removes its FIFOs.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_session_ends_with_criusd_and_its_exec_is_cleaned_up() {
    require_root();
    let mut p = Pod::on_host_network("restarted").await;
    let id = p.started(sleeper()).await;
    p.wait_for_log("sleeper", "up").await;
    let url = exec_url(&mut p, &id, &["sleep", "1001"], false, false).await;
    let session =
        tokio::spawn(async move { client::remote_command(&url, Transport::Spdy, Stdio::default()).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.restart_daemon().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), session)
        .await
        .expect("the session ends")
        .unwrap();
    assert!(!matches!(ended, Ok(Outcome::Success)), "{ended:?}");
    let left =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "ps -o args | grep -c '^sleep 1001' || true".into(),
            ],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "0",
        "the exec was killed"
    );
    let dirs = exec_dirs(&p, &id);
    assert!(dirs.is_empty(), "{dirs:?}");
}

macro_rules! cases {
    ($transport:ident, $($name:ident),*) => {
        $(#[tokio::test(flavor = "multi_thread")]
        #[ignore = "needs root: run through hack/test.sh"]
        async fn $name() {
            require_root();
            super::$name(Transport::$transport).await
        })*
    };
}

mod websocket {
    use super::*;
    cases!(
        WebSocket,
        exec_cases,
        attach_cases,
        port_forward_cases,
        host_network_port_forward
    );
}

mod spdy {
    use super::*;
    cases!(
        Spdy,
        exec_cases,
        attach_cases,
        port_forward_cases,
        host_network_port_forward
    );
}
