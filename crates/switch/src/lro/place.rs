//! An LRO aggregate built where the guest will read it: in receive chains
//! popped from its queue when the aggregate starts (and as it grows), so
//! each payload byte is copied once, from the sender's frame straight into
//! the guest's buffer, and checksummed on the way when the sender did not
//! vouch for it. When the aggregate ends, its headers (lengths, IPv4 header
//! checksum, window, PSH, the partial TCP checksum) and its virtio-net
//! header are patched in place, the chains it fills are returned used and
//! the ones it did not need are given back to the ring.
//!
//! The chains held by an aggregate are the last ones popped from the queue:
//! the data path ends the aggregate before anything else is delivered to
//! the port (and before its front-end's messages are handled), so giving
//! chains back ([`ActiveQueue::untake`]) returns exactly these. Every byte
//! goes through [`buffers`], which stops at anything the memory map does
//! not hold; the chains were validated when popped.

use super::{trusted, Lro, Segment};
use crate::vhost_user::buffers::{self, Src};
use crate::vhost_user::chain::{Chain, ChainError, Seg, MAX_SEGS};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::ActiveQueue;
use crate::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_NONE, HEADER_LEN};

/// Most receive chains one aggregate may span (as for any frame).
pub const MAX_CHAINS: usize = 64;

/// Receive chains popped for the aggregate.
#[derive(Debug, Clone)]
struct Plan {
    segs: [Seg; MAX_SEGS],
    nsegs: usize,
    /// Each chain's head, length, and where its buffers start in `segs`.
    heads: [(u16, u32, u8); MAX_CHAINS],
    nheads: usize,
    cap: u64,
}

impl Plan {
    fn new() -> Self {
        Self {
            segs: [Seg::default(); MAX_SEGS],
            nsegs: 0,
            heads: [(0, 0, 0); MAX_CHAINS],
            nheads: 0,
            cap: 0,
        }
    }

    fn clear(&mut self) {
        self.nsegs = 0;
        self.nheads = 0;
        self.cap = 0;
    }

    fn segs(&self) -> &[Seg] {
        &self.segs[..self.nsegs]
    }

    /// Takes chains until they hold `need` bytes (`want`: chains the
    /// caller expects to need, for the queue's burst of pops). False when
    /// the ring (or the limit on buffers per frame) runs out first; what was
    /// taken stays.
    fn reserve(
        &mut self,
        q: &mut ActiveQueue,
        chain: &mut Chain,
        need: u64,
        want: usize,
    ) -> Result<bool, ChainError> {
        while self.cap < need {
            if self.nheads == MAX_CHAINS || !q.take(chain, want)? {
                return Ok(false);
            }
            let n = chain.segs().len();
            if self.nsegs + n > MAX_SEGS {
                q.untake(1);
                return Ok(false);
            }
            self.segs[self.nsegs..self.nsegs + n].copy_from_slice(chain.segs());
            self.heads[self.nheads] = (chain.head(), chain.len() as u32, self.nsegs as u8);
            self.nsegs += n;
            self.nheads += 1;
            self.cap += chain.len();
        }
        Ok(true)
    }

    /// Gives back the last `n` chains.
    fn give_back(&mut self, q: &mut ActiveQueue, n: usize) {
        if n > 0 {
            q.untake(n);
        }
        for _ in 0..n {
            self.nheads -= 1;
            let (_, len, first) = self.heads[self.nheads];
            self.cap -= u64::from(len);
            self.nsegs = usize::from(first);
        }
    }
}

/// Why an aggregate could not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceError {
    /// The guest's ring is broken (the port must be reset).
    Hostile(ChainError),
    /// Memory under validated buffers went away (the memory table changed).
    Unmapped,
}

/// A delivered aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// Frame bytes (without the virtio-net header).
    pub len: usize,
    /// Segments in it.
    pub segs: u32,
}

/// One port's aggregate, in its guest's buffers.
#[derive(Debug, Clone)]
pub struct InPlace {
    rules: Lro,
    plan: Plan,
    /// The guest's virtio-net header length.
    hdr_len: usize,
    /// The source frame's MACs and tag.
    l2_src: usize,
    /// The MACs and tag it leaves with.
    l2_out: usize,
    /// Bytes written (virtio-net header room included).
    at: u64,
}

impl Default for InPlace {
    fn default() -> Self {
        Self::new()
    }
}

impl InPlace {
    /// No aggregate.
    pub fn new() -> Self {
        Self {
            rules: Lro::new(),
            plan: Plan::new(),
            hdr_len: HEADER_LEN,
            l2_src: 12,
            l2_out: 12,
            at: 0,
        }
    }

    /// True while an aggregate is being built.
    pub fn active(&self) -> bool {
        self.rules.active()
    }

    /// Segments in the current aggregate.
    pub fn segments(&self) -> u32 {
        self.rules.segments()
    }

    /// Receive chains the aggregate holds.
    pub fn chains(&self) -> usize {
        self.plan.nheads
    }

    /// Forgets the aggregate without touching the queue (it went away).
    pub fn abandon(&mut self) {
        self.rules.clear();
        self.plan.clear();
        self.at = 0;
    }

