//! crius's own ttrpc service beside the Task API: `crius.shim.v1.Exec/ExecSync`, a whole CRI ExecSync in one
//! call. The shim defines and starts the exec, captures its stdout and stderr in memory (each capped at
//! [`MAX_OUTPUT`]), waits for it with the timeout, kills it when over, deletes it and answers with its exit
//! and output. A containerd-style client never calls it; an older shim answers UNIMPLEMENTED.
//!
//! Its two messages are protobuf, encoded here by hand (no generated code for two messages):
//! - `ExecSyncRequest { string id = 1; string exec_id = 2; bytes process = 3; uint64 timeout_ms = 4; }` —
//!   `process` is the OCI process as JSON (as the Task API's Exec carries it), `timeout_ms` 0 for none;
//! - `ExecSyncResponse { uint32 exit_status = 1; bool timed_out = 2; bytes stdout = 3; bytes stderr = 4; }`.
//!
//! The answer can hold two streams of [`MAX_OUTPUT`] each, more than ttrpc's 4 MiB frame: the client reads
//! answer frames up to [`MAX_ANSWER`] (requests keep the 4 MiB limit).

use containerd_shim_protos::protobuf::{self, CodedInputStream, CodedOutputStream};

/// The service's ttrpc name.
pub const SERVICE: &str = "crius.shim.v1.Exec";
/// Its one method.
pub const METHOD: &str = "ExecSync";
/// The most output kept per stream; past it the rest is dropped (the process is not stopped). 16 MiB: the cap
/// dockershim set for exec output (kubernetes#82514), which CRI-O keeps for ExecSync and which kubelet's
/// CRI client allows as a message.
pub const MAX_OUTPUT: usize = 16 << 20;
/// The largest answer frame a client accepts: both streams full, and room for the rest.
pub const MAX_ANSWER: usize = 2 * MAX_OUTPUT + (64 << 10);

/// What ExecSync asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecSyncRequest {
    /// The container.
    pub id: String,
    /// The exec id, unique within the container.
    pub exec_id: String,
    /// The OCI process, JSON.
    pub process: Vec<u8>,
    /// Killed after this many ms (0: no limit).
    pub timeout_ms: u64,
}

/// What ExecSync answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecSyncResponse {
    /// The exit status (128 + signal for a killed process).
    pub exit_status: u32,
    /// It ran past the timeout and was killed.
    pub timed_out: bool,
    /// Its stdout, at most [`MAX_OUTPUT`] bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, likewise.
    pub stderr: Vec<u8>,
}

fn encode(write: impl FnOnce(&mut CodedOutputStream<'_>) -> protobuf::Result<()>) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut os = CodedOutputStream::vec(&mut out);
        // Writing into a Vec fails only on allocation, which aborts first.
        let _ = write(&mut os).and_then(|()| os.flush());
    }
    out
}

impl ExecSyncRequest {
    /// Its protobuf encoding.
    pub fn encode(&self) -> Vec<u8> {
        encode(|os| {
            os.write_string(1, &self.id)?;
            os.write_string(2, &self.exec_id)?;
            os.write_bytes(3, &self.process)?;
            os.write_uint64(4, self.timeout_ms)
        })
    }

    /// Decodes `bytes`; fields it does not know are skipped.
    pub fn decode(bytes: &[u8]) -> protobuf::Result<ExecSyncRequest> {
        let mut r = ExecSyncRequest::default();
        let mut is = CodedInputStream::from_bytes(bytes);
        while let Some(tag) = is.read_raw_tag_or_eof()? {
            match tag {
                10 => r.id = is.read_string()?,
                18 => r.exec_id = is.read_string()?,
                26 => r.process = is.read_bytes()?,
                32 => r.timeout_ms = is.read_uint64()?,
                t => protobuf::rt::skip_field_for_tag(t, &mut is)?,
            }
        }
        Ok(r)
    }
}

impl ExecSyncResponse {
    /// Its protobuf encoding.
    pub fn encode(&self) -> Vec<u8> {
        encode(|os| {
            os.write_uint32(1, self.exit_status)?;
            os.write_bool(2, self.timed_out)?;
            os.write_bytes(3, &self.stdout)?;
            os.write_bytes(4, &self.stderr)
        })
    }

    /// Decodes `bytes`; fields it does not know are skipped.
    pub fn decode(bytes: &[u8]) -> protobuf::Result<ExecSyncResponse> {
        let mut r = ExecSyncResponse::default();
        let mut is = CodedInputStream::from_bytes(bytes);
        while let Some(tag) = is.read_raw_tag_or_eof()? {
            match tag {
                8 => r.exit_status = is.read_uint32()?,
                16 => r.timed_out = is.read_bool()?,
                26 => r.stdout = is.read_bytes()?,
                34 => r.stderr = is.read_bytes()?,
                t => protobuf::rt::skip_field_for_tag(t, &mut is)?,
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_skip_unknown_fields() {
        let req = ExecSyncRequest {
            id: "c1".into(),
            exec_id: "e1".into(),
            process: br#"{"args":["true"]}"#.to_vec(),
            timeout_ms: 1500,
        };
        assert_eq!(ExecSyncRequest::decode(&req.encode()).unwrap(), req);
        let res = ExecSyncResponse {
            exit_status: 137,
            timed_out: true,
            stdout: vec![0, 1, 2, 255],
            stderr: b"oops".to_vec(),
        };
        let mut bytes = res.encode();
        // A field of a later version (99, a varint) is skipped.
        bytes.extend_from_slice(&[0x98, 0x06, 0x01]);
        assert_eq!(ExecSyncResponse::decode(&bytes).unwrap(), res);
        assert_eq!(
            ExecSyncResponse::decode(&[]).unwrap(),
            ExecSyncResponse::default()
        );
        assert!(ExecSyncResponse::decode(&[0x1a, 0x05, 1]).is_err(), "cut short");
    }
}
