//! Serving stream clients (the control socket, the metrics listener) so
//! that a client costs only itself: a bounded number at a time, each
//! request bounded in size, each client bounded in time.

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The bounds on a listener's clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Longest request line, in bytes (newline included).
    pub max_line: usize,
    /// Clients served at once; more are told so and closed.
    pub max_clients: usize,
    /// How long a client may take to send a whole request (from its
    /// connection or its previous request): idle and trickling clients go.
    pub idle: Duration,
    /// How long an answer may take to leave: a client that does not read goes.
    pub write: Duration,
    /// Event subscribers at once (`{"op":"events"}`), counted apart from
    /// `max_clients`: a subscriber holds no client's place.
    pub subscribers: usize,
    /// Events held for one subscriber that does not read; more are lost
    /// (and it is told how many).
    pub events_buffer: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            max_line: 64 << 10,
            max_clients: 16,
            idle: Duration::from_secs(60),
            write: Duration::from_secs(5),
            subscribers: 16,
            events_buffer: 1024,
        }
    }
}

/// How often a blocked read or write looks up to see whether the switch
/// stops or the client's time is up (the streams' timeouts are set to it).
pub const POLL: Duration = Duration::from_millis(100);

/// The threads serving one listener's clients: at most `max` at once,
/// finished ones joined as new ones come.
pub struct Clients {
    max: usize,
    threads: Vec<JoinHandle<()>>,
}

impl Clients {
    /// Room for `max` clients.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            threads: Vec::new(),
        }
    }

    /// Joins the finished threads; true when another client fits.
    pub fn has_room(&mut self) -> bool {
        let (done, live): (Vec<_>, Vec<_>) = self.threads.drain(..).partition(|t| t.is_finished());
        for t in done {
            let _ = t.join();
        }
        self.threads = live;
        self.threads.len() < self.max
    }

    /// Serves a client on a thread of its own.
    pub fn spawn(&mut self, name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let t = std::thread::Builder::new().name(name.into()).spawn(f)?;
        self.threads.push(t);
        Ok(())
    }

    /// Waits for every client thread (they see the stop flag within [`POLL`]).
    pub fn join_all(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Why no request line was read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The line went past the bound (the rest is not read).
    #[error("request longer than {0} bytes")]
    TooLong(usize),
    /// No whole request in time.
    #[error("no whole request within {0:?}")]
    Idle(Duration),
    /// The client closed its end.
    #[error("closed")]
    Closed,
    /// The switch stops.
    #[error("the switch stops")]
    Stopping,
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads one line (newline included, or what came before the client's
/// close) into `line`, holding at most `max` bytes of it: a longer line is
/// refused without being read further. The stream's read timeout must be
/// [`POLL`]: that is how `stop` and the `idle` bound are noticed.
pub fn read_line(
    r: &mut impl BufRead,
    line: &mut Vec<u8>,
    max: usize,
    idle: Duration,
    stop: &AtomicBool,
) -> Result<(), LineError> {
    let deadline = Instant::now() + idle;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(LineError::Stopping);
        }
        if Instant::now() >= deadline {
            return Err(LineError::Idle(idle));
        }
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if retry(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        if buf.is_empty() {
            return if line.is_empty() {
                Err(LineError::Closed)
            } else {
                Ok(())
            };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(LineError::TooLong(max));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            return Ok(());
        }
    }
}

/// Writes all of `buf` within `limit`, giving up early when `stop` is set.
/// The stream's write timeout must be [`POLL`] (a client that does not
/// read would otherwise hold the writer for as long as it likes).
pub fn write_within(
    w: &mut impl Write,
    mut buf: &[u8],
    limit: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let deadline = Instant::now() + limit;
    while !buf.is_empty() {
        match w.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if retry(&e) => {
                if stop.load(Ordering::SeqCst) {
                    return Err(io::Error::other("the switch stops"));
                }
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client does not read its answer",
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_bounded() {
        let stop = AtomicBool::new(false);
        let t = Duration::from_secs(1);
        let mut r = std::io::BufReader::with_capacity(4, &b"ab\ncdefgh\nij"[..]);
        let mut l = Vec::new();
        read_line(&mut r, &mut l, 8, t, &stop).unwrap();
        assert_eq!(l, b"ab\n");
        l.clear();
        assert!(matches!(
            read_line(&mut r, &mut l, 6, t, &stop),
            Err(LineError::TooLong(6))
        ));
        assert!(l.len() <= 6);
        let mut r = std::io::BufReader::new(&b"ij"[..]);
        l.clear();
        read_line(&mut r, &mut l, 8, t, &stop).unwrap();
        assert_eq!(l, b"ij");
        l.clear();
        assert!(matches!(
            read_line(&mut r, &mut l, 8, t, &stop),
            Err(LineError::Closed)
        ));
    }
}
