//! The serial console: QEMU serves it on a socket (and logs everything to
//! `serial.log`); `attach` relays it to this terminal, in raw mode, until
//! Ctrl-] is typed.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use nix::sys::termios::{self, SetArg};

use crate::error::{Context, Error, Result};
use crate::state::VmDir;

/// The byte that detaches (Ctrl-], as telnet and virsh console).
pub const DETACH: u8 = 0x1d;

/// The console output so far.
pub fn log(dir: &VmDir) -> Result<String> {
    let p = dir.serial_log();
    std::fs::read(&p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Missing(format!(
                    "no VM named {} (or it has not started)",
                    dir.name()
                ))
            } else {
                Error::Io {
                    what: format!("reading {}", p.display()),
                    source: e,
                }
            }
        })
}

/// Restores the terminal on drop.
struct RawMode {
    saved: Option<termios::Termios>,
}

impl RawMode {
    fn enter() -> Self {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(&stdin) else {
            // Not a terminal: relay as is.
            return Self { saved: None };
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        Self { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(s) = &self.saved {
            let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, s);
        }
    }
}

/// Relays the console to this terminal until Ctrl-] or the VM stops.
pub fn attach(dir: &VmDir) -> Result<()> {
    let sock = UnixStream::connect(dir.console()).map_err(|e| {
        Error::Guest(format!(
            "cannot reach VM {}'s console {}: {e} (is it running?)",
            dir.name(),
            dir.console().display()
        ))
    })?;
    let mut from_vm = sock
        .try_clone()
        .ctx(|| "duplicating the console socket".into())?;
    let _raw = RawMode::enter();
    let out = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdout = std::io::stdout();
        while let Ok(n) = from_vm.read(&mut buf) {
            if n == 0 || stdout.write_all(&buf[..n]).is_err() {
                break;
            }
            let _ = stdout.flush();
        }
    });
    let mut to_vm = sock;
    // A newline wakes the guest's shell prompt.
    let _ = to_vm.write_all(b"\n");
    let mut stdin = std::io::stdin();
    let mut buf = [0u8; 256];
    loop {
        if out.is_finished() {
            break;
        }
        let n = match stdin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(i) = buf[..n].iter().position(|b| *b == DETACH) {
            let _ = to_vm.write_all(&buf[..i]);
            break;
        }
        if to_vm.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to_vm.shutdown(std::net::Shutdown::Both);
    let _ = out.join();
    Ok(())
}
