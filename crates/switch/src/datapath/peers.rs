//! Traffic between workers: frames and flushes through the rings to the
//! workers that own other ports.

use super::{head_of, Datapath, Frame, FrameCtx};
use crate::mesh::{Kind, PeerSetup, Record, RemotePort, WorkerId, RECORD_HEADER};
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::wire::virtio_net::VirtioNetHdrRepr;
use crate::PortId;
use std::time::Instant;

impl Datapath {
    /// Copies a frame from slot `i` into the ring to worker `w` (it owns the
    /// destination, or has members of the VLAN when `dest` is `None`) with
    /// decision `d`. A full ring is a `ring_full` drop counted on the
    /// sending port (the destination's counters belong to the other worker).
    pub(super) fn push_remote(
        &mut self,
        i: usize,
        w: WorkerId,
        dest: Option<PortId>,
        frame: &Frame<'_>,
        d: &crate::forward::Decision,
    ) -> bool {
        let Some(src) = self.slots[i].as_ref() else {
            return false;
        };
        let Some(peer) = self.peers.iter_mut().find(|p| p.worker == w) else {
            return false;
        };
        let len = RECORD_HEADER + frame.frame_len as usize;
        let Some(buf) = peer.tx.reserve(len) else {
            src.stats.tx.drop(DropReason::RingFull);
            return false;
        };
        Record {
            kind: Kind::Frame,
            dest,
            src: src.id,
            vid: d.vid,
            tci_pcp: frame.tci_pcp,
            src_tag_len: frame.src_tag_len as u8,
            vhdr: frame.vhdr,
            learn: d.learned.is_learned(),
        }
        .emit(&mut buf[..RECORD_HEADER]);
        if frame
            .src
            .read(frame.hdr_len as u64, &mut buf[RECORD_HEADER..])
            != len - RECORD_HEADER
        {
            src.stats.tx.drop(DropReason::Malformed);
            return false;
        }
        peer.tx.commit(len);
        peer.pushed = true;
        true
    }

    /// Tells every other worker to forget what it learned on `id`.
    pub(super) fn flush_remote(&mut self, id: PortId) {
        for peer in &mut self.peers {
            if let Some(buf) = peer.tx.reserve(RECORD_HEADER) {
                Record {
                    kind: Kind::Flush,
                    dest: None,
                    src: id,
                    vid: 0,
                    tci_pcp: 0,
                    src_tag_len: 0,
                    vhdr: VirtioNetHdrRepr::default(),
                    learn: false,
                }
                .emit(buf);
                peer.tx.commit(RECORD_HEADER);
                peer.pushed = true;
            }
        }
    }

    /// Takes up to `budget` records from each other worker and delivers
    /// them to this worker's ports. Returns the records taken.
    pub(super) fn poll_peers(&mut self, now: Instant, budget: usize) -> usize {
        let mut work = 0;
        for k in 0..self.peers.len() {
            let Some(mut rx) = self.peers[k].rx.take() else {
                continue;
            };
            let mut n = 0;
            while n < budget {
                let Some(rec) = rx.peek() else { break };
                self.on_record(rec, now);
                rx.pop();
                n += 1;
            }
            if n > 0 {
                rx.release();
            }
            work += n;
            self.peers[k].rx = Some(rx);
        }
        work
    }

    pub(super) fn on_record(&mut self, rec: &[u8], now: Instant) {
        let Some(r) = Record::parse(rec) else { return };
        if r.kind == Kind::Flush {
            self.fdb.flush_port(r.src);
            return;
        }
        let bytes = &rec[RECORD_HEADER..];
        if bytes.len() < 14 + usize::from(r.src_tag_len) {
            return;
        }
        // The port's limit and the rule for moves were applied where it
        // lives: learn what was learned there (only the table's capacity here).
        if r.learn {
            self.fdb.learn_told(
                r.vid,
                crate::wire::EthernetAddress::from_bytes(&bytes[6..12]),
                r.src,
                now,
            );
        }
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&bytes[..12]);
        let frame = Frame {
            src: Src::Local(bytes),
            head: head_of(bytes),
            hdr_len: 0,
            vhdr: r.vhdr,
            macs,
            src_tag_len: u64::from(r.src_tag_len),
            tci_pcp: r.tci_pcp,
            frame_len: bytes.len() as u64,
        };
        for j in 0..self.slots.len() {
            let Some(s) = self.slots[j].as_ref() else {
                continue;
            };
            // A flood reached the wire through the uplink's own worker.
            let wanted = match r.dest {
                Some(p) => s.id == p,
                None => s.id != r.src && !s.port.is_lent(),
            };
            if !wanted {
                continue;
            }
            if let Some(tagging) = s.policy.vlan.egress(r.vid) {
                let mut cx = FrameCtx::new(FrameCtx::REMOTE, now);
                if r.dest.is_some() {
                    let dst = crate::wire::EthernetAddress::from_bytes(&bytes[..6]);
                    cx.to_vtep = self.vtep_of(j, r.vid, dst, now);
                }
                self.deliver_to(j, &frame, tagging, cx);
            }
            if r.dest.is_some() {
                return;
            }
        }
        // No such port here: a pair lent to this worker whose frames came
        // before it did (taken from the inbox, the frame is delivered).
        if r.dest.is_some() && self.take_held_pairs() {
            self.on_record(rec, now);
        }
    }

    /// Publishes this round's records to other workers, waking sleepers.
    pub(super) fn flush_peers(&mut self) {
        for peer in &mut self.peers {
            if std::mem::take(&mut peer.pushed) {
                peer.tx.flush();
                peer.doorbell.ring();
            }
        }
    }

    /// True when another worker published records not yet taken.
    pub fn peers_pending(&mut self) -> bool {
        self.peers
            .iter_mut()
            .any(|p| p.rx.as_mut().is_some_and(|rx| rx.pending()))
    }

    /// Connects to another worker.
    pub fn add_peer(&mut self, p: PeerSetup) {
        self.peers.retain(|x| x.worker != p.worker);
        self.peers.push(p.into_peer());
    }

    /// Disconnects from a worker that stopped (its ports are gone or moved).
    pub fn remove_peer(&mut self, w: WorkerId) {
        self.peers.retain(|x| x.worker != w);
    }

    /// Learns (or updates) where another worker's port is.
    pub fn set_remote(&mut self, r: RemotePort) {
        self.topo_gen += 1;
        self.remote.retain(|x| x.id != r.id);
        self.remote.push(r);
    }

    /// Forgets another worker's port.
    pub fn remove_remote(&mut self, id: PortId) {
        self.topo_gen += 1;
        self.remote.retain(|x| x.id != id);
        self.fdb.flush_port(id);
    }

    /// The VTEP behind VXLAN slot `j` that `dst` on `vid` was learned
    /// behind (`None`: not a VXLAN port, or unknown there: flood its remotes).
    pub(super) fn vtep_of(
        &self,
        j: usize,
        vid: u16,
        dst: crate::wire::EthernetAddress,
        now: Instant,
    ) -> Option<std::net::Ipv4Addr> {
        let s = self.slots[j].as_ref()?;
        s.port.vxlan()?;
        self.fdb.remote(vid, dst, now)
    }
}
