//! The fan-out of events (`crate::events`) to the control socket's
//! subscribers, on a control-plane thread of its own: every [`TICK`] it
//! drains the shared queue, numbers and renders each event once, and
//! appends the line to every subscriber's bounded buffer; then writes what
//! each subscriber's socket takes without blocking. A subscriber whose
//! buffer is full loses the event, counted; once there is room again it is
//! told how many (`{"lost":N}`) before its next line. Events the shared
//! queue itself dropped count as lost for every subscriber.
//!
//! Once a second, while anyone listens, it also looks at what no worker
//! reports: each uplink's carrier (`/sys/class/net/<if>/carrier`, read
//! here, not watched by netlink) and each port's drops per reason against
//! `drop_event_rate` (from the counters, as `stats` reads them).

use crate::daemon::WorkerHandle;
use crate::events::{Event, EventLine, EventQueue, Kind, Streamed};
use crate::stats::DropReason;
use crate::PortId;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the queue is drained (an event's latency to its subscribers).
pub const TICK: Duration = Duration::from_millis(20);
/// How often carriers and drop rates are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Bytes the kernel may hold per line a subscriber's buffer holds: its
/// socket's send buffer is sized from the buffer, so what a reader that
/// stops reading costs is bounded in the kernel too.
const SOCKET_BYTES_PER_LINE: usize = 256;
/// Most bytes taken from a subscriber's buffer for one write (what it may
/// hold beyond its buffer's lines while its socket is full).
const WRITE_BATCH: usize = 4 << 10;

/// The subscribers and the queue they are fed from.
pub struct Hub {
    queue: Arc<EventQueue>,
    subs: Mutex<Vec<Subscriber>>,
    /// Most subscribers at once.
    max: usize,
    /// Lines held per subscriber.
    buffer: usize,
}

/// One subscriber's connection and what is still to reach it.
struct Subscriber {
    s: UnixStream,
    /// Bytes being written (whole lines taken from `lines`).
    out: Vec<u8>,
    lines: VecDeque<Arc<str>>,
    /// Events not given to it since its last line.
    lost: u64,
    /// Its socket failed.
    gone: bool,
    /// When it subscribed (monotonic ns): older events are not its.
    since: u64,
}

impl Subscriber {
    /// Takes `line` if there is room (after writing what the socket takes
    /// now, so a reader that keeps up loses nothing to a burst).
    fn offer(&mut self, line: &Arc<str>, cap: usize) {
        if self.lines.len() >= cap && !self.write() {
            self.gone = true;
        }
        self.note_lost(cap);
        if self.lines.len() >= cap || self.lost > 0 {
            self.lost += 1;
        } else {
            self.lines.push_back(line.clone());
        }
    }

    /// Queues the `lost` line once there is room for it and one more.
    fn note_lost(&mut self, cap: usize) {
        if self.lost > 0 && self.lines.len() + 1 < cap {
            let l = render(&Streamed::Lost { lost: self.lost });
            self.lines.push_back(l);
            self.lost = 0;
        }
    }

    /// Writes what the socket takes now; false when the subscriber is gone.
    fn flush(&mut self, cap: usize) -> bool {
        self.note_lost(cap);
        if self.gone || !self.write() {
            return false;
        }
        // A subscriber has nothing to say: its end closing is what ends it.
        let mut b = [0u8; 512];
        match self.s.read(&mut b) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    /// Writes lines until the socket takes no more; false when it failed.
    fn write(&mut self) -> bool {
        loop {
            // Lines leave the buffer only once the last batch is written.
            if self.out.is_empty() {
                while self.out.len() < WRITE_BATCH {
                    match self.lines.pop_front() {
                        Some(l) => self.out.extend_from_slice(l.as_bytes()),
                        None => break,
                    }
                }
            }
            if self.out.is_empty() {
                break;
            }
            match self.s.write(&self.out) {
                Ok(0) => return false,
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }
}

fn render(s: &Streamed) -> Arc<str> {
    let mut l = serde_json::to_string(s).unwrap_or_default();
    l.push('\n');
    l.into()
}

/// What the once-a-second checks remember.
#[derive(Default)]
struct Checks {
    /// Uplinks' carriers last seen.
    carrier: HashMap<PortId, bool>,
    /// Drops per (port, reason) last seen, and whether above the rate.
    drops: HashMap<(u32, &'static str), (u64, bool)>,
    last: Option<Instant>,
}

impl Hub {
    /// A hub fed from `queue`: at most `max` subscribers, `buffer` lines each.
    pub fn new(queue: Arc<EventQueue>, max: usize, buffer: usize) -> Self {
        Self {
            queue,
            subs: Mutex::new(Vec::new()),
            max,
            buffer: buffer.max(2),
        }
    }

    /// Streams events to `s` from now on, after the line `ok` (the
    /// answer to its request); refused when `max` subscribers listen.
    pub fn subscribe(&self, s: UnixStream, ok: Vec<u8>) -> Result<(), String> {
        let mut subs = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        if subs.len() >= self.max {
            return Err(format!(
                "too many event subscribers ({} at once); try again later",
                self.max
            ));
        }
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        let _ = crate::sys::events_io::set_send_buffer(&s, self.buffer * SOCKET_BYTES_PER_LINE);
        subs.push(Subscriber {
            s,
            out: ok,
            lines: VecDeque::new(),
            lost: 0,
            gone: false,
            since: crate::sys::events_io::monotonic_ns(),
        });
        Ok(())
    }

    /// Subscribers now.
    pub fn subscribers(&self) -> usize {
        self.subs.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Fans events out until `stop`; `drop_rate`: drops of one reason per
    /// second on a port that raise an event (0: none).
    pub fn run(&self, handle: &WorkerHandle, stop: &AtomicBool, drop_rate: u64) {
        let mut seq = 0u64;
        let mut dropped_seen = 0u64;
        let mut checks = Checks::default();
        // Each event's line, with when it happened.
        let mut lines: Vec<(u64, Arc<str>)> = Vec::new();
        let mut found: VecDeque<Event> = VecDeque::new();
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
            if self.subscribers() > 0 {
                checks.run(handle, drop_rate, &mut found);
            }
            lines.clear();
            while let Some(e) = self.queue.pop().or_else(|| found.pop_front()) {
                seq += 1;
                let l = render(&Streamed::Event(EventLine::new(seq, &e)));
                lines.push((e.mono_ns, l));
            }
            let d = self.queue.dropped();
            let lost = d - dropped_seen;
            dropped_seen = d;
            let mut subs = self.subs.lock().unwrap_or_else(|p| p.into_inner());
            subs.retain_mut(|s| {
                s.lost += lost;
                for (at, l) in &lines {
                    if *at >= s.since {
                        s.offer(l, self.buffer);
                    }
                }
                s.flush(self.buffer)
            });
        }
    }
}

impl Checks {
    /// Carriers and drop rates, at most once per [`CHECK_EVERY`].
    fn run(&mut self, handle: &WorkerHandle, drop_rate: u64, out: &mut VecDeque<Event>) {
        let now = Instant::now();
        let elapsed = match self.last {
            Some(t) if now - t < CHECK_EVERY => return,
            Some(t) => now - t,
            None => CHECK_EVERY,
        };
        self.last = Some(now);
        let Ok(ports) = handle.list() else { return };
        for p in &ports {
            let id = PortId(p.id);
            if p.kind == "uplink" {
                if let Some(ifname) = &p.socket {
                    let up = carrier(ifname);
                    if self.carrier.insert(id, up).is_some_and(|was| was != up) {
                        out.push_back(Event::now(id, &p.name, Kind::Link { up }));
                    }
                }
            }
            if drop_rate == 0 {
                continue;
            }
            for r in DropReason::ALL {
                let n = count(&p.stats.tx.drops, r) + count(&p.stats.rx.drops, r);
                let key = (p.id, r.name());
                let Some((before, above)) = self.drops.insert(key, (n, false)) else {
                    continue;
                };
                let per_sec =
                    (n.saturating_sub(before) as f64 / elapsed.as_secs_f64()).round() as u64;
                let now_above = per_sec > drop_rate;
                self.drops.insert(key, (n, now_above));
                if now_above != above {
                    out.push_back(Event::now(
                        id,
                        &p.name,
                        Kind::Drops {
                            reason: r,
                            per_sec,
                            threshold: drop_rate,
                            above: now_above,
                        },
                    ));
                }
            }
        }
        // Ports that went are forgotten.
        self.carrier
            .retain(|id, _| ports.iter().any(|p| p.id == id.0));
        self.drops
            .retain(|(id, _), _| ports.iter().any(|p| p.id == *id));
    }
}

/// A reason's count in a snapshot's drops.
fn count(drops: &std::collections::BTreeMap<String, u64>, r: DropReason) -> u64 {
    drops.get(r.name()).copied().unwrap_or(0)
}

/// An interface's carrier; an interface that is down (the file then
/// cannot be read) or gone has none.
fn carrier(ifname: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/carrier"))
        .is_ok_and(|s| s.trim() == "1")
}
