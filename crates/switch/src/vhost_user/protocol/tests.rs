//! Unit tests of the vhost-user codec.
use super::*;

fn hdr(request: u32, size: usize) -> Header {
    Header {
        request,
        flags: VERSION,
        size: size as u32,
    }
}

#[test]
fn header_checks() {
    let ok = Header {
        request: 1,
        flags: 1,
        size: 0,
    }
    .emit();
    assert_eq!(Header::parse(&ok).unwrap().request, 1);
    let v2 = Header {
        request: 1,
        flags: 2,
        size: 0,
    }
    .emit();
    assert_eq!(Header::parse(&v2), Err(ProtocolError::BadVersion(2)));
    let reply = Header {
        request: 1,
        flags: 1 | FLAG_REPLY,
        size: 0,
    }
    .emit();
    assert_eq!(Header::parse(&reply), Err(ProtocolError::UnexpectedReply));
    let huge = Header {
        request: 1,
        flags: 1,
        size: 1 << 20,
    }
    .emit();
    assert_eq!(Header::parse(&huge), Err(ProtocolError::TooLarge(1 << 20)));
}

#[test]
fn bodies_are_size_checked() {
    assert!(matches!(
        parse_request(&hdr(code::SET_FEATURES, 4), &[0; 4], vec![]),
        Err(ProtocolError::BadSize { .. })
    ));
    assert!(matches!(
        parse_request(
            &hdr(code::SET_FEATURES, 8),
            &[1, 0, 0, 0, 0, 0, 0, 0],
            vec![]
        ),
        Ok(Request::SetFeatures(1))
    ));
    assert!(matches!(
        parse_request(&hdr(code::SET_VRING_ADDR, 39), &[0; 39], vec![]),
        Err(ProtocolError::BadSize { .. })
    ));
    let mut en = [0u8; 8];
    en[4] = 2;
    assert!(matches!(
        parse_request(&hdr(code::SET_VRING_ENABLE, 8), &en, vec![]),
        Err(ProtocolError::BadValue { .. })
    ));
    assert!(matches!(
        parse_request(&hdr(99, 0), &[], vec![]),
        Ok(Request::Unsupported(99))
    ));
}

#[test]
fn descriptors_are_counted() {
    let f = crate::sys::memfd::create("t", 4096).unwrap();
    // A kick without the NOFD bit needs exactly one descriptor.
    assert!(matches!(
        parse_request(
            &hdr(code::SET_VRING_KICK, 8),
            &[1, 0, 0, 0, 0, 0, 0, 0],
            vec![]
        ),
        Err(ProtocolError::BadFds { .. })
    ));
    let nofd = (VRING_NOFD_MASK | 1).to_le_bytes();
    assert!(matches!(
        parse_request(&hdr(code::SET_VRING_KICK, 8), &nofd, vec![]),
        Ok(Request::SetVringKick { index: 1, fd: None })
    ));
    // Descriptors on a request that takes none are refused.
    assert!(matches!(
        parse_request(&hdr(code::GET_FEATURES, 0), &[], vec![f]),
        Err(ProtocolError::BadFds { .. })
    ));
}

#[test]
fn memory_table() {
    let mut body = vec![0u8; 8 + 32];
    body[0] = 1;
    body[8 + 8..8 + 16].copy_from_slice(&4096u64.to_le_bytes());
    body[8 + 16..8 + 24].copy_from_slice(&0x7f00_0000_0000u64.to_le_bytes());
    let f = crate::sys::memfd::create("t", 4096).unwrap();
    match parse_request(&hdr(code::SET_MEM_TABLE, body.len()), &body, vec![f]).unwrap() {
        Request::SetMemTable(r) => {
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].0.memory_size, 4096);
            assert_eq!(r[0].0.userspace_addr, 0x7f00_0000_0000);
        }
        other => panic!("{other:?}"),
    }
    // Wrapping addresses are refused.
    body[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let f = crate::sys::memfd::create("t", 4096).unwrap();
    assert!(matches!(
        parse_request(&hdr(code::SET_MEM_TABLE, body.len()), &body, vec![f]),
        Err(ProtocolError::BadValue { .. })
    ));
    // Count and descriptors must agree.
    body[8..16].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        parse_request(&hdr(code::SET_MEM_TABLE, body.len()), &body, vec![]),
        Err(ProtocolError::BadFds { .. })
    ));
}

#[test]
fn replies() {
    let r = reply_u64(code::GET_FEATURES, 0x1234);
    assert_eq!(u32_at(&r, 4), VERSION | FLAG_REPLY);
    assert_eq!(u64_at(&r, 12), 0x1234);
    let s = reply_vring_state(code::GET_VRING_BASE, 1, 7);
    assert_eq!((u32_at(&s, 12), u32_at(&s, 16)), (1, 7));
}
