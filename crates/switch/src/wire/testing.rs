//! Frame builders for tests (segmentation, checksums, aggregation); not an API.

use super::checksum;
use super::tcp::flags;

/// One TCP segment (or GSO super-frame) to build.
#[derive(Debug, Clone)]
pub struct TcpFrame {
    /// IPv6 instead of IPv4.
    pub v6: bool,
    /// An 802.1Q tag after the MACs.
    pub vlan: Option<u16>,
    /// Ports.
    pub ports: (u16, u16),
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags.
    pub flags: u8,
    /// Window.
    pub window: u16,
    /// Options (a multiple of 4 bytes).
    pub options: Vec<u8>,
    /// IPv4 identification.
    pub ip_id: u16,
    /// Payload.
    pub payload: Vec<u8>,
}

impl Default for TcpFrame {
    fn default() -> Self {
        Self {
            v6: false,
            vlan: None,
            ports: (40000, 5001),
            seq: 1000,
            ack: 77,
            flags: flags::ACK,
            window: 500,
            options: Vec::new(),
            ip_id: 10,
            payload: Vec::new(),
        }
    }
}

/// Addresses every test frame uses.
pub const SRC4: [u8; 4] = [10, 0, 0, 1];
/// Destination IPv4 address.
pub const DST4: [u8; 4] = [10, 0, 0, 2];
/// Source IPv6 address.
pub const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Destination IPv6 address.
pub const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

impl TcpFrame {
    /// Offset of the IP header.
    pub fn l3(&self) -> usize {
        14 + if self.vlan.is_some() { 4 } else { 0 }
    }

    /// Offset of the TCP header.
    pub fn l4(&self) -> usize {
        self.l3() + if self.v6 { 40 } else { 20 }
    }

    /// The frame with a full, valid TCP checksum (or, with `partial`, the
    /// pseudo-header sum a sender with checksum offload leaves).
    pub fn build(&self, partial: bool) -> Vec<u8> {
        let (l3, l4) = (self.l3(), self.l4());
        let thl = 20 + self.options.len();
        let len = l4 + thl + self.payload.len();
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        let et = if self.v6 { 0x86ddu16 } else { 0x0800 };
        if let Some(v) = self.vlan {
            f[12..14].copy_from_slice(&[0x81, 0]);
            f[14..16].copy_from_slice(&v.to_be_bytes());
            f[16..18].copy_from_slice(&et.to_be_bytes());
        } else {
            f[12..14].copy_from_slice(&et.to_be_bytes());
        }
        let tcp_len = thl + self.payload.len();
        let pseudo = if self.v6 {
            f[l3] = 0x60;
            f[l3 + 4..l3 + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            f[l3 + 6] = 6;
            f[l3 + 7] = 64;
            f[l3 + 8..l3 + 24].copy_from_slice(&SRC6);
            f[l3 + 24..l3 + 40].copy_from_slice(&DST6);
            checksum::pseudo_header_v6(&SRC6, &DST6, 6, tcp_len as u32)
        } else {
            f[l3] = 0x45;
            f[l3 + 2..l3 + 4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            f[l3 + 4..l3 + 6].copy_from_slice(&self.ip_id.to_be_bytes());
            f[l3 + 6] = 0x40;
            f[l3 + 8] = 64;
            f[l3 + 9] = 6;
            f[l3 + 12..l3 + 16].copy_from_slice(&SRC4);
            f[l3 + 16..l3 + 20].copy_from_slice(&DST4);
            let c = checksum::checksum(&f[l3..l3 + 20]);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            checksum::pseudo_header(SRC4, DST4, 6, tcp_len as u16)
        };
        let t = &mut f[l4..];
        t[0..2].copy_from_slice(&self.ports.0.to_be_bytes());
        t[2..4].copy_from_slice(&self.ports.1.to_be_bytes());
        t[4..8].copy_from_slice(&self.seq.to_be_bytes());
        t[8..12].copy_from_slice(&self.ack.to_be_bytes());
        t[12] = ((thl / 4) as u8) << 4;
        t[13] = self.flags;
        t[14..16].copy_from_slice(&self.window.to_be_bytes());
        t[20..thl].copy_from_slice(&self.options);
        t[thl..].copy_from_slice(&self.payload);
        let c = if partial {
            checksum::fold_partial(pseudo)
        } else {
            checksum::fold(checksum::add(pseudo, checksum::sum(t)))
        };
        t[16..18].copy_from_slice(&c.to_be_bytes());
        f
    }
}

/// True when the frame's IPv4 header checksum (if any) and TCP checksum verify.
pub fn tcp_checksums_ok(f: &[u8], l3: usize, v6: bool) -> bool {
    if v6 {
        let l4 = l3 + 40;
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&f[l3 + 8..l3 + 24]);
        d.copy_from_slice(&f[l3 + 24..l3 + 40]);
        let p = checksum::pseudo_header_v6(&s, &d, 6, (f.len() - l4) as u32);
        checksum::fold(checksum::add(p, checksum::sum(&f[l4..]))) == 0
    } else {
        let ihl = usize::from(f[l3] & 0x0f) * 4;
        let l4 = l3 + ihl;
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&f[l3 + 12..l3 + 16]);
        d.copy_from_slice(&f[l3 + 16..l3 + 20]);
        let p = checksum::pseudo_header(s, d, 6, (f.len() - l4) as u16);
        checksum::checksum(&f[l3..l4]) == 0
            && checksum::fold(checksum::add(p, checksum::sum(&f[l4..]))) == 0
    }
}

/// A payload of `n` bytes whose content depends on the position (so
/// reordered or duplicated bytes show).
pub fn pattern(n: usize, salt: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 24) as u8)
        .collect()
}
