//! LRO's rules and its in-place building, against a real split queue in
//! memfd-backed guest memory with a driver posting receive buffers (the
//! endpoint's ring): what the guest reaps is checked as its stack would
//! (GSO frames cut again, every piece's checksums, the byte stream).

use super::place::{Delivered, InPlace, MAX_CHAINS};
use super::*;
use crate::endpoint::ring::{DriverRing, RingLayout};
use crate::offload;
use crate::vhost_user::buffers::{self, Src};
use crate::vhost_user::chain::{Chain, Seg};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::protocol::MemoryRegion;
use crate::vhost_user::queue::{ActiveQueue, RingAddrs};
use crate::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};
use crate::wire::virtio_net::{VirtioNetHdr, HEADER_LEN};
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress};

const MSS: usize = 1000;

/// A guest's receive queue: the driver (posting buffers, reaping frames)
/// and the device side the aggregate is built on.
struct Guest {
    mem: Arc<GuestMem>,
    ring: DriverRing,
    q: ActiveQueue,
    chain: Chain,
    /// Each posted chain's buffers (address, length), by head.
    posted: Vec<Vec<(u64, u32)>>,
}

impl Guest {
    /// A queue of `size` entries with `chains` chains posted, chain `k`
    /// made of `shape(k).0` buffers of `buf` bytes, the last holding `shape(k).1`.
    fn new(size: u16, buf: u32, chains: usize, shape: impl Fn(usize) -> (usize, u32)) -> Self {
        let layout = RingLayout::at(0, size, buf);
        let bytes = layout.end().div_ceil(4096) * 4096;
        let f = crate::sys::memfd::create("lro-test", bytes).unwrap();
        let r = MemoryRegion {
            guest_phys_addr: 0,
            memory_size: bytes,
            userspace_addr: 0,
            mmap_offset: 0,
        };
        let mem = Arc::new(
            GuestMem::from_table(vec![(r, f)], crate::vhost_user::memory::DEFAULT_MAX_MEMORY)
                .unwrap(),
        );
        let mut ring = DriverRing::new(mem.mem(), layout, false).expect("ring inside memory");
        let mut posted = vec![Vec::new(); usize::from(size)];
        for k in 0..chains {
            let (n, last) = shape(k);
            assert!(last <= buf);
            let ids: Vec<u16> = (0..n).map(|_| ring.take().unwrap()).collect();
            ring.publish_chain(&ids, last, true);
            let mut lens = vec![buf; n];
            lens[n - 1] = last;
            posted[usize::from(ids[0])] = ids
                .iter()
                .zip(&lens)
                .map(|(&id, &l)| (layout.buffer(id).0, l))
                .collect();
        }
        let q = ActiveQueue::start(
            mem.clone(),
            size,
            RingAddrs {
                desc: GuestAddress(layout.desc),
                avail: GuestAddress(layout.avail),
                used: GuestAddress(layout.used),
            },
            0,
            false,
            None,
            true,
        )
        .unwrap();
        Self {
            mem,
            ring,
            q,
            chain: Chain::new(),
            posted,
        }
    }

    /// Uniform single-buffer chains.
    fn simple(chains: usize, buf: u32) -> Self {
        Self::new(256, buf, chains, |_| (1, buf))
    }

    /// Chains not yet taken by the device.
    fn available(&mut self) -> usize {
        let mut n = 0;
        while self.q.take(&mut self.chain, 32).unwrap() {
            n += 1;
        }
        self.q.untake(n);
        n
    }

    /// Delivers a frame as the data path does without LRO (one copy into
    /// popped chains); false when the ring has no room.
    fn deliver(&mut self, vhdr: &VirtioNetHdrRepr, frame: &[u8]) -> bool {
        let total = (HEADER_LEN + frame.len()) as u64;
        let mut segs: Vec<Seg> = Vec::new();
        let mut heads = Vec::new();
        let mut cap = 0;
        while cap < total {
            if !self.q.take(&mut self.chain, 1).unwrap() {
                self.q.untake(heads.len());
                return false;
            }
            segs.extend_from_slice(self.chain.segs());
            heads.push((self.chain.head(), self.chain.len()));
            cap += self.chain.len();
        }
        let mut h = *vhdr;
        h.num_buffers = heads.len() as u16;
        let mut hb = [0u8; HEADER_LEN];
        h.emit(&mut hb, HEADER_LEN).unwrap();
        let mut bytes = hb.to_vec();
        bytes.extend_from_slice(frame);
        assert_eq!(
            buffers::write(self.mem.mem(), &segs, 0, &bytes),
            bytes.len()
        );
        let mut left = total;
        for (head, cap) in heads {
            let n = left.min(cap);
            left -= n;
            self.q.add_used(head, n as u32).unwrap();
        }
        true
    }

    /// What the driver reaps: each frame's header and bytes.
    fn received(&mut self) -> Vec<(VirtioNetHdrRepr, Vec<u8>)> {
        self.q.flush();
        let mut out = Vec::new();
        while let Some((id, len)) = self.ring.reap() {
            let mut data = self.chain_bytes(id, len);
            let h = VirtioNetHdr::new_checked(&data[..HEADER_LEN], HEADER_LEN)
                .and_then(|v| VirtioNetHdrRepr::parse(&v))
                .unwrap();
            for _ in 1..h.num_buffers {
                let (id, len) = self.ring.reap().expect("num_buffers chains");
                data.extend(self.chain_bytes(id, len));
            }
            out.push((h, data[HEADER_LEN..].to_vec()));
        }
        out
    }

