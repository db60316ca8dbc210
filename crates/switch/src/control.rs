//! The control socket: one JSON request per line, one JSON response per
//! line, over a Unix stream. [`Request`] and [`Response`] are the protocol;
//! [`Client`] is what `vnio switch port ...` uses.
//!
//! A refused request is answered `{"ok":false,"error":MESSAGE,"code":CODE}`:
//! `error` is one line for people, `code` one of these stable words for
//! programs ([`ControlError::code`]):
//!
//! - `not_found`: no port (or other object) of that name;
//! - `exists`: a port of that name is there already;
//! - `invalid`: the request or the port it describes is refused as it is
//!   (a bad key or value, a combination that does not hold, a resource
//!   such as a queue or core that is not there to give);
//! - `denied`: the client may not use the control socket;
//! - `busy`: the switch has no room for it now (clients, event subscribers);
//! - `io`: the system failed the switch (a socket, a thread, a file).
//!
//! A reply from an older switch has no `code`.

use crate::config::{PolicyUpdate, PortSpec};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A request.
// One per control message: the size of the largest variant (a port spec) does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Add a port.
    PortAdd {
        /// The port.
        port: PortSpec,
    },
    /// Remove a port.
    PortDel {
        /// Its name.
        name: String,
    },
    /// Change a running port's latency policies (absent fields keep their value).
    PortSet {
        /// Its name.
        name: String,
        /// What changes.
        #[serde(flatten)]
        set: PolicyUpdate,
    },
    /// List ports.
    PortList,
    /// Counters of one port, or all.
    Stats {
        /// Port name (all when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The learned addresses.
    Fdb,
    /// Counters in Prometheus text format.
    Metrics,
    /// Where each worker's time goes ([`crate::perf::PerfSnapshot`] per worker).
    Perf,
    /// Turn this connection into the stream of events (`crate::events`):
    /// one answer, then one JSON line per event until the client closes.
    Events,
    /// Stop the switch.
    Shutdown,
}

/// Why the switch refused a control request: the message said in the
/// reply's `error`, the kind in its `code` (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// No port (or other object) of that name.
    #[error("{0}")]
    NotFound(String),
    /// A port of that name exists.
    #[error("{0}")]
    Exists(String),
    /// The request or what it describes is refused as it is.
    #[error("{0}")]
    Invalid(String),
    /// The client may not use the control socket.
    #[error("{0}")]
    Denied(String),
    /// No room for it now.
    #[error("{0}")]
    Busy(String),
    /// The system failed the switch.
    #[error("{0}")]
    Io(String),
}

impl ControlError {
    /// The reply's stable `code` for this kind of error.
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::NotFound(_) => "not_found",
            ControlError::Exists(_) => "exists",
            ControlError::Invalid(_) => "invalid",
            ControlError::Denied(_) => "denied",
            ControlError::Busy(_) => "busy",
            ControlError::Io(_) => "io",
        }
    }

    /// The message, one line.
    pub fn message(&self) -> &str {
        match self {
            ControlError::NotFound(m)
            | ControlError::Exists(m)
            | ControlError::Invalid(m)
            | ControlError::Denied(m)
            | ControlError::Busy(m)
            | ControlError::Io(m) => m,
        }
    }
}

/// A refusal known only by its message is [`ControlError::Invalid`].
impl From<String> for ControlError {
    fn from(m: String) -> Self {
        ControlError::Invalid(m)
    }
}

/// A refusal known only by its message is [`ControlError::Invalid`].
impl From<&str> for ControlError {
    fn from(m: &str) -> Self {
        ControlError::Invalid(m.to_string())
    }
}

/// A response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result (when ok).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// What went wrong (when not ok).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kind of what went wrong (when not ok): [`ControlError::code`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Response {
    /// A success carrying `v`.
    pub fn ok(v: serde_json::Value) -> Self {
        Self {
            ok: true,
            result: Some(v),
            error: None,
            code: None,
        }
    }

    /// A failure (a bare message is [`ControlError::Invalid`]).
    pub fn err(e: impl Into<ControlError>) -> Self {
        let e = e.into();
        Self {
            ok: false,
            result: None,
            code: Some(e.code().to_string()),
            error: Some(e.to_string()),
        }
    }
}

