//! A QMP client: QEMU's JSON monitor over a Unix socket. One request at a
//! time; asynchronous events interleaved with answers are skipped.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// A negotiated QMP connection.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// One vCPU as QMP reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vcpu {
    /// vCPU index.
    pub index: usize,
    /// The host thread running it.
    pub thread_id: i32,
}

impl Qmp {
    /// Connects and leaves capabilities-negotiation mode.
    pub fn connect(path: &Path) -> Result<Qmp> {
        let stream = UnixStream::connect(path)
            .map_err(|e| Error::Qmp(format!("connecting to {}: {e}", path.display())))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| Error::Qmp(e.to_string()))?;
        let writer = stream.try_clone().map_err(|e| Error::Qmp(e.to_string()))?;
        let mut q = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = q.read()?;
        if greeting.get("QMP").is_none() {
            return Err(Error::Qmp(format!("unexpected greeting {greeting}")));
        }
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    fn read(&mut self) -> Result<Value> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| Error::Qmp(format!("reading: {e}")))?;
        if n == 0 {
            return Err(Error::Qmp("QEMU closed the monitor".into()));
        }
        serde_json::from_str(&line).map_err(|e| Error::Qmp(format!("bad JSON {line:?}: {e}")))
    }

    /// Runs `command`; returns its `return` value.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value> {
        let mut req = json!({ "execute": command });
        if let Some(a) = arguments {
            req["arguments"] = a;
        }
        let mut text = req.to_string();
        text.push('\n');
        self.writer
            .write_all(text.as_bytes())
            .map_err(|e| Error::Qmp(format!("{command}: {e}")))?;
        loop {
            let v = self.read()?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                let desc = e.get("desc").and_then(Value::as_str).unwrap_or("?");
                return Err(Error::Qmp(format!("{command}: {desc}")));
            }
            return Err(Error::Qmp(format!("{command}: unexpected answer {v}")));
        }
    }

    /// The vCPUs and their host threads (`query-cpus-fast`).
    pub fn vcpus(&mut self) -> Result<Vec<Vcpu>> {
        let r = self.execute("query-cpus-fast", None)?;
        parse_vcpus(&r)
    }

    /// Starts the (paused) guest.
    pub fn cont(&mut self) -> Result<()> {
        self.execute("cont", None).map(drop)
    }

    /// Asks QEMU to exit now.
    pub fn quit(&mut self) -> Result<()> {
        self.execute("quit", None).map(drop)
    }
}

/// The vCPU list of a `query-cpus-fast` answer.
pub fn parse_vcpus(r: &Value) -> Result<Vec<Vcpu>> {
    let list = r
        .as_array()
        .ok_or_else(|| Error::Qmp(format!("query-cpus-fast: not a list: {r}")))?;
    list.iter()
        .map(|c| {
            let index = c.get("cpu-index").and_then(Value::as_u64);
            let tid = c.get("thread-id").and_then(Value::as_i64);
            match (index, tid) {
                (Some(i), Some(t)) => Ok(Vcpu {
                    index: i as usize,
                    thread_id: t as i32,
                }),
                _ => Err(Error::Qmp(format!("query-cpus-fast: odd entry {c}"))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_threads_are_read_from_query_cpus_fast() {
        // The shape QEMU 7.2 answers with (x86 fields trimmed).
        let r = json!([
            {"thread-id": 4242, "props": {"core-id": 0}, "qom-path": "/machine/unattached/device[0]", "cpu-index": 0, "target": "x86_64"},
            {"thread-id": 4243, "props": {"core-id": 1}, "qom-path": "/machine/unattached/device[1]", "cpu-index": 1, "target": "x86_64"}
        ]);
        let v = parse_vcpus(&r).unwrap();
        assert_eq!(
            v,
            vec![
                Vcpu {
                    index: 0,
                    thread_id: 4242
                },
                Vcpu {
                    index: 1,
                    thread_id: 4243
                }
            ]
        );
        assert!(parse_vcpus(&json!({"x": 1})).is_err());
        assert!(parse_vcpus(&json!([{"cpu-index": 0}])).is_err());
    }
}
