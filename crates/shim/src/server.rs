//! The shim's ttrpc server, on the [`Reactor`]: connections are read on the loop thread; each request runs
//! on a worker thread (started when none is idle, gone after [`WORKER_IDLE`] without work), except the calls
//! registered as *deferred* (Wait), which hold no thread while they wait: their reply is sent when the
//! awaited thing happens. *Detached* calls (crius's ExecSync) are both: their start runs on a worker, which
//! returns at once, and their reply is sent later. So a pod's shim idles on one thread, however many
//! containers and Waits it has.
//!
//! The wire format is ttrpc's: a 10-byte header (length and stream id, big-endian u32s; type; flags), then a
//! protobuf `Request` or `Response`. The generated method handlers of `containerd-shim-protos` are reused.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::ttrpc::{self, Code, MessageHeader, MethodHandler, Request, Response};

use crate::reactor::{Next, READ, Reactor};

/// A frame header's size.
pub(crate) const HEADER: usize = 10;
/// The largest frame ttrpc allows.
pub(crate) const MAX_FRAME: usize = 4 << 20;
/// A request frame.
pub(crate) const TYPE_REQUEST: u8 = 1;
/// A response frame.
pub(crate) const TYPE_RESPONSE: u8 = 2;
/// How long an idle worker thread waits for work before it ends.
pub(crate) const WORKER_IDLE: Duration = Duration::from_secs(2);
/// How long a reply may wait for a client to read. Replies are written blocking, some from the loop thread: a
/// client that sent requests and never read the answers stopped the whole shim (found by the server's
/// property test). Past this the connection is shut down; its later replies fail at once.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most worker threads at once (requests beyond wait in the queue).
const MAX_WORKERS: usize = 32;

/// The generated method table (`/service/Method` → handler).
pub(crate) type Methods = HashMap<String, Box<dyn MethodHandler + Send + Sync>>;
/// A deferred call: takes the request and a [`Reply`] to send whenever it is ready.
pub(crate) type Deferred = Box<dyn Fn(Request, Reply) + Send + Sync>;

/// Encodes one frame.
pub(crate) fn frame(stream_id: u32, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(&stream_id.to_be_bytes());
    f.extend_from_slice(&[kind, 0]);
    f.extend_from_slice(payload);
    f
}

/// Splits the first complete frame off `buf`: (stream id, type, payload).
pub(crate) fn take_frame(buf: &mut Vec<u8>) -> crate::error::Result<Option<(u32, u8, Vec<u8>)>> {
    take_frame_max(buf, MAX_FRAME)
}

/// [`take_frame`] for frames of up to `max` bytes (a client reading ExecSync's answers).
pub(crate) fn take_frame_max(
    buf: &mut Vec<u8>,
    max: usize,
) -> crate::error::Result<Option<(u32, u8, Vec<u8>)>> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > max {
        let limit = if max == MAX_FRAME { "ttrpc's" } else { "the limit" };
        return Err(crate::error::Error::InvalidArgument(format!(
            "a {len}-byte frame is over {limit} {max}"
        )));
    }
    if buf.len() < HEADER + len {
        return Ok(None);
    }
    let stream = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes"));
    let kind = buf[8];
    let payload = buf[HEADER..HEADER + len].to_vec();
    buf.drain(..HEADER + len);
    Ok(Some((stream, kind, payload)))
}

fn status_response(code: Code, msg: String) -> Response {
    let mut r = Response::new();
    r.set_status(ttrpc::get_status(code, msg));
    r
}

/// One client connection. Reads happen on the loop thread; replies are written whole under a lock, from
/// workers or the loop.
struct Conn {
    stream: UnixStream,
    out: Mutex<()>,
}

impl Conn {
    /// Writes one frame whole, under the connection's lock.
    fn write_frame(&self, stream_id: u32, kind: u8, payload: &[u8]) {
        let f = frame(stream_id, kind, payload);
        let _guard = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // A client that went away loses its reply; one that does not read (the write timed out, maybe half
        // written) loses its connection.
        if (&self.stream).write_all(&f).is_err() {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn send(&self, stream_id: u32, res: &Response) {
        if let Ok(payload) = res.write_to_bytes() {
            self.write_frame(stream_id, TYPE_RESPONSE, &payload);
        }
    }
}

/// Where a deferred call's answer goes. Dropped unsent, it answers NOT_FOUND (what it waited for is gone).
pub(crate) struct Reply {
    conn: Option<Arc<Conn>>,
    stream_id: u32,
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let msg = "what this call waited for was deleted".to_string();
            conn.send(self.stream_id, &status_response(Code::NOT_FOUND, msg));
        }
    }
}

