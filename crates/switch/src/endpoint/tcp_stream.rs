//! A TCP stream between two poll-mode endpoints, made without a TCP stack
//! (the endpoint has none): what software LRO is measured with, in the
//! switch's LRO micro-benchmark (`examples/lro.rs`) and in the lab (a TCP
//! stream between two poll-mode hosts).
//!
//! A sending thread pushes the stream as 1448-byte segments in bursts of
//! 32 (a guest's transmit batches), with a TCP-like window: never more than
//! [`WINDOW`] bytes unconsumed by the receiver (it blocks until the
//! receiver catches up), so nothing overflows and nothing is lost. Its
//! segments are fully checksummed (a sender without offloads: the switch
//! verifies every segment it merges) or leave the checksum to offload
//! (`partial`: trusted). A receiving thread stands in for a guest that
//! negotiated TSO receive and mergeable buffers, doing what its driver and
//! stack do per byte and per frame: it sleeps on the call eventfd when its
//! ring is empty (an interrupt-driven NAPI poll, 64 frames per poll),
//! copies each frame out of its buffers, verifies the TCP checksum of every
//! frame the header does not vouch for, and checks that every byte is the
//! one sent at that stream offset, in order. It does not model the rest of
//! a kernel's per-frame work (socket buffers, GRO, TCP state), so it
//! understates what fewer frames save a real guest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Endpoint;
use crate::wire::checksum;
use crate::wire::testing::{pattern, TcpFrame};
use crate::wire::virtio_net::{VirtioNetHdrRepr, FLAG_DATA_VALID, FLAG_NEEDS_CSUM};
use crate::wire::EthernetAddress;

/// Segment payload bytes.
pub const MSS: usize = 1448;
/// Segments handed to the ring at once.
pub const BURST: usize = 32;
/// Receive and transmit queue entries the endpoints should have (QEMU's
/// largest `rx_queue_size`, what a throughput-minded guest is given).
pub const QUEUE: u16 = 1024;
/// Bytes in flight at most (sent, not yet consumed by the receiver): 768
/// segments (1.1 MB, a TCP window of a fast LAN flow), inside the
/// receiver's 1024 buffers of 2 KiB with or without LRO.
pub const WINDOW: u64 = 768 * MSS as u64;
const L3: usize = 14;
const L4: usize = L3 + 20;
const HDR_END: usize = L4 + 32;

/// Who sends to whom, and how.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    /// The sender's MAC.
    pub src: EthernetAddress,
    /// The receiver's MAC.
    pub dst: EthernetAddress,
    /// The sender leaves checksums to offload (else it computes them).
    pub partial: bool,
}

/// What one run of the stream did.
#[derive(Debug, Default, Clone)]
pub struct StreamStats {
    /// Frames the receiver got (aggregates count once).
    pub frames: u64,
    /// Payload bytes the receiver consumed.
    pub bytes: u64,
    /// Length of the run.
    pub secs: f64,
    /// CPU of the receiving thread, ns.
    pub rx_cpu_ns: u64,
    /// CPU of the sending thread, ns.
    pub tx_cpu_ns: u64,
    /// Frames whose checksum the receiver verified.
    pub verified: u64,
    /// Bytes not as sent, out of order, or failing their checksum (must be 0).
    pub bad: u64,
    /// Bytes skipped by a gap in sequence numbers (frames dropped).
    pub lost: u64,
    /// Receiver waits that ended without a call (stalls).
    pub rx_timeouts: u64,
}

/// Stream from `a` to `b` for `length` (or until `stop`), the sender and
/// the receiver each a thread of their own.
pub fn run(
    a: &mut Endpoint,
    b: &mut Endpoint,
    flow: &Flow,
    length: Duration,
    stop: &AtomicBool,
) -> StreamStats {
    let w = Window::default();
    let t0 = Instant::now();
    let wr = &w;
    let (tx_cpu, mut s) = std::thread::scope(|sc| {
        let tx = sc.spawn(move || send(a, wr, flow));
        let sender = tx.thread().clone();
        let rx = sc.spawn(move || receive(b, wr, &sender));
        let end = t0 + length;
        while Instant::now() < end && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10).min(end - Instant::now().min(end)));
        }
        w.stop.store(true, Ordering::Relaxed);
        (
            tx.join().expect("the sender panicked"),
            rx.join().expect("the receiver panicked"),
        )
    });
    s.secs = t0.elapsed().as_secs_f64();
    s.tx_cpu_ns = tx_cpu;
    s
}

/// CPU time of the calling thread, ns (schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn addressed(mut f: Vec<u8>, dst: EthernetAddress, src: EthernetAddress) -> Vec<u8> {
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f
}

/// RFC 1624: the checksum after a 32-bit field changed from `old` to `new`.
fn patch_csum(csum: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!csum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    checksum::fold(s)
}

/// What the sender and the receiver share.
#[derive(Default)]
struct Window {
    /// Stream bytes sent.
    sent: AtomicU64,
    /// Stream bytes the receiver consumed.
    acked: AtomicU64,
    /// The sender waits for `acked` to reach `wanted`.
    parked: AtomicBool,
    wanted: AtomicU64,
    stop: AtomicBool,
    /// The sender sent its last burst (`sent` is final).
    finished: AtomicBool,
}

