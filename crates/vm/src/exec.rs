//! The command channel: run a program inside a guest and get its exit
//! status and output, without a network path to the guest. QEMU exposes a
//! virtio-serial port named [`PORT_NAME`] as a Unix socket in the VM's
//! state directory; inside, `vnio vm guest-serve` (started by init) reads
//! one JSON request per line and answers with one JSON line.
//!
//! This is how a guest's own `vnio rr` or `vnio ping` runs against another
//! guest, and how tests look inside a guest.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result};
use crate::state::VmDir;

/// The virtio-serial port's name (`/sys/class/virtio-ports/*/name`).
pub const PORT_NAME: &str = "org.vnio.exec";

/// Output kept per stream (the rest is cut, and said so).
const MAX_OUTPUT: usize = 1 << 20;

/// A request: run `argv` for at most `timeout_ms`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Request {
    /// Matches the answer to the request (stale answers are skipped).
    pub id: u64,
    /// Program and arguments (looked up in the guest's PATH).
    pub argv: Vec<String>,
    /// Killed after this long.
    pub timeout_ms: u64,
}

/// What the program did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Output {
    /// The request's id.
    pub id: u64,
    /// Exit code (`None`: killed by a signal, or never started).
    pub code: Option<i32>,
    /// Killed for running past the timeout.
    pub timed_out: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error (or why it could not start).
    pub stderr: String,
}

impl Output {
    /// Exited with 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `argv` in the guest of `dir`, waiting up to `timeout` (plus a
/// margin for the channel).
pub fn exec(dir: &VmDir, argv: &[String], timeout: Duration) -> Result<Output> {
    if argv.is_empty() {
        return Err(Error::Invalid("exec: no command".into()));
    }
    // QEMU's socket serves one client at a time: serialise callers.
    let lock =
        File::create(dir.exec_lock()).ctx(|| format!("creating {}", dir.exec_lock().display()))?;
    let _guard =
        nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| {
            Error::Io {
                what: "locking the command channel".into(),
                source: e.into(),
            }
        })?;
    let sock = dir.exec();
    let stream = UnixStream::connect(&sock).map_err(|e| {
        Error::Guest(format!(
            "cannot reach VM {}'s command channel {}: {e} (is it running?)",
            dir.name(),
            sock.display()
        ))
    })?;
    let id = crate::state::monotonic_ns();
    let req = Request {
        id,
        argv: argv.to_vec(),
        timeout_ms: timeout.as_millis() as u64,
    };
    let mut line = serde_json::to_string(&req).expect("request serialises");
    line.push('\n');
    (&stream)
        .write_all(line.as_bytes())
        .ctx(|| "writing to the command channel".into())?;
    // The guest may only now notice the host connected; give it the
    // command's time plus a margin (TCG guests are slow to schedule).
    let deadline = Instant::now() + timeout + Duration::from_secs(30);
    let mut reader = BufReader::new(stream);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Guest(format!(
                "VM {}: no answer from the guest's command channel (is vnio vm guest-serve running?)",
                dir.name()
            )));
        }
        reader
            .get_ref()
            .set_read_timeout(Some(left))
            .ctx(|| "setting a timeout".into())?;
        let mut answer = String::new();
        match reader.read_line(&mut answer) {
            Ok(0) => {
                return Err(Error::Guest(format!(
                    "VM {}: the command channel closed (the VM stopped?)",
                    dir.name()
                )))
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                return Err(Error::Io {
                    what: "reading the command channel".into(),
                    source: e,
                })
            }
        }
        match serde_json::from_str::<Output>(answer.trim()) {
            Ok(out) if out.id == id => return Ok(out),
            // An answer to an earlier, abandoned request, or line noise.
            _ => continue,
        }
    }
}

/// The guest side's port device, found by name.
pub fn find_port(sys: &Path) -> Option<PathBuf> {
    std::fs::read_dir(sys)
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim() == PORT_NAME)
        })
        .map(|e| PathBuf::from("/dev").join(e.file_name()))
}

