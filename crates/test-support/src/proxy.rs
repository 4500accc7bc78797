//! A registry proxy for pull tests: plain HTTP/1.1 on 127.0.0.1 in front of a [`crate::registry::Registry`],
//! one request per connection (it asks both sides to close after the answer). It can hold each blob's answer
//! back for a while (so several downloads overlap, and it counts how many are in flight at most), and stall one
//! blob mid-body: half of it is sent, then nothing, until the client hangs up (which it records).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does and saw, shared with its threads.
#[derive(Default)]
struct State {
    /// The digest (`sha256:…`) whose blob stalls mid-body.
    stall: Mutex<Option<String>>,
    /// How long each blob's answer waits before its body.
    delay: Mutex<Duration>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    blob_gets: AtomicUsize,
    /// The digests of the blobs asked for, in order.
    blobs: Mutex<Vec<String>>,
    /// The client hung up a stalled answer.
    hung_up: AtomicBool,
    done: AtomicBool,
}

/// A running proxy; stops accepting when dropped.
pub struct RegistryProxy {
    /// Its `127.0.0.1:<port>`: pull `<host>/<repo>:<tag>` through it.
    pub host: String,
    state: Arc<State>,
}

impl RegistryProxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> RegistryProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let host = listener.local_addr().expect("proxy addr").to_string();
        let state = Arc::new(State::default());
        let (st, up) = (state.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                if st.done.load(Ordering::SeqCst) {
                    return;
                }
                let (st, up) = (st.clone(), up.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &up, &st);
                });
            }
        });
        RegistryProxy { host, state }
    }

    /// The blob `digest` is answered with half its body, then nothing more.
    pub fn stall_blob(&self, digest: &str) {
        *self.state.stall.lock().unwrap() = Some(digest.to_string());
    }

    /// Each blob's answer waits `d` before its body is sent.
    pub fn delay_blobs(&self, d: Duration) {
        *self.state.delay.lock().unwrap() = d;
    }

    /// The most blob GETs that were in flight at once.
    pub fn max_blobs_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Blob GETs seen.
    pub fn blob_gets(&self) -> usize {
        self.state.blob_gets.load(Ordering::SeqCst)
    }

    /// The digests of the blobs GET asked for, in order.
    pub fn blobs_fetched(&self) -> Vec<String> {
        self.state.blobs.lock().unwrap().clone()
    }

    /// Whether the client hung up a stalled answer (it gave up on it).
    pub fn stalled_download_abandoned(&self) -> bool {
        self.state.hung_up.load(Ordering::SeqCst)
    }
}

impl Drop for RegistryProxy {
    fn drop(&mut self) {
        self.state.done.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.host);
    }
}

/// Reads an HTTP head (up to the blank line); None at end of stream.
fn head(r: &mut impl BufRead) -> std::io::Result<Option<Vec<String>>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            return Ok(Some(lines));
        }
        lines.push(line);
    }
}

/// `lines` with its Connection header replaced by `Connection: close`, as a head to send.
fn closing(lines: &[String]) -> String {
    let mut out: String = lines
        .iter()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    out += "Connection: close\r\n\r\n";
    out
}

fn serve(client: TcpStream, upstream: &str, st: &State) -> std::io::Result<()> {
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut to_client = client;
    let Some(req) = head(&mut from_client)? else {
        return Ok(());
    };
    let mut words = req[0].split_whitespace();
    let (method, path) = (
        words.next().unwrap_or_default().to_string(),
        words.next().unwrap_or_default().to_string(),
    );
    let blob = (method == "GET")
        .then(|| {
            path.split("/blobs/")
                .nth(1)
                .map(|d| d.split('?').next().unwrap_or(d).to_string())
        })
        .flatten();
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(closing(&req).as_bytes())?;
    let mut from_up = BufReader::new(up);
    let resp = head(&mut from_up)?.unwrap_or_default();
    let length: Option<u64> = resp.iter().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    });
    to_client.write_all(closing(&resp).as_bytes())?;
    let Some(digest) = blob else {
        std::io::copy(&mut from_up, &mut to_client)?;
        return Ok(());
    };
    st.blob_gets.fetch_add(1, Ordering::SeqCst);
    st.blobs.lock().unwrap().push(digest.clone());
    let now = st.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    st.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let r = (|| {
        std::thread::sleep(*st.delay.lock().unwrap());
        if st.stall.lock().unwrap().as_deref() == Some(digest.as_str()) {
            let half = length.unwrap_or(0) / 2;
            std::io::copy(&mut (&mut from_up).take(half), &mut to_client)?;
            to_client.flush()?;
            // Nothing more; wait for the client to give up.
            to_client.set_nonblocking(true)?;
            let mut byte = [0u8; 1];
            while !st.done.load(Ordering::SeqCst) {
                match to_client.peek(&mut byte) {
                    Ok(0) => {
                        st.hung_up.store(true, Ordering::SeqCst);
                        break;
                    }
                    Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                        st.hung_up.store(true, Ordering::SeqCst);
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            return Ok(());
        }
        std::io::copy(&mut from_up, &mut to_client).map(drop)
    })();
    st.in_flight.fetch_sub(1, Ordering::SeqCst);
    r
}
