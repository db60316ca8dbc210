//! The other workers: the rings frames and flushes take to the workers
//! that own other ports, and where those ports are. What comes back
//! through the rings is ingress (`ingress.rs`).

use super::{Frame, Slot};
use crate::forward::Decision;
use crate::mesh::{Kind, Peer, PeerSetup, Record, RemotePort, WorkerId, RECORD_HEADER};
use crate::stats::DropReason;
use crate::vlan::Tagging;
use crate::wire::virtio_net::VirtioNetHdrRepr;
use crate::PortId;

/// The other workers of the switch, and their ports.
#[derive(Default)]
pub(super) struct Peers {
    /// The rings to and from each other worker.
    pub(super) rings: Vec<Peer>,
    /// Ports other workers own.
    remote: Vec<RemotePort>,
}

impl Peers {
    /// Copies a frame from port `src` into the ring to worker `w` (it owns
    /// the destination, or has members of the VLAN when `dest` is `None`)
    /// with decision `d`. A full ring is a `ring_full` drop counted on the
    /// sending port (the destination's counters belong to the other worker).
    pub(super) fn push(
        &mut self,
        src: &Slot,
        w: WorkerId,
        dest: Option<PortId>,
        frame: &Frame<'_>,
        d: &Decision,
    ) -> bool {
        let Some(peer) = self.rings.iter_mut().find(|p| p.worker == w) else {
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

    /// Sends a frame from `src` for port `dest` to the worker owning it;
    /// false when no worker does.
    pub(super) fn push_to_owner(
        &mut self,
        src: &Slot,
        dest: PortId,
        frame: &Frame<'_>,
        d: &Decision,
    ) -> bool {
        match self.remote.iter().find(|r| r.id == dest).map(|r| r.worker) {
            Some(w) => self.push(src, w, Some(dest), frame, d),
            None => false,
        }
    }

    /// Floods a frame from `src` once to every other worker with a member
    /// of its VLAN; true when one took it.
    pub(super) fn flood(&mut self, src: &Slot, frame: &Frame<'_>, d: &Decision) -> bool {
        let mut sent = false;
        for k in 0..self.rings.len() {
            let w = self.rings[k].worker;
            if self
                .remote
                .iter()
                .any(|r| r.worker == w && r.vlan.egress(d.vid).is_some())
            {
                sent |= self.push(src, w, None, frame, d);
            }
        }
        sent
    }

    /// Tells every other worker to forget what it learned on `id`.
    pub(super) fn flush_port(&mut self, id: PortId) {
        for peer in &mut self.rings {
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

    /// Publishes this round's records to other workers, waking sleepers.
    pub(super) fn flush(&mut self) {
        for peer in &mut self.rings {
            if std::mem::take(&mut peer.pushed) {
                peer.tx.flush();
                peer.doorbell.ring();
            }
        }
    }

    /// True when another worker published records not yet taken.
    pub(super) fn pending(&mut self) -> bool {
        self.rings
            .iter_mut()
            .any(|p| p.rx.as_mut().is_some_and(|rx| rx.pending()))
    }

    /// Connects to another worker.
    pub(super) fn add(&mut self, p: PeerSetup) {
        self.rings.retain(|x| x.worker != p.worker);
        self.rings.push(p.into_peer());
    }

    /// Disconnects from a worker that stopped (its ports are gone or moved).
    pub(super) fn remove(&mut self, w: WorkerId) {
        self.rings.retain(|x| x.worker != w);
    }

    /// Learns (or updates) where another worker's port is.
    pub(super) fn set_remote(&mut self, r: RemotePort) {
        self.remote.retain(|x| x.id != r.id);
        self.remote.push(r);
    }

    /// How a frame on `vid` leaves another worker's port `p`, if it does.
    pub(super) fn egress(&self, p: PortId, vid: u16) -> Option<Tagging> {
        let r = self.remote.iter().find(|r| r.id == p)?;
        r.vlan.egress(vid)
    }

    /// True when another worker has a member of VLAN `vid`.
    pub(super) fn has_members(&self, vid: u16) -> bool {
        self.remote.iter().any(|r| r.vlan.egress(vid).is_some())
    }

    /// Forgets another worker's port (it left, or came here).
    pub(super) fn forget_remote(&mut self, id: PortId) {
        self.remote.retain(|x| x.id != id);
    }
}