/// The sender: one burst of segments built once; each burst moves their
/// sequence numbers on and patches their checksums.
fn send(a: &mut Endpoint, w: &Window, flow: &Flow) -> u64 {
    let partial = flow.partial;
    let data = pattern(BURST * MSS, 5);
    // A sender with checksum offload leaves the pseudo-header sum, which
    // does not depend on the sequence number.
    let hdr = if partial {
        VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            csum_start: L4 as u16,
            csum_offset: 16,
            ..Default::default()
        }
    } else {
        VirtioNetHdrRepr::default()
    };
    let mut frames: Vec<Vec<u8>> = (0..BURST)
        .map(|i| {
            let f = TcpFrame {
                seq: (i * MSS) as u32,
                ip_id: i as u16,
                options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
                payload: data[i * MSS..(i + 1) * MSS].to_vec(),
                ..Default::default()
            };
            addressed(f.build(partial), flow.dst, flow.src)
        })
        .collect();
    let t0 = thread_cpu_ns();
    let mut seq_off = 0u64;
    let burst_bytes = (BURST * MSS) as u64;
    while !w.stop.load(Ordering::Relaxed) {
        if seq_off + burst_bytes > w.acked.load(Ordering::Acquire) + WINDOW {
            // Blocks like a TCP sender waiting for window space (spinning
            // would take a CPU from the threads being measured); woken once
            // there is room for a whole burst, as a socket's write space.
            w.wanted
                .store(seq_off + burst_bytes - WINDOW, Ordering::SeqCst);
            w.parked.store(true, Ordering::SeqCst);
            if seq_off + burst_bytes > w.acked.load(Ordering::SeqCst) + WINDOW {
                std::thread::park_timeout(Duration::from_millis(5));
            }
            w.parked.store(false, Ordering::Relaxed);
            continue;
        }
        if seq_off > 0 {
            for f in &mut frames {
                let old = u32::from_be_bytes(f[L4 + 4..L4 + 8].try_into().unwrap());
                let new = old.wrapping_add(burst_bytes as u32);
                f[L4 + 4..L4 + 8].copy_from_slice(&new.to_be_bytes());
                if !partial {
                    let c = u16::from_be_bytes([f[L4 + 16], f[L4 + 17]]);
                    f[L4 + 16..L4 + 18].copy_from_slice(&patch_csum(c, old, new).to_be_bytes());
                }
            }
        }
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        // The burst goes whole even when told to stop: the receiver waits for all of it.
        let mut n = 0;
        while n < BURST {
            let k = a.send_burst_with(&hdr, &refs[n..]);
            if k == 0 {
                std::thread::yield_now();
            }
            n += k;
        }
        seq_off += burst_bytes;
        w.sent.store(seq_off, Ordering::Release);
    }
    w.finished.store(true, Ordering::Release);
    thread_cpu_ns() - t0
}

/// The receiver: NAPI-like polls of 64 frames, sleeping on the call
/// eventfd when the ring is empty; checks and consumes every frame.
fn receive(b: &mut Endpoint, w: &Window, sender: &std::thread::Thread) -> StreamStats {
    let data = pattern(BURST * MSS, 5);
    let period = data.len() as u64;
    let mut buf = vec![0u8; 70_000];
    let mut s = StreamStats::default();
    let t0 = thread_cpu_ns();
    let mut next = 0u64;
    let mut give_up = None;
    loop {
        let mut n = 0;
        while n < 64 {
            let Some((h, len)) = b.poll_recv_with(&mut buf) else {
                break;
            };
            n += 1;
            let f = &buf[..len];
            if len < HDR_END {
                s.bad += 1;
                continue;
            }
            s.frames += 1;
            if h.flags & (FLAG_NEEDS_CSUM | FLAG_DATA_VALID) == 0 {
                // The stack's software checksum: pseudo-header, TCP header and payload.
                s.verified += 1;
                let p = checksum::pseudo_header(
                    f[L3 + 12..L3 + 16].try_into().unwrap(),
                    f[L3 + 16..L3 + 20].try_into().unwrap(),
                    6,
                    (len - L4) as u16,
                );
                if checksum::fold(checksum::add(p, checksum::sum(&f[L4..]))) != 0 {
                    s.bad += 1;
                    continue;
                }
            }
            let seq = u32::from_be_bytes(f[L4 + 4..L4 + 8].try_into().unwrap());
            let payload = &f[HDR_END..];
            let gap = seq.wrapping_sub(next as u32);
            if gap != 0 {
                if gap >= 1 << 31 {
                    // Behind what was delivered already: reordered or duplicated.
                    s.bad += payload.len() as u64;
                    continue;
                }
                // Ahead: frames were lost (a full ring drops them).
                s.lost += u64::from(gap);
                next += u64::from(gap);
            }
            // Every byte as sent at its stream offset (the pattern repeats each burst).
            let mut off = (next % period) as usize;
            let mut p = payload;
            while !p.is_empty() {
                let k = p.len().min(data.len() - off);
                if p[..k] != data[off..off + k] {
                    s.bad += k as u64;
                }
                p = &p[k..];
                off = 0;
            }
            next += payload.len() as u64;
            s.bytes += payload.len() as u64;
            w.acked.store(next, Ordering::SeqCst);
            if w.parked.load(Ordering::SeqCst) && next >= w.wanted.load(Ordering::SeqCst) {
                sender.unpark();
            }
        }
        if n == 64 {
            continue;
        }
        if w.finished.load(Ordering::Acquire) {
            let done = next >= w.sent.load(Ordering::Acquire);
            // Lost frames at the very end never come: give up after a while.
            if done
                || *give_up.get_or_insert_with(|| Instant::now() + Duration::from_secs(1))
                    < Instant::now()
            {
                s.lost += w.sent.load(Ordering::Acquire).saturating_sub(next);
                break;
            }
        }
        if !b.wait(Duration::from_millis(5)).unwrap_or(true) {
            s.rx_timeouts += 1;
        }
    }
    s.rx_cpu_ns = thread_cpu_ns() - t0;
    s
}