fn read_capped(path: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut buf);
    }
    let cut = buf.len() > MAX_OUTPUT;
    buf.truncate(MAX_OUTPUT);
    let mut s = String::from_utf8_lossy(&buf).into_owned();
    if cut {
        s.push_str("\n[vnio: output cut at 1 MiB]\n");
    }
    s
}

/// Runs one request (guest side). Output goes to files, not pipes, so a
/// command that leaves a background process behind does not hold the
/// answer back.
pub fn run_request(req: &Request, scratch: &Path) -> Output {
    let out_path = scratch.join("vnio-exec.out");
    let err_path = scratch.join("vnio-exec.err");
    let mut output = Output {
        id: req.id,
        code: None,
        timed_out: false,
        stdout: String::new(),
        stderr: String::new(),
    };
    let files = File::create(&out_path).and_then(|o| Ok((o, File::create(&err_path)?)));
    let (o, e) = match files {
        Ok(f) => f,
        Err(e) => {
            output.stderr = format!("vnio guest-serve: cannot create output files: {e}");
            return output;
        }
    };
    let Some((program, args)) = req.argv.split_first() else {
        output.stderr = "vnio guest-serve: empty command".into();
        return output;
    };
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(o)
        .stderr(e)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            output.stderr = format!("vnio guest-serve: cannot run {program}: {e}");
            output.code = Some(127);
            return output;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(req.timeout_ms);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                output.timed_out = true;
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    output.code = status.and_then(|s| s.code());
    output.stdout = read_capped(&out_path);
    output.stderr = read_capped(&err_path);
    output
}

/// The guest side: serve requests on the port forever. While no host is
/// connected, reads return end-of-file at once, so the loop sleeps.
pub fn serve() -> Result<()> {
    let port = loop {
        if let Some(p) = find_port(Path::new("/sys/class/virtio-ports")) {
            break p;
        }
        // virtio_console may still be probing.
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&port)
        .ctx(|| format!("opening {}", port.display()))?;
    let scratch = std::env::temp_dir();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match dev.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            // Host side not connected: whatever was half-sent is void.
            pending.clear();
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(req) = serde_json::from_slice::<Request>(&line) else {
                continue;
            };
            let out = run_request(&req, &scratch);
            let mut text = serde_json::to_string(&out).expect("output serialises");
            text.push('\n');
            let _ = dev.write_all(text.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(argv: &[&str], timeout_ms: u64) -> Request {
        Request {
            id: 7,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout_ms,
        }
    }

    #[test]
    fn a_request_returns_status_and_output() {
        let dir = std::env::temp_dir().join(format!("vnio-exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = run_request(
            &req(&["sh", "-c", "echo out; echo err >&2; exit 3"], 5000),
            &dir,
        );
        assert_eq!(out.id, 7);
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        // A background child keeps no pipe open: the answer comes at once.
        let t = Instant::now();
        let out = run_request(&req(&["sh", "-c", "sleep 5 & echo started"], 5000), &dir);
        assert!(out.success());
        assert!(t.elapsed() < Duration::from_secs(3));
        let out = run_request(&req(&["sleep", "5"], 100), &dir);
        assert!(out.timed_out && out.code.is_none());
        let out = run_request(&req(&["/nonexistent/program"], 100), &dir);
        assert_eq!(out.code, Some(127));
        assert!(out.stderr.contains("cannot run"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_port_is_found_by_name() {
        let sys = std::env::temp_dir().join(format!("vnio-vports-{}", std::process::id()));
        for (dev, name) in [("vport0p0", "other"), ("vport1p1", PORT_NAME)] {
            std::fs::create_dir_all(sys.join(dev)).unwrap();
            std::fs::write(sys.join(dev).join("name"), format!("{name}\n")).unwrap();
        }
        assert_eq!(find_port(&sys), Some(PathBuf::from("/dev/vport1p1")));
        std::fs::remove_dir_all(&sys).unwrap();
    }
}
