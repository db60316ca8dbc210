//! Hostile front-end behaviour as data: what a case does after a
//! complete handshake and what the switch must do about it. Used by the
//! hostile-frontend suite (`tests/hostile_suite.rs`) and by the soak
//! (`examples/hostile_frontend.rs`).

use crate::mac;
use crate::packed::{F_AVAIL as F_AVAIL_PACKED, F_USED as F_USED_PACKED};
use crate::raw::RawFrontend;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;
use vnio_switch::vhost_user::protocol::code;

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// What the switch must do about a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expect {
    /// Reset the port (and close the connection).
    Reset,
    /// Carry on: the case is odd but harmless.
    Carry,
}

pub type Attack = fn(&mut RawFrontend);

/// Hostile chains on the transmit queue (each resets the port).
pub const CHAINS: &[(&str, Attack)] = &[
    ("buffer outside memory", |h| {
        h.tx_desc(0, 1 << 40, 64, 0, 0);
        offer(h, 0, 1);
    }),
    ("buffer across the end of memory", |h| {
        let end = h.tx.layout.end().div_ceil(1 << 20) * (1 << 20);
        h.tx_desc(0, end - 16, 64, 0, 0);
        offer(h, 0, 1);
    }),
    ("descriptor loop", |h| {
        let b = h.tx.layout.buffer(0).0;
        h.tx_desc(0, b, 64, F_NEXT, 1);
        h.tx_desc(1, b, 64, F_NEXT, 0);
        offer(h, 0, 1);
    }),
    ("over-long chain", |h| {
        let b = h.tx.layout.buffer(0).0;
        for i in 0..100u16 {
            h.tx_desc(i, b, 16, F_NEXT, i + 1);
        }
        h.tx_desc(100, b, 16, 0, 0);
        offer(h, 0, 1);
    }),
    ("device-writable buffer on transmit", |h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, F_WRITE, 0);
        offer(h, 0, 1);
    }),
    ("zero-length buffer", |h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 0, 0, 0);
        offer(h, 0, 1);
    }),
    ("indirect without the feature", |h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, F_INDIRECT, 0);
        offer(h, 0, 1);
    }),
    ("available index jump", |h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, 0, 0);
        offer(h, 0, 1000);
    }),
    ("head outside the queue", |h| offer(h, 999, 1)),
];

/// Hostile chains on a packed transmit queue (each resets the port, with
/// the error the split ring's counterpart gets where there is one).
pub const PACKED_CHAINS: &[(&str, Attack)] = &[
    ("packed: buffer outside memory", |h| {
        offer_packed(h, &[(1 << 40, 64, 0)], 0)
    }),
    ("packed: buffer across the end of memory", |h| {
        let end = h.tx.layout.end().div_ceil(1 << 20) * (1 << 20);
        offer_packed(h, &[(end - 16, 64, 0)], 0);
    }),
    ("packed: over-long chain", |h| {
        let b = h.tx.layout.buffer(0).0;
        offer_packed(h, &[(b, 16, 0); 100], 0);
    }),
    ("packed: chain through the whole ring", |h| {
        let tx = &h.packed.as_ref().unwrap()[1];
        let b = tx.layout.buffer(0).0;
        // Every slot available in this lap and linked to the next.
        for slot in 0..tx.layout.size {
            let (idx, wrap) = tx.avail;
            let lap = if (slot < tx.layout.size - idx) == wrap {
                F_AVAIL_PACKED
            } else {
                F_USED_PACKED
            };
            tx.put(&h.mem, idx + slot, b, 16, 0, F_NEXT | lap);
        }
        h.kick[1].write(1).unwrap();
    }),
    ("packed: device-writable buffer on transmit", |h| {
        let b = h.tx.layout.buffer(0).0;
        offer_packed(h, &[(b, 64, F_WRITE)], 0);
    }),
    ("packed: zero-length buffer", |h| {
        let b = h.tx.layout.buffer(0).0;
        offer_packed(h, &[(b, 0, 0)], 0);
    }),
    ("packed: indirect without the feature", |h| {
        let b = h.tx.layout.buffer(0).0;
        offer_packed(h, &[(b, 64, F_INDIRECT)], 0);
    }),
    ("packed: buffer id outside the queue", |h| {
        let b = h.tx.layout.buffer(0).0;
        offer_packed(h, &[(b, 64, 0)], 999);
    }),
    ("packed: buffer id offered twice at once", |h| {
        let tx = &h.packed.as_ref().unwrap()[1];
        let b = tx.layout.buffer(0).0;
        let (idx, wrap) = tx.avail;
        let lap = |slot: u16| {
            if (slot < tx.layout.size) == wrap {
                F_AVAIL_PACKED
            } else {
                F_USED_PACKED
            }
        };
        // The second first: the switch finds both in one burst.
        tx.put(&h.mem, idx + 1, b, 64, 7, lap(idx + 1));
        tx.put(&h.mem, idx, b, 64, 7, lap(idx));
        h.kick[1].write(1).unwrap();
    }),
];