/// Errors talking to the control socket.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting or exchanging failed.
    #[error("cannot talk to the switch control socket {path}")]
    Io {
        /// Socket.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The answer was not JSON.
    #[error("invalid response from the switch")]
    Json(#[from] serde_json::Error),
    /// The switch refused the request.
    #[error("switch: {0}")]
    Refused(String),
}

/// A control-socket client.
pub struct Client {
    stream: BufReader<UnixStream>,
    path: String,
}

impl Client {
    /// Connects to the control socket.
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let p = path.display().to_string();
        let io = |source| ClientError::Io {
            path: p.clone(),
            source,
        };
        let s = UnixStream::connect(path).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        Ok(Self {
            stream: BufReader::new(s),
            path: p,
        })
    }

    /// Sends a request; returns its result, or the switch's error.
    pub fn request(&mut self, req: &Request) -> Result<serde_json::Value, ClientError> {
        let io = |source| ClientError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = serde_json::to_string(req)?;
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(io)?;
        let mut answer = String::new();
        let n = self
            .stream
            .read_line(&mut answer)
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Err(ClientError::Io {
                path: self.path.clone(),
                source: std::io::ErrorKind::UnexpectedEof.into(),
            });
        }
        let r: Response = serde_json::from_str(&answer)?;
        if r.ok {
            Ok(r.result.unwrap_or(serde_json::Value::Null))
        } else {
            Err(ClientError::Refused(r.error.unwrap_or_default()))
        }
    }
}

impl Client {
    /// Subscribes to the switch's events: the connection becomes their
    /// stream (read it with [`Events::next_event`]), with no read timeout.
    pub fn events(mut self) -> Result<Events, ClientError> {
        self.request(&Request::Events)?;
        self.stream
            .get_ref()
            .set_read_timeout(None)
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(Events {
            client: self,
            line: Vec::new(),
        })
    }
}

/// A stream of events from the switch.
pub struct Events {
    client: Client,
    /// The line being read (kept across a read that timed out).
    line: Vec<u8>,
}

impl Events {
    /// The next line: an event, or how many were lost; `None` when the
    /// switch closed the stream.
    pub fn next_event(&mut self) -> Result<Option<crate::events::Streamed>, ClientError> {
        self.client
            .stream
            .read_until(b'\n', &mut self.line)
            .map_err(|source| ClientError::Io {
                path: self.client.path.clone(),
                source,
            })?;
        if self.line.is_empty() {
            return Ok(None);
        }
        let line = std::mem::take(&mut self.line);
        Ok(Some(serde_json::from_slice(&line)?))
    }

    /// Waits at most `t` for each line from now on (none: forever).
    pub fn set_timeout(&mut self, t: Option<Duration>) -> std::io::Result<()> {
        self.client.stream.get_ref().set_read_timeout(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::SocketMode;

    #[test]
    fn wire_form_is_stable() {
        let r = Request::PortAdd {
            port: PortSpec::vhost_user("vm1", "/tmp/a.sock", SocketMode::Server),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"op":"port_add","port":{"name":"vm1","spoof_guard":false,"kind":"vhost-user","socket":"/tmp/a.sock","mode":"server"}}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"port_list"}"#).unwrap(),
            Request::PortList
        );
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"events"}"#).unwrap(),
            Request::Events
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"explode"}"#).is_err());
        let set = Request::PortSet {
            name: "vm1".into(),
            set: PolicyUpdate {
                coalesce: Some("static:8:20".parse().unwrap()),
                lro: Some(false),
                ..Default::default()
            },
        };
        let s = serde_json::to_string(&set).unwrap();
        assert_eq!(
            s,
            r#"{"op":"port_set","name":"vm1","coalesce":"static:8:20","lro":false}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), set);
    }

    #[test]
    fn refusals_carry_their_code() {
        let r = Response::err(ControlError::NotFound("no port vm9".into()));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"ok":false,"error":"no port vm9","code":"not_found"}"#
        );
        assert_eq!(
            Response::err("bad request").code.as_deref(),
            Some("invalid")
        );
        // A reply from an older switch has no code.
        let old: Response = serde_json::from_str(r#"{"ok":false,"error":"x"}"#).unwrap();
        assert_eq!((old.error.as_deref(), old.code), (Some("x"), None));
    }
}
