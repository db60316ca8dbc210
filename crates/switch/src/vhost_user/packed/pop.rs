//! Popping a packed ring's chains: one at a time (a chain of NEXT
//! descriptors or an indirect table, each buffer checked as a split
//! ring's), or a burst at a time, whose lines of four single-buffer chains
//! are read and checked at once; and giving back chains popped and not
//! used. Kept apart from the rest of the ring (`mod.rs`: starting,
//! returning used chains, the dirty log) so that each file fits in a
//! head; they share the positions and the in-flight bookkeeping.

use super::{Desc, PackedRing, Pos, F_AVAIL, F_INDIRECT, F_NEXT, F_USED};
use crate::vhost_user::chain::{self, ChainError, Seg, MAX_SEGS};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::{Burst, BURST};
use vm_memory::{Bytes, GuestAddress};

impl PackedRing {
    /// Pops the next available chain's buffers into `segs`: (buffer id,
    /// buffers, total length), None when nothing is available.
    pub(in crate::vhost_user) fn pop_segs(
        &mut self,
        mem: &GuestMem,
        segs: &mut [Seg; MAX_SEGS],
    ) -> Result<Option<(u16, usize, u64)>, ChainError> {
        if !self.has_available()? {
            return Ok(None);
        }
        let mut at = self.avail;
        let (mut n, mut total, mut count) = (0usize, 0u64, 0u16);
        let in_memory = |addr, len| mem.contains(addr, len);
        let id = loop {
            if count == self.size {
                // Every slot of the ring says NEXT: nothing ends the chain.
                return Err(ChainError::Loop);
            }
            count += 1;
            let d = self.descriptor(at.idx)?;
            at.advance(1, self.size);
            if d.flags & F_INDIRECT != 0 {
                if !self.features.indirect {
                    return Err(ChainError::Indirect);
                }
                if count != 1 || d.flags & F_NEXT != 0 {
                    return Err(ChainError::IndirectTable(d.len));
                }
                (n, total) = indirect(mem, d, segs, self.writable)?;
                break d.id;
            }
            if n == MAX_SEGS {
                return Err(ChainError::TooLong);
            }
            segs[n] = chain::check_buffer(d.addr, d.len, d.flags, self.writable, in_memory)?;
            n += 1;
            total += u64::from(d.len);
            if total > u64::from(u32::MAX) {
                return Err(ChainError::TooLarge);
            }
            if d.flags & F_NEXT == 0 {
                break d.id;
            }
        };
        let in_flight = self.in_flight();
        let slot = self
            .slots
            .get_mut(usize::from(id))
            .ok_or(ChainError::IndexOutOfRange(id))?;
        // An id already in flight: the driver offered slots it does not
        // own (the split ring's index jump).
        if *slot != 0 || in_flight + u32::from(count) > u32::from(self.size) {
            return Err(ChainError::IndexJump);
        }
        *slot = count;
        self.note_pop(self.avail, id);
        self.avail = at;
        Ok(Some((id, n, total)))
    }

    /// Slots popped and not yet returned.
    fn in_flight(&self) -> u32 {
        let (avail, used) = (self.avail.linear(self.size), self.used.linear(self.size));
        if avail >= used {
            avail - used
        } else {
            avail + 2 * u32::from(self.size) - used
        }
    }

    /// Records a popped chain's first slot and id, to give it back.
    #[inline]
    fn note_pop(&mut self, began: Pos, id: u16) {
        self.began[usize::from(self.pops)] = (began, id);
        self.pops += 1;
        if self.pops == self.size {
            self.pops = 0;
        }
    }

