//! A ttrpc client of a shim's Task API (`containerd.task.v2.Task`): one connection, called from any number of
//! threads at once, each call answered by its stream id. The connection's one reader thread blocks in
//! read(2) until an answer comes or the connection ends; nothing polls. (The ttrpc crate's sync client keeps
//! two threads per connection, one of them waking every 10 ms: in criusd, 100 wake-ups a second per pod for
//! as long as the pod lives.) Dropping the last handle shuts the socket down, which ends the reader.
//!
//! The methods are those of the generated client of `containerd-shim-protos`, with the same signatures, so
//! callers are written as against it, except for the error: [`Error`], whose [`Error::Timeout`] is a call
//! whose deadline (the context's) passed; its answer, if one comes, is dropped.
//!
//! crius's own ExecSync ([`TaskClient::exec_sync_then`], `crate::exec_sync`) holds no thread of the caller:
//! its answer is handed to a function on the reader thread, and the caller waits however it likes (criusd,
//! on a future).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::ttrpc::{self, Code, Request, Response, context::Context};

use crate::client_error::{Error, Result};

use crate::exec_sync::{ExecSyncRequest, ExecSyncResponse, MAX_ANSWER};
use crate::server::{MAX_FRAME, TYPE_REQUEST, TYPE_RESPONSE, WRITE_TIMEOUT, frame, take_frame_max};

const SERVICE: &str = "containerd.task.v2.Task";
/// The reader thread's stack: it only reads frames and decodes their envelope.
const READER_STACK: usize = 128 * 1024;

/// A connection to a shim's Task API; clones share it.
#[derive(Clone)]
pub struct TaskClient {
    handle: Arc<Handle>,
}

/// The last clone's drop shuts the socket down: the reader's read returns and its thread ends.
struct Handle(Arc<Conn>);

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.0.stream.shutdown(Shutdown::Both);
    }
}

struct Conn {
    stream: UnixStream,
    /// Held while a request is written: the next stream id (odd, as a ttrpc client's are).
    out: Mutex<u32>,
    calls: Mutex<Calls>,
}

/// Where a call's answer goes: a caller blocked on its channel, or a function. Dropped unanswered when the
/// connection ends (the channel's receiver, or whatever the function holds, sees the end).
enum Waiter {
    Blocked(SyncSender<Response>),
    Then(Box<dyn FnOnce(Response) + Send>),
}

#[derive(Default)]
struct Calls {
    /// The calls waiting for their answer, by stream id.
    waiting: HashMap<u32, Waiter>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

impl Conn {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed(&self) -> Error {
        let why = self.calls().closed.clone();
        Error::Closed(why.unwrap_or_else(|| "the connection ended".into()))
    }
}

/// Reads answers until the connection ends, then fails the calls still waiting.
fn read_answers(conn: Arc<Conn>, mut stream: UnixStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let why = 'read: loop {
        match stream.read(&mut chunk) {
            Ok(0) => break "the shim closed the connection".to_string(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break format!("reading from the shim: {e}"),
        }
        loop {
            match take_frame_max(&mut buf, MAX_ANSWER) {
                Ok(Some((id, TYPE_RESPONSE, payload))) => {
                    let Ok(res) = Response::parse_from_bytes(&payload) else {
                        break 'read format!("the shim's answer to call {id} does not parse");
                    };
                    let waiter = conn.calls().waiting.remove(&id);
                    match waiter {
                        Some(Waiter::Blocked(tx)) => {
                            let _ = tx.try_send(res);
                        }
                        Some(Waiter::Then(f)) => f(res),
                        None => {}
                    }
                }
                Ok(Some(_)) => {} // not an answer: nothing a client is owed
                Ok(None) => break,
                Err(e) => break 'read e.to_string(),
            }
        }
    };
    let mut calls = conn.calls();
    calls.closed = Some(why);
    calls.waiting.clear(); // their receivers see the end at once
}

impl TaskClient {
    /// A client over `stream`, connected to a shim.
    pub fn new(stream: UnixStream) -> std::io::Result<TaskClient> {
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let reader = stream.try_clone()?;
        let conn = Arc::new(Conn {
            stream,
            out: Mutex::new(1),
            calls: Mutex::default(),
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("shim-client".into())
            .stack_size(READER_STACK)
            .spawn(move || read_answers(c, reader))?;
        Ok(TaskClient {
            handle: Arc::new(Handle(conn)),
        })
    }

    /// Connects to the shim at `address` (`unix:///path`, or `unix://@name` for an abstract socket).
    pub fn dial(address: &str) -> std::io::Result<TaskClient> {
        let path = crate::address::without_scheme(address);
        let stream = match path.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                UnixStream::connect_addr(&addr)?
            }
            None => UnixStream::connect(path)?,
        };
        TaskClient::new(stream)
    }

