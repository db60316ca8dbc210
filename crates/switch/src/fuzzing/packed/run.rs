//! The harness's driver: the input's header starts a queue, then each
//! operation byte acts on the queue (as the data path, or as the hostile
//! driver) and the model checks the queue after it. The model and the
//! input are in `mod.rs`.

use super::{memory, near, Input, Model, Near, Pos, MEM_END, SIZES};
use crate::stats::QueueStats;
use crate::vhost_user::chain::ChainError;
use crate::vhost_user::log::{DirtyLog, LogBounds, QueueLog};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::{ActiveQueue, Burst, PackedFeatures, QueueError, RingAddrs, BURST};
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress};

/// A packed ring written from the input and driven as the data path
/// drives it.
///
/// Bytes 0-3: the ring's size (bits 0-3 of byte 0) and features (in_order,
/// a receive queue, indirect, event_idx: bits 4-7); the start position
/// (byte 1); whether descriptors are made likely valid (byte 2, bit 0) and
/// the dirty log is on from the start (bit 1); how many 32-byte pieces of
/// guest memory from address 0 (ring, event areas, indirect tables) the
/// next bytes fill (byte 3). Then operations, one byte each (and their
/// arguments): pop a burst or one chain, return an id popped or any id,
/// return a burst, give chains back, flush, signal, ask for kicks or not,
/// rewrite a descriptor or the driver's event area, log or not.
pub fn packed_ring(data: &[u8]) {
    let mut input = Input(data);
    let Some(h) = Header::read(&mut input) else {
        return;
    };
    let Some(mem) = memory() else { return };
    let nc = Near {
        size: h.size,
        writable: h.writable,
        image: 16 * h.chunks as u64,
    };
    fill_memory(&mem, &mut input, &h, &nc);
    let Some(mut run) = Run::start(mem, &h, nc) else {
        return;
    };
    while let Some(op) = input.byte() {
        if run.step(op, &mut input).is_none() {
            break;
        }
        run.m.check(&run.q);
    }
    run.stop();
}

/// The first 4 bytes of the input: the ring and how it starts.
struct Header {
    size: u16,
    features: PackedFeatures,
    writable: bool,
    /// Descriptors are made likely valid ([`near`]).
    near_mode: bool,
    start: Pos,
    /// 16-byte pieces of guest memory from address 0 the input fills.
    chunks: usize,
    /// The dirty log is on from the start.
    logging: bool,
}

impl Header {
    fn read(input: &mut Input) -> Option<Header> {
        let (b0, b1, b2, b3) = (input.byte()?, input.byte()?, input.byte()?, input.byte()?);
        let size = SIZES[usize::from(b0 & 15)];
        Some(Header {
            size,
            features: PackedFeatures {
                in_order: b0 & 0x10 != 0,
                event_idx: b0 & 0x80 != 0,
                indirect: b0 & 0x40 != 0,
            },
            writable: b0 & 0x20 != 0,
            near_mode: b2 & 1 != 0,
            start: Pos {
                idx: u16::from(b1 & 0x7f) % (size + 1),
                wrap: b1 & 0x80 != 0,
            },
            chunks: (usize::from(b3) * 2).min(input.0.len() / 16),
            logging: b2 & 2 != 0,
        })
    }
}

/// Writes the header's pieces of guest memory from the input (ring, event
/// areas, indirect tables).
fn fill_memory(mem: &GuestMem, input: &mut Input, h: &Header, nc: &Near) {
    for k in 0..h.chunks {
        let Some(mut d) = input.desc() else { break };
        if h.near_mode {
            let wrap = h.start.wrap == (k >= usize::from(h.start.idx));
            near(&mut d, nc, k as u64, wrap);
        }
        let _ = mem.mem().write_slice(&d, GuestAddress(16 * k as u64));
    }
}

/// A dirty log the queue can be told to use.
fn dirty_log() -> Option<Arc<DirtyLog>> {
    let f = crate::sys::memfd::create("fuzz-packed-log", 8).ok()?;
    let bounds = LogBounds {
        mem_end: MEM_END,
        left: 1 << 30,
    };
    DirtyLog::map(f, 8, 0, bounds).ok().map(Arc::new)
}

/// The queue under test, its model, and what the operations act on.
struct Run {
    mem: Arc<GuestMem>,
    q: ActiveQueue,
    m: Model,
    nc: Near,
    near_mode: bool,
    addrs: RingAddrs,
    log: Option<Arc<DirtyLog>>,
    logging: bool,
    stats: QueueStats,
    b: Burst,
}

impl Run {
    /// Starts the queue the header describes; None when it is refused as
    /// it must be (a ring of 0, a start position past the ring).
    fn start(mem: Arc<GuestMem>, h: &Header, nc: Near) -> Option<Run> {
        let (size, start) = (h.size, h.start);
        let ring_end = 16 * u64::from(size);
        let addrs = RingAddrs {
            desc: GuestAddress(0),
            avail: GuestAddress(ring_end),
            used: GuestAddress(ring_end + 4),
        };
        let started = ActiveQueue::start_packed(
            Arc::clone(&mem),
            size,
            addrs,
            u32::from(start.encode()),
            h.features,
            None,
            h.writable,
        );
        let q = match started {
            Ok(q) => q,
            Err(QueueError::Size(0)) if size == 0 => return None,
            Err(QueueError::Base(_)) if start.idx == size => return None,
            Err(e) => panic!("a ring of {size} in memory refused: {e}"),
        };
        let m = Model {
            size,
            writable: h.writable,
            indirect: h.features.indirect,
            batching: h.features.in_order && !h.writable,
            avail: start,
            used: start,
            in_flight: Vec::new(),
            tail: 0,
            noted: Vec::new(),
            rewritten: Vec::new(),
            batch_from: start,
            batch_id: 0,
        };
        let mut run = Run {
            mem,
            q,
            m,
            nc,
            near_mode: h.near_mode,
            addrs,
            log: dirty_log(),
            logging: h.logging,
            stats: QueueStats::default(),
            b: Burst::new(),
        };
        run.log_on();
        Some(run)
    }