    /// Pops the next four slots as four chains of one buffer each, into
    /// burst `b` from chain `k` and buffer `at`, when they all are: one
    /// line of the ring read at once, as DPDK's vhost reads its packed
    /// rings: one bounds check for the line, the four flags tested together
    /// against the wrap counter ([`RingMem::load_four`]), and one in-flight
    /// check for the four ([`PackedRing::mark_four`]). (Four loads of the
    /// flags, each checked on its own, then four of the descriptors, were a
    /// large share of the packed ring's work.) Pops nothing and returns
    /// false otherwise (a chain of several slots, one not available yet, a
    /// fault): the one-by-one path then takes them, and finds a fault at
    /// the chain that has it.
    ///
    /// [`RingMem::load_four`]: crate::sys::ring_mem::RingMem::load_four
    fn pop_four(&mut self, mem: &GuestMem, b: &mut Burst, k: usize, at: usize) -> bool {
        let first = self.avail.idx;
        if first % 4 != 0
            || u32::from(first) + 4 > u32::from(self.size)
            || self.in_flight() + 4 > u32::from(self.size)
        {
            return false;
        }
        // Each of the four available and alone in its chain: its AVAIL and
        // USED bits as the wrap counter wants, NEXT and INDIRECT clear.
        let want = if self.avail.wrap { F_AVAIL } else { F_USED };
        let mask = F_AVAIL | F_USED | F_NEXT | F_INDIRECT;
        let ready = |f: [u16; 4]| f.iter().fold(0, |acc, &x| acc | ((x & mask) ^ want)) == 0;
        let Some(line) = self.desc.load_four(usize::from(first), ready) else {
            return false;
        };
        // Checked, and a receive buffer's first lines asked for, with one
        // lookup (a transmit buffer's when the worker reads ahead).
        let w = self.writable;
        let hint = w || b.read_ahead;
        let in_memory = |addr, len| mem.contains_prefetch(addr, len, hint, w);
        // The burst's four places of each kind, each slice checked once.
        let (Some(heads), Some(segs), Some(lens), Some(ends)) = (
            b.heads.get_mut(k..k + 4),
            b.segs.get_mut(at..at + 4),
            b.lens.get_mut(k..k + 4),
            b.at.get_mut(k + 1..k + 5),
        ) else {
            return false;
        };
        let mut ids = [0u16; 4];
        for (j, &(lo, hi)) in line.iter().enumerate() {
            let d = Desc::from_halves(lo, hi);
            // Read again behind the fence: the driver may have changed them.
            if d.flags & (F_NEXT | F_INDIRECT) != 0 || usize::from(d.id) >= self.slots.len() {
                return false;
            }
            let Ok(seg) = chain::check_buffer(d.addr, d.len, d.flags, self.writable, in_memory)
            else {
                return false;
            };
            // Written into the burst now, counted only once the four are
            // marked (a refused line leaves `b.n` where it was).
            ids[j] = d.id;
            heads[j] = d.id;
            segs[j] = seg;
            lens[j] = u64::from(seg.len);
            ends[j] = (at + j + 1) as u16;
        }
        if !self.mark_four(&ids) {
            return false;
        }
        // The four share the wrap counter: they end at the ring's end at
        // the latest.
        let wrap = self.avail.wrap;
        let pos = |j: u16| Pos {
            idx: first + j,
            wrap,
        };
        let from = usize::from(self.pops);
        match self.began.get_mut(from..from + 4) {
            // The four in the pop log at once, when they do not wrap it.
            Some(log) => {
                for (j, (e, &id)) in log.iter_mut().zip(&ids).enumerate() {
                    *e = (pos(j as u16), id);
                }
                self.pops += 4;
                if self.pops == self.size {
                    self.pops = 0;
                }
            }
            None => {
                for (j, &id) in ids.iter().enumerate() {
                    self.note_pop(pos(j as u16), id);
                }
            }
        }
        self.avail.advance(4, self.size);
        true
    }

    /// Marks the four ids (each below the size) in flight, one slot each:
    /// true, or false with nothing marked when one of them already was, or
    /// comes twice among the four. Marked first and tested once for the
    /// four, with one advance of the position for them in `pop_four`: a
    /// test before marking each id, a search of the ids before it and an
    /// advance per id cost the packed ring noticeably more per frame
    /// (`examples/ring_cost` measures it; docs/results.md).
    #[inline(always)]
    fn mark_four(&mut self, ids: &[u16; 4]) -> bool {
        let mut was = [0u16; 4];
        for j in 0..4 {
            let slot = &mut self.slots[usize::from(ids[j])];
            was[j] = *slot;
            *slot = 1;
        }
        if was == [0; 4] {
            return true;
        }
        // Undone last first: an id that came twice gets back its first value.
        for j in (0..4).rev() {
            self.slots[usize::from(ids[j])] = was[j];
        }
        false
    }