impl Reply {
    /// Sends `result` (a message, or a ttrpc status) to the caller.
    pub(crate) fn send<M: Message>(self, result: ttrpc::Result<M>) {
        self.send_bytes(result.map(|m| m.write_to_bytes().unwrap_or_default()));
    }

    /// Sends an encoded message, or the shim's error as its status.
    pub(crate) fn send_raw(self, result: crate::error::Result<Vec<u8>>) {
        self.send_bytes(result.map_err(ttrpc::Error::from));
    }

    fn send_bytes(mut self, result: ttrpc::Result<Vec<u8>>) {
        let res = match result {
            Ok(payload) => {
                let mut r = status_response(Code::OK, String::new());
                r.payload = payload;
                r
            }
            Err(ttrpc::Error::RpcStatus(s)) => {
                let mut r = Response::new();
                r.set_status(s);
                r
            }
            Err(e) => status_response(Code::UNKNOWN, e.to_string()),
        };
        if let Some(conn) = self.conn.take() {
            conn.send(self.stream_id, &res);
        }
    }
}

struct Job {
    conn: Arc<Conn>,
    stream_id: u32,
    req: Request,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
    workers: usize,
}

/// The server: methods, deferred calls and the worker pool.
pub(crate) struct Server {
    methods: Methods,
    deferred: HashMap<String, Deferred>,
    detached: HashMap<String, Deferred>,
    queue: Mutex<Queue>,
    work: Condvar,
}

/// Whether the peer of `stream` runs as this process's user (root): the socket's mode and directory keep
/// others out already; SO_PEERCRED refuses them again should a mode be loosened.
fn same_user(stream: &UnixStream) -> std::io::Result<()> {
    let cred = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("peer pid {} runs as uid {}, not {me}", cred.pid(), cred.uid()),
        ));
    }
    Ok(())
}

impl Server {
    /// A server for `methods`; the `deferred` ones are answered through a [`Reply`] instead.
    pub(crate) fn new(methods: Methods, deferred: HashMap<String, Deferred>) -> Arc<Server> {
        Server::with_detached(methods, deferred, HashMap::new())
    }

    /// [`Server::new`], and `detached` calls: started on a worker thread, answered through a [`Reply`].
    pub(crate) fn with_detached(
        methods: Methods,
        deferred: HashMap<String, Deferred>,
        detached: HashMap<String, Deferred>,
    ) -> Arc<Server> {
        Arc::new(Server {
            methods,
            deferred,
            detached,
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
        })
    }

    /// Accepts connections on `listener` in `reactor`.
    pub(crate) fn listen(self: &Arc<Self>, reactor: &Reactor, listener: UnixListener) -> std::io::Result<()> {
        listener.set_nonblocking(true)?;
        let me = self.clone();
        let listener = Arc::new(listener);
        let held = listener.clone();
        reactor.add(listener.as_fd(), READ, move |r, _| {
            while let Ok((stream, _)) = held.accept() {
                if let Err(e) = same_user(&stream) {
                    eprintln!("containerd-shim-crius-v2: a ttrpc connection refused: {e}");
                    continue;
                }
                if let Err(e) = me.serve(r, stream) {
                    eprintln!("containerd-shim-crius-v2: a ttrpc connection: {e}");
                }
            }
            Next::Keep
        })?;
        Ok(())
    }