    fn chain_bytes(&mut self, id: u16, mut len: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for &(addr, l) in &self.posted[usize::from(id)] {
            let n = len.min(l);
            let mut b = vec![0u8; n as usize];
            self.mem
                .mem()
                .read_slice(&mut b, GuestAddress(addr))
                .unwrap();
            v.extend(b);
            len -= n;
        }
        assert_eq!(len, 0, "used length within the chain");
        v
    }
}

/// The data path's use of [`InPlace`]: each frame joins the aggregate or
/// ends it (and maybe starts the next); a frame neither takes is delivered
/// as it came. Returns the aggregates delivered (`None` for frames
/// delivered alone, or dropped for want of buffers).
fn feed(
    g: &mut Guest,
    agg: &mut InPlace,
    frames: &[(Vec<u8>, VirtioNetHdrRepr)],
    l3: usize,
) -> Vec<Option<Delivered>> {
    feed_tagged(g, agg, frames, l3, None)
}

fn feed_tagged(
    g: &mut Guest,
    agg: &mut InPlace,
    frames: &[(Vec<u8>, VirtioNetHdrRepr)],
    l3: usize,
    out_tag: Option<u16>,
) -> Vec<Option<Delivered>> {
    let mut out = Vec::new();
    for (f, h) in frames {
        let seg = Segment::parse(f, f.len(), l3, h);
        let src = Src::Local(f);
        if let Some(seg) = &seg {
            if agg.active()
                && agg
                    .append(&mut g.q, &mut g.chain, seg, f, h, &src, 0, 8)
                    .unwrap()
            {
                continue;
            }
        }
        if agg.active() {
            out.push(agg.finish(&mut g.q).unwrap());
        }
        let src_tag = l3 - 14;
        // The frame keeps its tag, or leaves with `out_tag` instead.
        let mut l2 = f[..12 + src_tag].to_vec();
        if let Some(v) = out_tag {
            l2.truncate(12);
            l2.extend_from_slice(&[0x81, 0, (v >> 8) as u8, v as u8]);
        }
        let started = seg.is_some_and(|seg| {
            agg.start(
                &mut g.q,
                &mut g.chain,
                &seg,
                f,
                h,
                &src,
                0,
                &l2,
                src_tag,
                HEADER_LEN,
                8,
            )
            .unwrap()
        });
        if !started {
            // Delivered alone with the egress L2 header.
            let mut o = l2.clone();
            o.extend_from_slice(&f[12 + src_tag..]);
            g.deliver(h, &o);
            out.push(None);
        }
    }
    if agg.active() {
        out.push(agg.finish(&mut g.q).unwrap());
    }
    out
}

fn stream(base: &TcpFrame, n: usize, mss: usize) -> Vec<TcpFrame> {
    let data = pattern(n * mss, 7);
    (0..n)
        .map(|i| TcpFrame {
            seq: base.seq.wrapping_add((i * mss) as u32),
            ip_id: base.ip_id.wrapping_add(i as u16),
            payload: data[i * mss..(i + 1) * mss].to_vec(),
            ..base.clone()
        })
        .collect()
}

fn plain(f: &TcpFrame) -> (Vec<u8>, VirtioNetHdrRepr) {
    (f.build(false), VirtioNetHdrRepr::default())
}

fn partial(f: &TcpFrame) -> (Vec<u8>, VirtioNetHdrRepr) {
    (
        f.build(true),
        VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            csum_start: f.l4() as u16,
            csum_offset: 16,
            ..Default::default()
        },
    )
}

/// The payload a receiver reassembles from what it reaped (GSO frames
/// cut again as a stack would), checking every piece's checksums.
fn reassemble(got: &[(VirtioNetHdrRepr, Vec<u8>)], l3: usize, v6: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut take = |s: &[u8]| {
        assert!(
            tcp_checksums_ok(s, l3, v6),
            "checksums of a delivered segment"
        );
        let hl = Segment::parse(s, s.len(), l3, &VirtioNetHdrRepr::default())
            .unwrap()
            .hdr_end;
        bytes.extend_from_slice(&s[hl..]);
    };
    for (h, f) in got {
        if h.gso_type != GSO_NONE {
            assert_eq!(h.flags, FLAG_NEEDS_CSUM);
            let mut seg = vec![0u8; 70_000];
            offload::segment(f, h, l3, false, &mut seg, |s, _| {
                take(s);
                true
            })
            .unwrap();
        } else if h.flags & FLAG_NEEDS_CSUM != 0 {
            let mut c = f.clone();
            offload::complete_checksum(&mut c, h).unwrap();
            take(&c);
        } else {
            take(f);
        }
    }
    bytes
}

fn counts(out: &[Option<Delivered>]) -> Vec<u32> {
    out.iter().map(|d| d.map_or(1, |d| d.segs)).collect()
}

mod end;
mod merge;
