//! Announcing a migrated guest: the RARP frame a back-end sends for a
//! guest that cannot announce itself (no VIRTIO_NET_F_GUEST_ANNOUNCE),
//! when the front-end asks with VHOST_USER_SEND_RARP. It is the frame
//! QEMU's own announce sends: a broadcast reverse-ARP request from the
//! guest's MAC, so every learning switch on the way points the MAC at the
//! guest's new place. The request is accepted only from a front-end that
//! negotiated VHOST_USER_PROTOCOL_F_RARP (as QEMU sends it); from any
//! other it is a protocol error and the port is reset.

use crate::wire::virtio_net::HEADER_LEN;

/// EtherType of RARP.
pub const ETHERTYPE_RARP: u16 = 0x8035;
/// Length of the frame (the Ethernet minimum, without FCS).
pub const RARP_LEN: usize = 60;

/// The RARP request announcing `mac`.
pub fn rarp_frame(mac: [u8; 6]) -> [u8; RARP_LEN] {
    let mut f = [0u8; RARP_LEN];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETHERTYPE_RARP.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes()); // hardware: Ethernet
    f[16..18].copy_from_slice(&0x0800u16.to_be_bytes()); // protocol: IPv4
    f[18] = 6; // hardware address length
    f[19] = 4; // protocol address length
    f[20..22].copy_from_slice(&3u16.to_be_bytes()); // reverse request
    f[22..28].copy_from_slice(&mac); // sender MAC (sender IP stays 0)
    f[32..38].copy_from_slice(&mac); // target MAC (target IP stays 0)
    f
}

/// The RARP request announcing `mac` behind a zeroed virtio-net header,
/// as a frame a port received (what the datapath forwards for SEND_RARP).
pub fn rarp_with_header(mac: [u8; 6]) -> [u8; HEADER_LEN + RARP_LEN] {
    let mut f = [0u8; HEADER_LEN + RARP_LEN];
    f[HEADER_LEN..].copy_from_slice(&rarp_frame(mac));
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::device::{Device, Reply};
    use crate::vhost_user::protocol::{code, parse_request, Header, VERSION};

    #[test]
    fn the_frame_is_a_broadcast_rarp_request_from_the_mac() {
        let mac = [0x52, 0x54, 0, 1, 2, 3];
        let f = rarp_frame(mac);
        assert_eq!(&f[..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x80, 0x35]);
        assert_eq!(&f[20..22], &[0, 3]);
        assert_eq!((&f[22..28], &f[32..38]), (&mac[..], &mac[..]));
        assert!(f[38..].iter().all(|&b| b == 0));
    }

    #[test]
    fn send_rarp_is_kept_until_the_switch_takes_it() {
        let mut body = [0u8; 8];
        body[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        let h = Header {
            request: code::SEND_RARP,
            flags: VERSION,
            size: 8,
        };
        let mut d = Device::new();
        // Without VHOST_USER_PROTOCOL_F_RARP: refused, nothing to announce.
        let req = parse_request(&h, &body, vec![]).unwrap();
        let e = d.handle(req).unwrap_err();
        assert_eq!(
            e.to_string(),
            "SEND_RARP without VHOST_USER_PROTOCOL_F_RARP negotiated"
        );
        assert_eq!(d.take_announce(), None);
        let rarp = crate::vhost_user::device::protocol_feature::RARP;
        d.handle(crate::vhost_user::protocol::Request::SetProtocolFeatures(
            rarp,
        ))
        .unwrap();
        let req = parse_request(&h, &body, vec![]).unwrap();
        assert_eq!(d.handle(req).unwrap(), Reply::Ack);
        assert_eq!(d.take_announce(), Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(d.take_announce(), None, "taken once");
        let req = parse_request(&h, &body, vec![]).unwrap();
        d.handle(req).unwrap();
        let f = d.take_announce_frame().unwrap();
        assert!(f[..HEADER_LEN].iter().all(|&b| b == 0));
        assert_eq!(f[HEADER_LEN..], rarp_frame([2, 0, 0, 0, 0, 9]));
        assert!(d.take_announce_frame().is_none());
    }
}