/// Offers a chain on the packed transmit queue and kicks.
fn offer_packed(h: &mut RawFrontend, bufs: &[(u64, u32, u16)], id: u16) {
    let [_, tx] = h.packed.as_mut().expect("a packed front-end");
    tx.offer(&h.mem, bufs, id);
    h.kick[1].write(1).unwrap();
}

/// Cases on the descriptors and memory the front-end hands over.
pub const DESCRIPTORS: &[(&str, Attack, Expect)] = &[
    (
        "memory table larger than its file",
        |h| {
            let size = h.memory_file().metadata().unwrap().len();
            h.send_mem_table_of(size * 2);
        },
        Expect::Reset,
    ),
    (
        "memory file truncated under the switch",
        |h| {
            // Nothing here touches the memory after this: this process's
            // own mapping of it would fault too.
            h.memory_file().set_len(0).unwrap();
            h.kick[1].write(1).unwrap();
        },
        Expect::Reset,
    ),
    (
        "call eventfd that blocks on write",
        |h| {
            let e = EventFd::new(0).unwrap();
            e.write(u64::MAX - 1).unwrap();
            set_fd(h, code::SET_VRING_CALL, 1, e.as_raw_fd());
            h.send_frame(&frame(0xfe));
        },
        Expect::Reset,
    ),
    (
        "call descriptor that is a full pipe",
        |h| {
            let (r, w) = pipe();
            // SAFETY: a valid descriptor; O_NONBLOCK only for filling it here.
            unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
            while std::io::Write::write(&mut &w, &[0u8; 4096]).is_ok() {}
            // SAFETY: as above; blocking again, as the switch would find it.
            unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, 0) };
            set_fd(h, code::SET_VRING_CALL, 1, w.as_raw_fd());
            drop(r);
        },
        Expect::Reset,
    ),
    (
        "queue index beyond the port's queue pairs",
        |h| {
            // Vring 2 is pair 1's receive queue: not on a one-pair port.
            let e = EventFd::new(0).unwrap();
            set_fd(h, code::SET_VRING_KICK, 2, e.as_raw_fd());
        },
        Expect::Reset,
    ),
    (
        "kick descriptor that is a pipe",
        |h| {
            let (r, _w) = pipe();
            set_fd(h, code::SET_VRING_KICK, 1, r.as_raw_fd());
        },
        Expect::Reset,
    ),
    (
        "front-end drains its own kicks (blocking)",
        |h| {
            // The worker is woken for a kick whose counter the front-end
            // then takes itself: a blocking read would never return.
            let until = Instant::now() + Duration::from_millis(300);
            let fd = h.kick[1].as_raw_fd();
            while Instant::now() < until {
                h.kick[1].write(1).unwrap();
                let mut b = [0u8; 8];
                let iov = libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: 8,
                };
                // SAFETY: one iovec over a live buffer.
                unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
            }
            clear_nonblock(h);
            h.send_frame(&frame(0xfd));
        },
        Expect::Carry,
    ),
];

/// A pipe (std's own is newer than the workspace's MSRV).
pub fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: a two-element array for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: two fresh descriptors nothing else owns.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

/// Offers `head` at the next available slot and moves the available index
/// `by` entries on (1: just that chain).
pub fn offer(h: &RawFrontend, head: u16, by: u16) {
    use vm_memory::Bytes;
    let idx: u16 = h
        .mem
        .read_obj(vm_memory::GuestAddress(h.tx.layout.avail + 2))
        .unwrap();
    h.tx_offer(idx, head, idx.wrapping_add(by));
}

/// Hands the switch a descriptor for queue `q`; returns once the switch
/// processed it (a round trip behind it), unless the switch reset the port.
pub fn set_fd(h: &RawFrontend, request: u32, q: u64, fd: i32) {
    h.send(request, 0, &q.to_le_bytes(), &[fd]).unwrap();
    let _ = h.send(code::GET_FEATURES, 0, &[], &[]);
    let _ = h.reply_u64();
}

/// Clears O_NONBLOCK on the kick eventfds the switch shares.
pub fn clear_nonblock(h: &RawFrontend) {
    for k in &h.kick {
        // SAFETY: a valid descriptor; F_SETFL with flags 0.
        unsafe { libc::fcntl(k.as_raw_fd(), libc::F_SETFL, 0) };
    }
}

/// A broadcast frame with an experimental ethertype, from `mac(src)`.
pub fn frame(src: u8) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}
