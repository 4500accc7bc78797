//! The error channel's message: a Kubernetes `metav1.Status` as JSON, written once when a session ends.
//! Success; a non-zero exit (reason `NonZeroExitCode`, the code as the `ExitCode` cause, which client-go
//! turns into the exit code crictl and kubectl return); or a failure with its message.

use serde::{Deserialize, Serialize};

/// The parts of `metav1.Status` the protocol uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Always empty.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `Success` or `Failure`.
    pub status: String,
    /// What happened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Why, as a machine word (`NonZeroExitCode`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The exit code as a cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Details>,
}

/// `metav1.StatusDetails`, its causes only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Details {
    /// The causes.
    #[serde(default)]
    pub causes: Vec<Cause>,
}

/// `metav1.StatusCause`: its type is serialised as `reason`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// The cause's type (`ExitCode`).
    #[serde(default)]
    pub reason: String,
    /// Its value.
    #[serde(default)]
    pub message: String,
}

/// What a session's end was, as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0 (or an attach that ended).
    Success,
    /// The process exited with this code (not 0).
    Exit(i32),
    /// The session failed: the server's message.
    Failed(String),
}

/// The reason of a non-zero exit.
pub const NON_ZERO_EXIT: &str = "NonZeroExitCode";
/// The cause type that carries the exit code.
pub const EXIT_CODE_CAUSE: &str = "ExitCode";

impl Status {
    /// The status of `outcome`; `cmd` is named in a non-zero exit's message as kubelet does.
    pub fn of(outcome: &Outcome, cmd: &[String]) -> Status {
        match outcome {
            Outcome::Success => Status {
                status: "Success".into(),
                ..Status::default()
            },
            Outcome::Exit(code) => Status {
                status: "Failure".into(),
                message: format!(
                    "command terminated with non-zero exit code: error executing command {cmd:?}, exit code {code}"
                ),
                reason: NON_ZERO_EXIT.into(),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: EXIT_CODE_CAUSE.into(),
                        message: code.to_string(),
                    }],
                }),
                ..Status::default()
            },
            Outcome::Failed(message) => Status {
                status: "Failure".into(),
                message: message.clone(),
                reason: "InternalError".into(),
                ..Status::default()
            },
        }
    }

    /// As written on the wire.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a status off the wire.
    pub fn parse(bytes: &[u8]) -> Outcome {
        let Ok(s) = serde_json::from_slice::<Status>(bytes) else {
            return Outcome::Failed(format!(
                "the server's status is not a Status object: {:?}",
                String::from_utf8_lossy(bytes)
            ));
        };
        if s.status == "Success" {
            return Outcome::Success;
        }
        if s.reason == NON_ZERO_EXIT {
            let code = s
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .find(|c| c.reason == EXIT_CODE_CAUSE)
                .and_then(|c| c.message.parse().ok());
            if let Some(code) = code {
                return Outcome::Exit(code);
            }
        }
        Outcome::Failed(if s.message.is_empty() {
            format!("the server's status: {}", s.status)
        } else {
            s.message
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_what_client_go_reads() {
        let ok = String::from_utf8(Status::of(&Outcome::Success, &[]).to_json()).unwrap();
        assert_eq!(ok, r#"{"metadata":{},"status":"Success"}"#);
        let cmd = vec!["sh".to_string(), "-c".into(), "exit 7".into()];
        let bad = String::from_utf8(Status::of(&Outcome::Exit(7), &cmd).to_json()).unwrap();
        assert!(bad.contains(r#""reason":"NonZeroExitCode""#), "{bad}");
        assert!(
            bad.contains(r#""causes":[{"reason":"ExitCode","message":"7"}]"#),
            "{bad}"
        );
        for o in [
            Outcome::Success,
            Outcome::Exit(7),
            Outcome::Failed("no such container".into()),
        ] {
            assert_eq!(Status::parse(&Status::of(&o, &cmd).to_json()), o);
        }
        assert!(matches!(Status::parse(b"garbage"), Outcome::Failed(_)));
    }
}