    pub(in crate::vhost_user) fn pop_burst(
        &mut self,
        mem: &GuestMem,
        b: &mut Burst,
        max: usize,
    ) -> Result<(), ChainError> {
        b.n = 0;
        b.pending = 0;
        b.at[0] = 0;
        let mut used = 0;
        let want = max.min(BURST);
        let mut k = 0;
        while k < want {
            if k + 4 <= want && used + 4 <= b.segs.len() && self.pop_four(mem, b, k, used) {
                // The next line of descriptors (the buffers were asked for
                // as they were checked).
                self.desc.prefetch(usize::from(self.avail.idx) * 16);
                used += 4;
                k += 4;
                b.n = k;
                b.pending = k as u16;
                continue;
            }
            let Some(room) = b.segs.get_mut(used..used + MAX_SEGS) else {
                break;
            };
            let room: &mut [Seg; MAX_SEGS] = room.try_into().map_err(|_| ChainError::TooLong)?;
            let Some((id, cnt, len)) = self.pop_segs(mem, room)? else {
                break;
            };
            // The next chain's descriptors, and this one's first buffer
            // when it is for receiving or the worker reads ahead.
            self.desc.prefetch(usize::from(self.avail.idx) * 16);
            if self.writable || b.read_ahead {
                mem.prefetch(b.segs[used].addr, b.segs[used].len, self.writable);
            }
            b.heads[k] = id;
            used += cnt;
            b.lens[k] = len;
            b.at[k + 1] = used as u16;
            k += 1;
            b.n = k;
            b.pending = k as u16;
        }
        Ok(())
    }

    /// Gives back the last `n` chains popped (never used).
    pub(in crate::vhost_user) fn unpop_n(&mut self, n: u16) {
        if n == 0 {
            return;
        }
        // At most a ring's worth is in flight: `n` is below the size.
        let size = u32::from(self.size);
        let back = (u32::from(self.pops) + size - u32::from(n) % size) % size;
        self.pops = back as u16;
        for k in 0..u32::from(n) {
            // That chain's id is no longer in flight.
            let (_, id) = self.began[((back + k) % size) as usize];
            if let Some(s) = self.slots.get_mut(usize::from(id)) {
                *s = 0;
            }
        }
        self.avail = self.began[usize::from(self.pops)].0;
    }
}

/// Walks the indirect table `d` points at into `segs`: a whole number of
/// descriptors inside guest memory, each checked like any buffer (only
/// WRITE counts in a table; another indirect one is refused).
fn indirect(
    mem: &GuestMem,
    d: Desc,
    segs: &mut [Seg; MAX_SEGS],
    writable: bool,
) -> Result<(usize, u64), ChainError> {
    if d.len == 0 {
        return Err(ChainError::ZeroLength);
    }
    if d.len % 16 != 0 {
        return Err(ChainError::IndirectTable(d.len));
    }
    if !mem.contains(d.addr, d.len) {
        return Err(ChainError::OutOfMemory {
            addr: d.addr,
            len: d.len,
        });
    }
    let n = (d.len / 16) as usize;
    if n > MAX_SEGS {
        return Err(ChainError::TooLong);
    }
    let mut total = 0u64;
    for (k, seg) in segs.iter_mut().enumerate().take(n) {
        let at = d.addr + 16 * k as u64;
        let read = |off: u64| mem.mem().read_obj::<u64>(GuestAddress(at + off));
        let (lo, hi) = match (read(0), read(8)) {
            (Ok(lo), Ok(hi)) => (u64::from_le(lo), u64::from_le(hi)),
            _ => return Err(ChainError::OutOfMemory { addr: at, len: 16 }),
        };
        let e = Desc::from_halves(lo, hi);
        if e.flags & F_INDIRECT != 0 {
            return Err(ChainError::IndirectTable(d.len));
        }
        *seg = chain::check_buffer(e.addr, e.len, e.flags, writable, |a, l| mem.contains(a, l))?;
        total += u64::from(e.len);
    }
    if total > u64::from(u32::MAX) {
        return Err(ChainError::TooLarge);
    }
    Ok((n, total))
}