    /// Starts an aggregate with segment `seg` (its headers in `hdr`, its
    /// frame in `src` from `src_off`, MACs first, `src_tag_len` bytes of
    /// tag after them): the egress L2 header `l2` and the rest of the frame
    /// are written into chains taken from `q` after room for a virtio-net
    /// header of `hdr_len` bytes (`want`: chains the caller expects to take
    /// soon, which the queue pops ahead in one burst). False: not started
    /// (the segment cannot start one, the ring has no room, or its checksum
    /// fails); the chains are given back.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        q: &mut ActiveQueue,
        chain: &mut Chain,
        seg: &Segment,
        hdr: &[u8],
        vhdr: &VirtioNetHdrRepr,
        src: &Src<'_>,
        src_off: u64,
        l2: &[u8],
        src_tag_len: usize,
        hdr_len: usize,
        want: usize,
    ) -> Result<bool, ChainError> {
        self.abandon();
        let l2_src = 12 + src_tag_len;
        if !seg.can_start() || hdr.len() < seg.hdr_end || seg.l3 < l2_src + 2 {
            return Ok(false);
        }
        // Headers as read (and as the rules see them); the payload from the source.
        let headers = &hdr[l2_src..seg.hdr_end];
        let pay_at = (hdr_len + l2.len() + headers.len()) as u64;
        let need = pay_at + seg.payload as u64;
        if !self.plan.reserve(q, chain, need, want)? {
            let n = self.plan.nheads;
            self.plan.give_back(q, n);
            return Ok(false);
        }
        let ok = {
            let (mem, segs): (&GuestMem, _) = (q.mem(), self.plan.segs());
            let check = !trusted(vhdr);
            buffers::write(mem, segs, hdr_len as u64, l2) == l2.len()
                && buffers::write(mem, segs, (hdr_len + l2.len()) as u64, headers) == headers.len()
                && {
                    let (n, sum) = src.copy_to_guest(
                        src_off + seg.hdr_end as u64,
                        mem,
                        segs,
                        pay_at,
                        seg.payload as u64,
                        check,
                    );
                    n == seg.payload as u64 && (!check || seg.verifies(hdr, sum))
                }
        };
        if !ok || !self.rules.begin(seg, hdr, vhdr) {
            let n = self.plan.nheads;
            self.plan.give_back(q, n);
            return Ok(false);
        }
        self.hdr_len = hdr_len;
        self.l2_src = l2_src;
        self.l2_out = l2.len();
        self.at = need;
        Ok(true)
    }

    /// Appends segment `seg` (as for [`InPlace::start`]) when the rules
    /// accept it, the ring has room for its payload, and its checksum
    /// verifies. False: not merged; the caller ends the aggregate (which
    /// gives back any chain popped for the segment).
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        q: &mut ActiveQueue,
        chain: &mut Chain,
        seg: &Segment,
        hdr: &[u8],
        vhdr: &VirtioNetHdrRepr,
        src: &Src<'_>,
        src_off: u64,
        want: usize,
    ) -> Result<bool, ChainError> {
        if !self.rules.accepts(seg, hdr) {
            return Ok(false);
        }
        let need = self.at + seg.payload as u64;
        if !self.plan.reserve(q, chain, need, want)? {
            return Ok(false);
        }
        let check = !trusted(vhdr);
        let (n, sum) = src.copy_to_guest(
            src_off + seg.hdr_end as u64,
            &**q.mem(),
            self.plan.segs(),
            self.at,
            seg.payload as u64,
            check,
        );
        // A rejected payload stays beyond the aggregate's end, unused.
        if n != seg.payload as u64 || (check && !seg.verifies(hdr, sum)) {
            return Ok(false);
        }
        self.rules.extend(seg, hdr);
        self.at = need;
        Ok(true)
    }

    /// Ends the aggregate: its headers and virtio-net header written, the
    /// chains it fills returned used to `q` (published at the queue's next
    /// flush), the others given back. `None`: there was none.
    pub fn finish(&mut self, q: &mut ActiveQueue) -> Result<Option<Delivered>, PlaceError> {
        let (hdr_len, l2_src, l2_out, at) = (self.hdr_len, self.l2_src, self.l2_out, self.at);
        self.at = 0;
        let Some(f) = self.rules.finish() else {
            let n = self.plan.nheads;
            self.plan.give_back(q, n);
            return Ok(None);
        };
        // The chains holding the bytes; the rest were popped for a segment that did not join.
        let mut used = 0;
        let mut cap = 0u64;
        while used < self.plan.nheads && cap < at {
            cap += u64::from(self.plan.heads[used].1);
            used += 1;
        }
        let spare = self.plan.nheads - used;
        self.plan.give_back(q, spare);
        // Offsets move with the L2 header's length (a tag added or removed).
        let delta = l2_out as i32 - l2_src as i32;
        let mut vh = f.vhdr;
        if vh.flags & FLAG_NEEDS_CSUM != 0 {
            vh.csum_start = (i32::from(vh.csum_start) + delta) as u16;
        }
        if vh.gso_type != GSO_NONE {
            vh.hdr_len = (i32::from(vh.hdr_len) + delta) as u16;
        }
        vh.num_buffers = used as u16;
        let mut hb = [0u8; HEADER_LEN];
        let _ = vh.emit(&mut hb, hdr_len);
        let ok = {
            let (mem, segs): (&GuestMem, _) = (q.mem(), self.plan.segs());
            // Lengths, checksums, flags and window, over what the first segment wrote.
            let h = &f.hdr[l2_src..];
            buffers::write(mem, segs, 0, &hb[..hdr_len]) == hdr_len
                && (f.segs == 1
                    || buffers::write(mem, segs, (hdr_len + l2_out) as u64, h) == h.len())
        };
        if !ok {
            self.plan.give_back(q, used);
            return Err(PlaceError::Unmapped);
        }
        let mut left = at;
        let mut result = Ok(());
        for &(head, cap, _) in &self.plan.heads[..used] {
            let n = left.min(u64::from(cap));
            left -= n;
            result = result.and_then(|()| q.add_used(head, n as u32));
        }
        self.plan.clear();
        result.map_err(PlaceError::Hostile)?;
        Ok(Some(Delivered {
            len: (at as usize) - hdr_len,
            segs: f.segs,
        }))
    }
}