    /// Sends `payload` to `service`'s `method`; its answer goes to `waiter`. Returns the call's stream id.
    fn send(
        &self,
        ctx: Context,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        waiter: Waiter,
    ) -> Result<u32> {
        let conn = &self.handle.0;
        let mut r = Request::new();
        r.set_service(service.into());
        r.set_method(method.into());
        r.set_timeout_nano(ctx.timeout_nano);
        r.metadata = ttrpc::context::to_pb(ctx.metadata);
        r.payload = payload;
        let bytes = r
            .write_to_bytes()
            .map_err(|e| Error::Protocol(format!("encoding {method}: {e}")))?;
        if bytes.len() > MAX_FRAME {
            return Err(Error::Protocol(format!(
                "{method}: a {}-byte request is over ttrpc's {MAX_FRAME}",
                bytes.len()
            )));
        }
        let mut next = conn.out.lock().unwrap_or_else(|p| p.into_inner());
        let id = *next;
        *next = next.wrapping_add(2);
        {
            let mut calls = conn.calls();
            if calls.closed.is_some() {
                drop(calls);
                return Err(conn.closed());
            }
            calls.waiting.insert(id, waiter);
        }
        if let Err(e) = (&conn.stream).write_all(&frame(id, TYPE_REQUEST, &bytes)) {
            conn.calls().waiting.remove(&id);
            // A write cut short leaves half a frame: the connection cannot be used again.
            let _ = conn.stream.shutdown(Shutdown::Both);
            return Err(Error::Closed(format!("sending {method}: {e}")));
        }
        Ok(id)
    }

    /// Calls `method` with `req`, and waits for its answer until the context's deadline (none: no limit).
    fn call<Req: Message, Resp: Message>(&self, ctx: Context, method: &str, req: &Req) -> Result<Resp> {
        let conn = &self.handle.0;
        let payload = req
            .write_to_bytes()
            .map_err(|e| Error::Protocol(format!("encoding {method}: {e}")))?;
        let (tx, rx) = mpsc::sync_channel(1);
        let ctx_timeout = ctx.timeout_nano;
        let id = self.send(ctx, SERVICE, method, payload, Waiter::Blocked(tx))?;
        let answer = if ctx_timeout > 0 {
            let d = Duration::from_nanos(ctx_timeout as u64);
            match rx.recv_timeout(d) {
                Ok(res) => res,
                Err(RecvTimeoutError::Timeout) => {
                    conn.calls().waiting.remove(&id);
                    return Err(Error::Timeout {
                        method: method.to_string(),
                        deadline: d,
                    });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(conn.closed()),
            }
        } else {
            rx.recv().map_err(|_| conn.closed())?
        };
        let payload = refused(answer)?;
        Resp::parse_from_bytes(&payload)
            .map_err(|e| Error::Protocol(format!("decoding the answer to {method}: {e}")))
    }

    /// Calls crius's ExecSync (`crate::exec_sync`) without waiting: `done` gets its answer on the connection's
    /// reader thread (or, if the connection ends first, is dropped uncalled). `timeout_nano` (0: none) is
    /// the deadline the shim is told; the caller keeps its own. Returns the call's id, for
    /// [`TaskClient::forget`]. A shim without it answers [`Error::Refused`] with `UNIMPLEMENTED`.
    pub fn exec_sync_then(
        &self,
        req: &ExecSyncRequest,
        timeout_nano: i64,
        done: impl FnOnce(Result<ExecSyncResponse>) + Send + 'static,
    ) -> Result<u32> {
        let then = move |res: Response| {
            done(refused(res).and_then(|p| {
                ExecSyncResponse::decode(&p)
                    .map_err(|e| Error::Protocol(format!("decoding the answer to ExecSync: {e}")))
            }));
        };
        let ctx = ttrpc::context::with_timeout(timeout_nano);
        let (service, method) = (crate::exec_sync::SERVICE, crate::exec_sync::METHOD);
        self.send(ctx, service, method, req.encode(), Waiter::Then(Box::new(then)))
    }

    /// Drops call `id`'s answer, should it come (its caller stopped waiting).
    pub fn forget(&self, id: u32) {
        self.handle.0.calls().waiting.remove(&id);
    }
}

/// The payload of `answer`, or the shim's refusal.
fn refused(answer: Response) -> Result<Vec<u8>> {
    if let Some(status) = answer.status.as_ref()
        && status.code() != Code::OK
    {
        return Err(Error::Refused {
            code: status.code(),
            message: status.message().to_string(),
        });
    }
    Ok(answer.payload)
}

macro_rules! methods {
    ($($name:ident $wire:literal $req:ident => $resp:ty;)*) => {
        impl TaskClient {
            $(
                #[doc = concat!("The Task API's `", $wire, "`.")]
                pub fn $name(&self, ctx: Context, req: &api::$req) -> Result<$resp> {
                    self.call(ctx, $wire, req)
                }
            )*
        }
    };
}

methods! {
    state "State" StateRequest => api::StateResponse;
    create "Create" CreateTaskRequest => api::CreateTaskResponse;
    start "Start" StartRequest => api::StartResponse;
    delete "Delete" DeleteRequest => api::DeleteResponse;
    pids "Pids" PidsRequest => api::PidsResponse;
    pause "Pause" PauseRequest => api::Empty;
    resume "Resume" ResumeRequest => api::Empty;
    checkpoint "Checkpoint" CheckpointTaskRequest => api::Empty;
    kill "Kill" KillRequest => api::Empty;
    exec "Exec" ExecProcessRequest => api::Empty;
    resize_pty "ResizePty" ResizePtyRequest => api::Empty;
    close_io "CloseIO" CloseIORequest => api::Empty;
    update "Update" UpdateTaskRequest => api::Empty;
    wait "Wait" WaitRequest => api::WaitResponse;
    stats "Stats" StatsRequest => api::StatsResponse;
    connect "Connect" ConnectRequest => api::ConnectResponse;
    shutdown "Shutdown" ShutdownRequest => api::Empty;
}

#[cfg(test)]
mod tests;