    fn serve(self: &Arc<Self>, reactor: &Reactor, stream: UnixStream) -> std::io::Result<()> {
        // Blocking for the replies, within WRITE_TIMEOUT; reads never wait (MSG_DONTWAIT).
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let conn = Arc::new(Conn {
            stream,
            out: Mutex::new(()),
        });
        let me = self.clone();
        let mut buf: Vec<u8> = Vec::new();
        let c = conn.clone();
        reactor.add(conn.stream.as_fd(), READ, move |r, _| {
            let fd = c.stream.as_raw_fd();
            let mut chunk = [0u8; 16 * 1024];
            // SAFETY: recv into a local buffer of the given length.
            let n = unsafe { libc::recv(fd, chunk.as_mut_ptr().cast(), chunk.len(), libc::MSG_DONTWAIT) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
                return Next::Keep;
            }
            if n <= 0 {
                r.remove(c.stream.as_fd());
                return Next::Done;
            }
            buf.extend_from_slice(&chunk[..n as usize]);
            loop {
                match take_frame(&mut buf) {
                    Ok(Some((stream_id, TYPE_REQUEST, payload))) => me.dispatch(&c, stream_id, &payload),
                    Ok(Some(_)) => {}
                    Ok(None) => return Next::Keep,
                    Err(e) => {
                        eprintln!("containerd-shim-crius-v2: closing a connection: {e}");
                        r.remove(c.stream.as_fd());
                        return Next::Done;
                    }
                }
            }
        })?;
        Ok(())
    }

    fn dispatch(self: &Arc<Self>, conn: &Arc<Conn>, stream_id: u32, payload: &[u8]) {
        let req = match Request::parse_from_bytes(payload) {
            Ok(r) => r,
            Err(e) => {
                let res = status_response(Code::INVALID_ARGUMENT, format!("decoding the request: {e}"));
                return conn.send(stream_id, &res);
            }
        };
        let path = format!("/{}/{}", req.service, req.method);
        if let Some(d) = self.deferred.get(&path) {
            return d(
                req,
                Reply {
                    conn: Some(conn.clone()),
                    stream_id,
                },
            );
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.jobs.push_back(Job {
            conn: conn.clone(),
            stream_id,
            req,
        });
        if q.idle == 0 && q.workers < MAX_WORKERS {
            q.workers += 1;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("ttrpc-worker".into())
                .stack_size(256 * 1024)
                .spawn(move || me.work());
            if spawned.is_err() {
                q.workers -= 1;
            }
        } else {
            self.work.notify_one();
        }
    }

    fn work(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let Some(job) = q.jobs.pop_front() else {
                q.idle += 1;
                let (g, waited) = self
                    .work
                    .wait_timeout(q, WORKER_IDLE)
                    .unwrap_or_else(|p| p.into_inner());
                q = g;
                q.idle -= 1;
                if waited.timed_out() && q.jobs.is_empty() {
                    q.workers -= 1;
                    return;
                }
                continue;
            };
            drop(q);
            self.run(job);
            q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        }
    }

    fn run(&self, job: Job) {
        let path = format!("/{}/{}", job.req.service, job.req.method);
        if let Some(d) = self.detached.get(&path) {
            return d(
                job.req,
                Reply {
                    conn: Some(job.conn),
                    stream_id: job.stream_id,
                },
            );
        }
        let Some(method) = self.methods.get(&path) else {
            let res = status_response(Code::UNIMPLEMENTED, format!("{path} is not served here"));
            return job.conn.send(job.stream_id, &res);
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let ctx = ttrpc::TtrpcContext {
            fd: job.conn.stream.as_raw_fd(),
            cancel_rx: crossbeam_channel::never(),
            mh: MessageHeader {
                length: 0,
                stream_id: job.stream_id,
                type_: TYPE_REQUEST,
                flags: 0,
            },
            res_tx: tx,
            metadata: HashMap::new(),
            timeout_nano: job.req.timeout_nano,
        };
        match method.handler(ctx, job.req) {
            Ok(()) => {
                for (mh, payload) in rx.try_iter() {
                    job.conn.write_frame(mh.stream_id, mh.type_, &payload);
                }
            }
            Err(e) => {
                let res = status_response(Code::INVALID_ARGUMENT, format!("{path}: {e}"));
                job.conn.send(job.stream_id, &res);
            }
        }
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_their_bytes() {
        let mut buf = frame(7, TYPE_REQUEST, b"hello");
        buf.extend_from_slice(&frame(9, TYPE_RESPONSE, b"")[..6]);
        assert_eq!(
            take_frame(&mut buf).unwrap(),
            Some((7, TYPE_REQUEST, b"hello".to_vec()))
        );
        assert_eq!(take_frame(&mut buf).unwrap(), None);
        assert_eq!(buf.len(), 6);
        let mut huge = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        huge.extend_from_slice(&[0; 6]);
        assert!(
            take_frame(&mut huge)
                .unwrap_err()
                .to_string()
                .contains("over ttrpc")
        );
    }
}
