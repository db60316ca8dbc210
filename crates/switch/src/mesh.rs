//! How workers exchange frames: every pair of workers has one ring each
//! way (`sys::spsc`), so each ring has exactly one writer and one
//! reader and nothing on the way takes a lock or allocates.
//!
//! A worker owns its ports outright (their queues, their receive rings,
//! their counters). A frame whose destination another worker owns is copied
//! once into the ring to that worker, with what the destination needs to
//! deliver it (destination or flood, VLAN, the virtio-net offload metadata);
//! that worker copies it into its port's receive buffers, learning the
//! source address as it goes. So a guest-to-guest frame across workers
//! costs two copies instead of one, and no port's rings are ever touched by
//! two threads. A worker that sleeps is woken through its doorbell (an
//! eventfd written only when its `sleeping` flag is up: no system call per
//! frame while it polls; a dedicated worker never sleeps).

use crate::sys::spsc::{Consumer, Producer};
use crate::vlan::VlanMode;
use crate::wire::virtio_net::VirtioNetHdrRepr;
use crate::PortId;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Bytes of each ring between two workers (room for 15 GSO frames of
/// 64 KiB, or about 10 000 small ones).
pub const RING_BYTES: usize = 1 << 20;

/// Identifies a worker inside one switch.
pub type WorkerId = usize;

/// Wakes a worker that sleeps in epoll.
#[derive(Debug)]
pub struct Doorbell {
    /// Written when the worker sleeps; watched by its epoll.
    pub fd: EventFd,
    /// Up while the worker is (about to be) asleep.
    pub sleeping: AtomicBool,
}

impl Doorbell {
    /// A doorbell nobody rang.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            fd: EventFd::new(EFD_NONBLOCK)?,
            sleeping: AtomicBool::new(false),
        })
    }

    /// After publishing records for this worker: wakes it if it sleeps.
    pub fn ring(&self) {
        // Pairs with the fence in `Worker` between raising `sleeping` and
        // checking the rings: either it sees the records, or we see the flag.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            let _ = self.fd.write(1);
        }
    }
}

/// Another worker, as one worker sees it.
pub struct Peer {
    /// Its id.
    pub worker: WorkerId,
    /// Records to it.
    pub tx: Producer,
    /// Records from it (moved out while being drained).
    pub rx: Option<Consumer>,
    /// Its doorbell.
    pub doorbell: std::sync::Arc<Doorbell>,
    /// Records were committed to `tx` this round.
    pub pushed: bool,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("worker", &self.worker)
            .finish()
    }
}

/// What a worker needs to know of a port another worker owns.
#[derive(Debug, Clone)]
pub struct RemotePort {
    /// The port.
    pub id: PortId,
    /// Its VLAN membership (the egress decision is made at the source).
    pub vlan: VlanMode,
    /// Its worker.
    pub worker: WorkerId,
}

/// The ends of the two rings between a new pair of workers, as handed to one of them.
pub struct PeerSetup {
    /// The other worker.
    pub worker: WorkerId,
    /// Records to it.
    pub tx: Producer,
    /// Records from it.
    pub rx: Consumer,
    /// Its doorbell.
    pub doorbell: std::sync::Arc<Doorbell>,
}

impl std::fmt::Debug for PeerSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSetup")
            .field("worker", &self.worker)
            .finish()
    }
}

impl PeerSetup {
    /// Both workers' ends of the rings between `a` and `b`.
    pub fn pair(
        a: WorkerId,
        a_bell: std::sync::Arc<Doorbell>,
        b: WorkerId,
        b_bell: std::sync::Arc<Doorbell>,
    ) -> (PeerSetup, PeerSetup) {
        let (ab_tx, ab_rx) = crate::sys::spsc::channel(RING_BYTES);
        let (ba_tx, ba_rx) = crate::sys::spsc::channel(RING_BYTES);
        (
            // What `a` holds: its way to b, b's way to it.
            PeerSetup {
                worker: b,
                tx: ab_tx,
                rx: ba_rx,
                doorbell: b_bell,
            },
            PeerSetup {
                worker: a,
                tx: ba_tx,
                rx: ab_rx,
                doorbell: a_bell,
            },
        )
    }

