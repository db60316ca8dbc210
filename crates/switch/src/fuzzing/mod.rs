//! Harnesses for the hostile-input surfaces, shared by the cargo-fuzz
//! targets in `crates/switch/fuzz` and by a bounded pseudo-random run in
//! the unit tests (so CI exercises them without a nightly toolchain).
//! Each takes arbitrary bytes and must neither panic nor touch memory
//! outside what it was given.

use crate::endpoint::stack::{self, ArpCache, HostConfig};
use crate::forward::L2Header;
use crate::offload;
use crate::vhost_user::chain::{self, ChainError};
use crate::vhost_user::device::Device;
use crate::vhost_user::protocol::{parse_request, Header, HEADER_LEN};
use crate::wire::virtio_net::{VirtioNetHdr, VirtioNetHdrRepr, FLAG_NEEDS_CSUM, LEGACY_HEADER_LEN};
use crate::wire::{checksum, EthernetAddress, Ipv4Address};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

mod packed;
pub use packed::packed_ring;

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
    let walked = chain::walk(&mem, GuestAddress(0), queue_size, head, writable);
    // The one-buffer check the burst pop tries first decides as the walk
    // does: whatever it accepts, the walk accepts as the same one buffer.
    let first = (head < queue_size)
        .then(|| {
            mem.read_obj::<Descriptor>(GuestAddress(u64::from(head) * 16))
                .ok()
        })
        .flatten();
    let in_memory = |addr: u64, len: u32| {
        GuestMemoryBackend::check_range(&mem, GuestAddress(addr), len as usize)
    };
    if let Some(seg) = first.and_then(|d| chain::single(&d, writable, in_memory)) {
        let c = walked
            .as_ref()
            .expect("the walk accepts what the one-buffer check does");
        assert_eq!(c.segs(), &[seg]);
    }
    match walked {
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

/// A frame as a port hands it over (a 10-byte virtio-net header first):
/// the header codec, the forwarding decision's L2 parse, the uplink's
/// offload work (checksum completion, TSO segmentation), and the endpoint host's whole receive path
/// (Ethernet, ARP, IPv4, ICMP, UDP) with a reply built into a buffer.
///
/// The first byte steers: bit 0 fixes the IPv4 header checksum, bit 1
/// addresses the host as the frame's destination IP, bit 2 leaves segment
/// checksums partial; so inputs reach the ICMP, UDP and TCP segmentation
/// code instead of stopping at a checksum or address test.
pub fn wire_frame(data: &[u8]) {
    let Some((&steer, data)) = data.split_first() else {
        return;
    };
    let mut f = [0u8; 2048];
    let n = data.len().min(f.len());
    f[..n].copy_from_slice(&data[..n]);
    let f = &mut f[..n];
    let mut vhdr = None;
    if let Ok(h) = VirtioNetHdr::new_checked(&f[..], LEGACY_HEADER_LEN) {
        if let Ok(r) = VirtioNetHdrRepr::parse(&h) {
            let mut out = [0u8; LEGACY_HEADER_LEN];
            assert!(r.emit(&mut out, LEGACY_HEADER_LEN).is_ok());
            vhdr = Some(r);
        }
    }
    let frame = &mut f[n.min(LEGACY_HEADER_LEN)..];
    // The offload path as the data path runs it: metadata checked against
    // the frame first, then the checksum completed or the frame segmented.
    if let Some(h) = vhdr {
        let l3 = if frame.get(12..14) == Some(&[0x81, 0x00]) {
            18
        } else {
            14
        };
        if offload::check(&h, frame.len(), l3, offload::Caps::ALL).is_ok() {
            if h.gso_type == crate::wire::virtio_net::GSO_NONE {
                if h.flags & FLAG_NEEDS_CSUM != 0 {
                    assert!(offload::complete_checksum(frame, &h).is_ok());
                }
            } else {
                let mut seg = [0u8; 2048];
                let mut total = 0;
                let _ = offload::segment(frame, &h, l3, steer & 4 != 0, &mut seg, |s, _| {
                    total += s.len();
                    assert!(s.len() <= 2048);
                    true
                });
            }
        }
    }
    let _ = L2Header::parse(frame);
    if frame.len() >= 34 && steer & 1 != 0 {
        let ihl = usize::from(frame[14] & 0x0f) * 4;
        if ihl >= 20 && 14 + ihl <= frame.len() {
            frame[24..26].fill(0);
            let c = checksum::checksum(&frame[14..14 + ihl]);
            frame[24..26].copy_from_slice(&c.to_be_bytes());
        }
    }
    let mut ip = Ipv4Address([10, 0, 0, 1]);
    if steer & 2 != 0 && frame.len() >= 42 {
        // IPv4 destination, or an ARP target address.
        let at = if frame[12..14] == [0x08, 0x06] {
            38
        } else {
            30
        };
        ip = Ipv4Address::from_bytes(&frame[at..at + 4]);
    }
    let mac = if frame.len() >= 6 {
        EthernetAddress::from_bytes(&frame[..6])
    } else {
        EthernetAddress([2, 0, 0, 0, 0, 1])
    };
    let host = HostConfig {
        mac,
        ip,
        echo_port: Some(7),
    };
    let mut cache = ArpCache::default();
    let mut out = [0u8; 2048];
    if let (_, Some(len)) = stack::handle(&host, &mut cache, frame, &mut out) {
        assert!(len <= out.len());
    }
}

/// Control-socket input: bytes cut into bounded request lines as the
/// control server reads them, each parsed as a request; a port's spec is
/// validated and its socket path confined as for a client's `port_add`.
pub fn control_requests(data: &[u8]) {
    use crate::control::Request;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut r = std::io::BufReader::with_capacity(64, data);
    let mut line = Vec::new();
    loop {
        line.clear();
        let t = std::time::Duration::from_secs(1);
        if crate::serve::read_line(&mut r, &mut line, 4096, t, &stop).is_err() {
            return;
        }
        assert!(line.len() <= 4096);
        if let Ok(Request::PortAdd { port }) = serde_json::from_slice::<Request>(&line) {
            let _ = port.policy();
            if let Some(v) = port.kind.vhost_user() {
                if let Ok(p) = crate::sockpath::confine(std::path::Path::new("/tmp"), &v.socket) {
                    assert!(p.starts_with("/tmp"));
                }
            }
        }
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
    fn random_frames_never_panic() {
        let mut seed = 0x0bad_cafe_dead_beef;
        let mut buf = vec![0u8; 256];
        for i in 0..20_000 {
            bytes(&mut seed, &mut buf);
            // Mostly IPv4 (ICMP or UDP) or ARP, with plausible lengths.
            buf[1] &= 0x03;
            let ethertype: &[u8] = if i % 4 == 0 {
                &[0x08, 0x06]
            } else {
                &[0x08, 0x00]
            };
            buf[23..25].copy_from_slice(ethertype);
            buf[25] = 0x45;
            buf[34] = if i % 2 == 0 { 1 } else { 17 };
            super::wire_frame(&buf[..(i % 256)]);
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

    #[test]
    fn random_packed_rings_never_panic() {
        let mut seed = 0x7ac4_ed51_2a61_f00d;
        let mut buf = vec![0u8; 2048];
        for i in 0..20_000 {
            bytes(&mut seed, &mut buf);
            // Mostly descriptors made likely valid, and a memory image
            // that leaves room for operations.
            buf[2] |= u8::from(i % 4 != 0);
            buf[3] %= 40;
            super::packed_ring(&buf[..4 + (i % 2044)]);
        }
    }

    #[test]
    fn random_control_requests_never_panic() {
        let mut seed = 0xc047_120b_5eed_u64;
        let mut buf = vec![0u8; 512];
        let seeds: [&[u8]; 3] = [
            br#"{"op":"port_add","port":{"name":"a","kind":"vhost-user","socket":"/tmp/a.sock"}}"#,
            br#"{"op":"port_set","name":"a","coalesce":"static:8:20","lro":false}"#,
            br#"{"op":"stats","name":"a"}"#,
        ];
        for i in 0..20_000 {
            bytes(&mut seed, &mut buf);
            // Half the inputs: a well-formed request with a few bytes changed.
            let mut input = seeds[i % 3].to_vec();
            if i % 2 == 0 {
                for k in 0..(buf[0] % 4) as usize {
                    let at = buf[1 + k] as usize % input.len();
                    input[at] = buf[5 + k];
                }
                input.push(b'\n');
            } else {
                input = buf[..(i % 512)].to_vec();
            }
            super::control_requests(&input);
        }
    }
}
