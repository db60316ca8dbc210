//! Harnesses for the hostile-input surfaces, shared by the cargo-fuzz
//! targets in `crates/switch/fuzz` and by a bounded pseudo-random run in
//! the unit tests (so CI exercises them without a nightly toolchain).
//! Each takes arbitrary bytes and must neither panic nor touch memory
//! outside what it was given.

use crate::vhost_user::chain::{self, ChainError};
use crate::vhost_user::device::Device;
use crate::vhost_user::protocol::{parse_request, Header, HEADER_LEN};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// A stream of vhost-user messages (no descriptors attached) applied to a fresh device.
pub fn vhost_user_messages(mut data: &[u8]) {
    let mut dev = Device::new();
    while data.len() >= HEADER_LEN {
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&data[..HEADER_LEN]);
        data = &data[HEADER_LEN..];
        let Ok(h) = Header::parse(&hb) else { return };
        let n = (h.size as usize).min(data.len());
        let (body, rest) = data.split_at(n);
        data = rest;
        if let Ok(req) = parse_request(&h, body, Vec::new()) {
            if dev.handle(req).is_err() {
                dev = Device::new();
            }
        }
    }
}

/// A descriptor table built from the input, walked from an input-chosen head.
pub fn descriptor_chain(data: &[u8]) {
    const MEM: usize = 0x4000;
    if data.len() < 3 {
        return;
    }
    let Ok(mem) = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM)]) else {
        return;
    };
    let queue_size = 1u16 << (data[0] % 9);
    let head = u16::from(data[1]);
    let writable = data[2] & 1 == 1;
    let table = &data[3..data.len().min(3 + MEM)];
    if mem.write_slice(table, GuestAddress(0)).is_err() {
        return;
    }
    match chain::walk(&mem, GuestAddress(0), queue_size, head, writable) {
        Ok(c) => {
            assert!(c.segs().len() <= chain::MAX_SEGS);
            assert!(c.segs().len() <= usize::from(queue_size));
            for s in c.segs() {
                assert!(s.len > 0);
                assert!(GuestMemoryBackend::check_range(
                    &mem,
                    GuestAddress(s.addr),
                    s.len as usize
                ));
            }
        }
        Err(ChainError::Ring | ChainError::IndexJump) => {
            unreachable!("walk never reports ring errors")
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    /// xorshift64*: deterministic bytes for a bounded run.
    fn bytes(seed: &mut u64, out: &mut [u8]) {
        for b in out.iter_mut() {
            *seed ^= *seed >> 12;
            *seed ^= *seed << 25;
            *seed ^= *seed >> 27;
            *b = (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
        }
    }

    #[test]
    fn random_message_streams_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        let mut buf = vec![0u8; 256];
        for i in 0..20_000 {
            bytes(&mut seed, &mut buf);
            // Make most headers plausible so bodies get parsed too.
            for m in buf.chunks_mut(32) {
                if m.len() >= 12 {
                    m[0] %= 40;
                    m[1..4].fill(0);
                    m[4] = 1 | (m[4] & 0x8);
                    m[5..8].fill(0);
                    m[8] %= 48;
                    m[9..12].fill(0);
                }
            }
            super::vhost_user_messages(&buf[..(i % 256)]);
        }
    }

    #[test]
    fn random_descriptor_tables_never_panic() {
        let mut seed = 0x1234_5678_9abc_def1;
        let mut buf = vec![0u8; 1024];
        for i in 0..20_000 {
            bytes(&mut seed, &mut buf);
            // Bias addresses into the small memory and next indexes into the queue.
            for d in buf[3..].chunks_mut(16) {
                if d.len() == 16 && i % 2 == 0 {
                    d[2..8].fill(0);
                    d[1] &= 0x3f;
                    d[6] = 0;
                    d[14] &= 0x0f;
                    d[15] = 0;
                }
            }
            super::descriptor_chain(&buf[..3 + (i % 1021)]);
        }
    }
}