    /// The peer as a worker keeps it.
    pub fn into_peer(self) -> Peer {
        Peer {
            worker: self.worker,
            tx: self.tx,
            rx: Some(self.rx),
            doorbell: self.doorbell,
            pushed: false,
        }
    }
}

/// Bytes of a record's header before the frame.
pub const RECORD_HEADER: usize = 32;

/// What a record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A frame to deliver.
    Frame,
    /// Forget the addresses learned on `src` (the port went away or was reset).
    Flush,
}

/// A record's header: everything about a frame except its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Frame or flush.
    pub kind: Kind,
    /// The destination port, or `None` to flood the VLAN.
    pub dest: Option<PortId>,
    /// The port the frame came in on.
    pub src: PortId,
    /// The frame's VLAN.
    pub vid: u16,
    /// The priority bits of the ingress tag.
    pub tci_pcp: u16,
    /// Bytes of 802.1Q tag after the MACs in the frame as carried (0 or 4).
    pub src_tag_len: u8,
    /// The frame's offload metadata.
    pub vhdr: VirtioNetHdrRepr,
    /// The source worker learned the frame's source address: so may the
    /// receiver (a port at its FDB limit there is at its limit everywhere).
    pub learn: bool,
}

impl Record {
    /// Writes the header into the first [`RECORD_HEADER`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = match self.kind {
            Kind::Frame => 1,
            Kind::Flush => 2,
        };
        b[1] = self.src_tag_len;
        b[2..4].copy_from_slice(&self.vid.to_le_bytes());
        b[4..8].copy_from_slice(&self.dest.map_or(0, |p| p.0).to_le_bytes());
        b[8..12].copy_from_slice(&self.src.0.to_le_bytes());
        b[12..14].copy_from_slice(&self.tci_pcp.to_le_bytes());
        b[14] = u8::from(self.learn);
        b[15] = 0;
        let _ = self.vhdr.emit(&mut b[16..26], 10);
        b[26..32].fill(0);
    }

    /// Reads a header written by [`Record::emit`] (records come from
    /// another worker of this process, never from a guest).
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < RECORD_HEADER {
            return None;
        }
        let kind = match b[0] {
            1 => Kind::Frame,
            2 => Kind::Flush,
            _ => return None,
        };
        let le16 = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let le32 = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let dest = le32(4);
        let h = crate::wire::virtio_net::VirtioNetHdr::new_checked(&b[16..26], 10).ok()?;
        Some(Self {
            kind,
            src_tag_len: b[1],
            vid: le16(2),
            dest: (dest != 0).then_some(PortId(dest)),
            src: PortId(le32(8)),
            tci_pcp: le16(12),
            vhdr: VirtioNetHdrRepr::parse(&h).ok()?,
            learn: b[14] != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_headers_round_trip() {
        let r = Record {
            kind: Kind::Frame,
            dest: Some(PortId(7)),
            src: PortId(3),
            vid: 42,
            tci_pcp: 0xa000,
            src_tag_len: 4,
            vhdr: VirtioNetHdrRepr {
                flags: 1,
                gso_type: 1,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
                num_buffers: 1,
            },
            learn: true,
        };
        let mut b = [0u8; RECORD_HEADER];
        r.emit(&mut b);
        assert_eq!(Record::parse(&b), Some(r));
        let flood = Record {
            kind: Kind::Flush,
            dest: None,
            learn: false,
            ..r
        };
        flood.emit(&mut b);
        assert_eq!(Record::parse(&b), Some(flood));
        assert_eq!(Record::parse(&b[..31]), None);
    }

    #[test]
    fn a_doorbell_rings_only_for_a_sleeper() {
        let d = Doorbell::new().unwrap();
        d.ring();
        assert!(d.fd.read().is_err(), "awake: no write");
        d.sleeping.store(true, Ordering::SeqCst);
        d.ring();
        assert_eq!(d.fd.read().unwrap(), 1);
    }
}