    /// Tells the queue to log or not, as `logging` says.
    fn log_on(&mut self) {
        let on = self.logging;
        self.q
            .set_log(self.log.as_ref().filter(|_| on).map(|l| QueueLog {
                log: Arc::clone(l),
                used: 0,
            }));
    }

    /// Runs operation `op` (its arguments read from `input`); None when
    /// the input ran out before them.
    fn step(&mut self, op: u8, input: &mut Input) -> Option<()> {
        let arg = op >> 4;
        match op & 15 {
            0..=2 => self.pop(op, arg),
            3..=6 => self.give(op, arg, input)?,
            7..=12 => self.notify(op, arg),
            13 | 14 => self.driver_writes(op, input)?,
            _ => {
                self.logging = !self.logging;
                self.log_on();
            }
        }
        Some(())
    }

    /// Ops 0-2: pop a burst (op 1 reads transmit bursts ahead, as a
    /// worker does) or one chain.
    fn pop(&mut self, op: u8, arg: u8) {
        let (q, m, b, mem) = (&mut self.q, &mut self.m, &mut self.b, &self.mem);
        if op & 15 == 2 {
            match q.pop() {
                Ok(Some(c)) => {
                    m.popped(mem, c.head(), c.segs(), c.len());
                }
                Ok(None) => assert_eq!(q.has_available(), Ok(false)),
                Err(e) => assert_ne!(e, ChainError::Ring),
            }
            return;
        }
        b.set_read_ahead(op & 1 == 1);
        let r = q.pop_burst(b, usize::from(arg) * 3);
        assert!(b.len() <= (usize::from(arg) * 3).min(BURST));
        for k in 0..b.len() {
            let (id, segs, len) = b.chain(k);
            m.popped(mem, id, segs, len);
        }
        assert_ne!(r, Err(ChainError::Ring));
    }

    /// Ops 3-6: return an id popped or any id, return a burst, give
    /// chains back.
    fn give(&mut self, op: u8, arg: u8, input: &mut Input) -> Option<()> {
        let (q, m, b) = (&mut self.q, &mut self.m, &self.b);
        match op & 15 {
            3 | 4 => {
                let id = match m.in_flight.len() {
                    n if arg & 8 != 0 && n > 0 => m.in_flight[usize::from(arg & 7) % n].id,
                    _ => match input.u16()? {
                        id if self.near_mode => id % (m.size + 1),
                        id => id,
                    },
                };
                let len = u32::from(input.byte().unwrap_or(0)) * 37;
                assert_eq!(q.add_used(id, len), m.used(id, len));
            }
            5 => {
                let n = usize::from(arg) * 3;
                let mut want = Ok(());
                for k in 0..n.min(b.len()) {
                    want = m.used(b.chain(k).0, 0);
                    if want.is_err() {
                        break;
                    }
                }
                assert_eq!(q.add_used_burst(b, n), want);
            }
            _ => {
                let n = usize::from(arg) % (m.tail + 1);
                q.unpop_n(n as u16);
                if n > 0 {
                    let from = m.in_flight.len() - n;
                    m.avail = m.in_flight[from].at;
                    m.in_flight.truncate(from);
                    m.tail -= n;
                }
            }
        }
        Some(())
    }

    /// Ops 7-12: flush, signal, ask for kicks or not.
    fn notify(&mut self, op: u8, arg: u8) {
        let q = &mut self.q;
        match op & 15 {
            7 => {
                q.flush();
                self.m.flush(&self.mem);
            }
            8 => {
                q.signal(&self.stats);
                self.m.flush(&self.mem);
            }
            9 => {
                let _ = q.driver_wants_call();
                let _ = q.used_pending();
            }
            10 => {
                if !q.enable_notification() {
                    assert_eq!(q.has_available(), Ok(false));
                }
            }
            11 => q.disable_notification(),
            _ => q.set_event_idx(arg & 1 != 0),
        }
    }

    /// Ops 13 and 14: the driver rewrites a descriptor (any: in flight,
    /// used, not reached yet) or its event area.
    fn driver_writes(&mut self, op: u8, input: &mut Input) -> Option<()> {
        let mem = self.mem.mem();
        if op & 15 == 13 {
            let (slot, mut d) = (input.u16()?, input.desc()?);
            let slot = slot % self.m.size;
            if self.near_mode {
                let wrap = self.m.avail.wrap == (slot >= self.m.avail.idx);
                near(&mut d, &self.nc, u64::from(slot), wrap);
            }
            let _ = mem.write_slice(&d, GuestAddress(16 * u64::from(slot)));
            self.m.rewritten.push(slot);
        } else {
            let (off_wrap, flags) = (input.u16()?, input.u16()?);
            let _ = mem.write_obj(off_wrap, self.addrs.avail);
            let _ = mem.write_obj(flags, GuestAddress(self.addrs.avail.0 + 2));
        }
        Some(())
    }

    /// Stops the queue: the state it gives is where the model is.
    fn stop(mut self) {
        let state = self.q.stop_state();
        self.m.flush(&self.mem);
        let expect = u32::from(self.m.avail.encode()) | u32::from(self.m.used.encode()) << 16;
        assert_eq!(state, expect, "the vring state at the stop");
    }
}
