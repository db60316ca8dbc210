//! The underlay seen from this host during a migration: tcpdump on
//! vniom0 (every frame whole, none dropped), and a marker planted in a
//! guest's memory to look for in what it captured.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::Reaped;
use vnio_vm::state::VmDir;
use vnio_vm::testkit::run;

/// tcpdump on the underlay (this host's side of the machines' network),
/// every frame whole, into a file.
pub struct Capture {
    child: Reaped,
    file: PathBuf,
    rest: std::thread::JoinHandle<String>,
}

impl Capture {
    pub fn start(file: PathBuf) -> Capture {
        let mut child = Command::new("tcpdump")
            .args(["-i", "vniom0", "-n", "-s", "0", "-B", "131072", "-U", "-w"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump");
        // It says "listening on" once the socket is bound.
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(line.contains("listening on"), "tcpdump: {line}");
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        Capture {
            child: Reaped(child),
            file,
            rest,
        }
    }

    /// Stops it; the captured bytes. Every frame was kept (else the
    /// capture's silence would prove little).
    pub fn stop(mut self) -> Vec<u8> {
        let pid = nix::unistd::Pid::from_raw(self.child.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.0.wait();
        let said = self.rest.join().unwrap();
        println!("tcpdump: {}", said.trim().replace('\n', "; "));
        assert!(
            said.lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "tcpdump lost frames: {said}"
        );
        std::fs::read(&self.file).unwrap()
    }
}

/// How often `needle` occurs in `hay`.
pub fn occurrences(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Fills a file in the guest's memory (its root is a RAM file system)
/// with `marker`, 2^14 lines of it (hundreds of pages).
pub fn plant_marker(g: &VmDir, marker: &str) {
    run(
        g,
        &format!(
            "printf '%s\\n' {marker} > /tmp/marker; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do cat /tmp/marker /tmp/marker > /tmp/m2; mv /tmp/m2 /tmp/marker; done; wc -c < /tmp/marker"
        ),
    );
}
