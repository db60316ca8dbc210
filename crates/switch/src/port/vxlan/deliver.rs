//! Frames to a VXLAN port: each inner frame written into a send slot
//! behind room for the UDP and VXLAN headers, encapsulated there, and
//! queued to its VTEP (or every VTEP of the flood list) for the round's
//! `sendmmsg`.

use super::{flow_port, vtep_index, VxlanPort, MAX_BATCH, TX_HDR, TX_SLOTS};
use crate::datapath::{DeliverError, Frame};
use crate::stats::{DropReason, QueueStats};
use crate::sys::udp::{self, Outgoing};
use crate::vlan::Tagging;
use crate::wire::udp as wudp;
use crate::wire::vxlan::{self, VxlanRepr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;

impl VxlanPort {
    /// Encapsulates a classified frame to `to_vtep` (None: the flood
    /// list); its inner bytes on success. No virtio-net header: its
    /// offloads were done in software (the port takes none).
    #[inline]
    pub(crate) fn deliver_frame(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        to_vtep: Option<Ipv4Addr>,
        stats: &QueueStats,
    ) -> Result<usize, DeliverError> {
        let len = f.egress_l2(tagging).1 + f.rest().1 as usize;
        let fanout = if to_vtep.is_some() { 1 } else { self.fanout() };
        self.reserve(len, fanout, stats)
            .map_err(DeliverError::Drop)?;
        let (n, bytes) = crate::port::assemble(self.slot(), 0, f, tagging)?;
        self.commit(n, to_vtep);
        Ok(bytes)
    }

    /// Whether the port can take an inner frame of `len` bytes to
    /// `fanout` VTEPs now; a full batch is sent first. `Err`: the frame is
    /// dropped for that reason.
    pub fn reserve(
        &mut self,
        len: usize,
        fanout: usize,
        stats: &QueueStats,
    ) -> Result<(), DropReason> {
        if len > self.max_inner() {
            return Err(DropReason::TooBig);
        }
        if fanout == 0 {
            return Err(DropReason::NoRoute);
        }
        if self.tx_used == TX_SLOTS || self.nout + fanout > MAX_BATCH {
            self.flush(stats);
        }
        Ok(())
    }

    /// The next free slot's room for an inner frame (after
    /// [`VxlanPort::reserve`]).
    pub fn slot(&mut self) -> &mut [u8] {
        let at = self.tx_used * self.tx_slot;
        &mut self.tx[at + TX_HDR..at + self.tx_slot]
    }

    /// Encapsulates the `len` bytes written at the start of
    /// [`VxlanPort::slot`] and queues them to `to`, or to every remote in
    /// the flood list when `to` is `None`.
    pub fn commit(&mut self, len: usize, to: Option<Ipv4Addr>) {
        let at = self.tx_used * self.tx_slot;
        let s = &mut self.tx[at..at + TX_HDR + len];
        let sport = flow_port(&s[TX_HDR..]);
        let ulen = (TX_HDR + len) as u16;
        // The UDP checksum stays zero (§5: SHOULD be zero over IPv4; the
        // inner frame carries its own checksums).
        s[..wudp::HEADER_LEN].copy_from_slice(&[
            (sport >> 8) as u8,
            sport as u8,
            (self.opts.dstport >> 8) as u8,
            self.opts.dstport as u8,
            (ulen >> 8) as u8,
            ulen as u8,
            0,
            0,
        ]);
        let _ = VxlanRepr { vni: self.opts.vni }.emit(&mut s[wudp::HEADER_LEN..]);
        self.tx_used += 1;
        let (off, dlen, port) = if self.raw.is_some() {
            (at, TX_HDR + len, 0)
        } else {
            (
                at + wudp::HEADER_LEN,
                vxlan::HEADER_LEN + len,
                self.opts.dstport,
            )
        };
        let mut push = |ip: Ipv4Addr, v: usize| {
            self.out[self.nout] = Outgoing {
                off,
                len: dlen,
                to: SocketAddrV4::new(ip, port),
            };
            self.out_vtep[self.nout] = (v as u16, len as u32);
            self.nout += 1;
        };
        match to {
            Some(ip) => push(ip, vtep_index(&self.opts.remotes, ip)),
            None => {
                for (v, &ip) in self.opts.remotes.iter().enumerate() {
                    push(ip, v);
                }
            }
        }
    }

    /// Sends the queued datagrams (one `sendmmsg`, more only when the
    /// kernel refuses one: it is counted and the rest go on).
    pub fn flush(&mut self, stats: &QueueStats) {
        let fd = match &self.raw {
            Some(r) => r.as_raw_fd(),
            None => self.sock.as_raw_fd(),
        };
        let mut done = 0;
        while done < self.nout {
            match udp::send_batch(fd, &self.tx, &self.out[done..self.nout]) {
                Ok(n) => {
                    for &(v, len) in &self.out_vtep[done..done + n] {
                        let c = &mut self.counts_out[usize::from(v)];
                        c.packets += 1;
                        c.bytes += u64::from(len);
                    }
                    done += n.max(1);
                }
                Err(e) => {
                    stats.drop(match e.raw_os_error() {
                        Some(libc::EMSGSIZE) => DropReason::TooBig,
                        Some(libc::EAGAIN | libc::ENOBUFS) => DropReason::RingFull,
                        _ => DropReason::NoRoute,
                    });
                    done += 1;
                }
            }
        }
        self.nout = 0;
        self.tx_used = 0;
    }
}
