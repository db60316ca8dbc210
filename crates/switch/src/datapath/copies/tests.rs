use super::*;
use crate::vhost_user::memory::{GuestMem, DEFAULT_MAX_MEMORY};
use crate::vhost_user::protocol::MemoryRegion;
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress};

/// A guest memory of 64 KiB at guest address 0.
fn memory(name: &str) -> Arc<GuestMem> {
    let f = crate::sys::memfd::create(name, 0x10000).unwrap();
    let r = MemoryRegion {
        guest_phys_addr: 0,
        memory_size: 0x10000,
        userspace_addr: 0x7000_0000,
        mmap_offset: 0,
    };
    Arc::new(GuestMem::from_table(vec![(r, f)], DEFAULT_MAX_MEMORY).unwrap())
}

fn bytes(m: &GuestMem, at: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    m.mem().read_slice(&mut v, GuestAddress(at)).unwrap();
    v
}

const HEAD: [u64; 2] = [0x0807_0605_0403_0201, 0x0c0b_0a09];

#[test]
fn copies_wait_for_the_flush_and_a_full_batch_makes_room() {
    let (src, dst) = (memory("src"), memory("dst"));
    src.mem()
        .write_slice(&[7u8; 64], GuestAddress(0x100))
        .unwrap();
    let mut c = Copies::default();
    for k in 0..=BURST as u64 {
        assert!(c.push(
            src.maps(),
            0x100,
            64,
            dst.maps(),
            k * 0x100,
            0x100,
            HEAD,
            12
        ));
        if k == 0 {
            assert!(
                bytes(&dst, 0, 80).iter().all(|&x| x == 0),
                "not before the flush"
            );
        }
    }
    // The 33rd made the first 32.
    assert_eq!(
        bytes(&dst, 0, 13),
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 7]
    );
    assert!(bytes(&dst, BURST as u64 * 0x100, 80)
        .iter()
        .all(|&x| x == 0));
    c.flush();
    assert!(c.is_empty());
    let last = bytes(&dst, BURST as u64 * 0x100, 0x100);
    assert_eq!(last[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert!(last[12..76].iter().all(|&x| x == 7));
    assert!(last[76..].iter().all(|&x| x == 0), "nothing past the frame");
}

#[test]
fn a_copy_that_does_not_fit_or_is_not_mapped_is_refused_and_nothing_queued() {
    let (src, dst) = (memory("src2"), memory("dst2"));
    let mut c = Copies::default();
    assert!(
        !c.push(src.maps(), 0, 64, dst.maps(), 0, 75, HEAD, 12),
        "76 bytes in 75"
    );
    assert!(
        !c.push(src.maps(), 0xfff0, 64, dst.maps(), 0, 0x100, HEAD, 12),
        "source past the end"
    );
    assert!(
        !c.push(src.maps(), 0, 64, dst.maps(), 0xffc0, 0x100, HEAD, 12),
        "buffer past the end"
    );
    assert!(c.is_empty());
    // A ten-byte header leaves the next two bytes alone.
    dst.mem()
        .write_slice(&[0xee; 16], GuestAddress(0x200))
        .unwrap();
    src.mem().write_slice(&[7u8; 4], GuestAddress(0)).unwrap();
    assert!(c.push(src.maps(), 0, 4, dst.maps(), 0x200, 14, HEAD, 10));
    c.flush();
    assert_eq!(
        bytes(&dst, 0x200, 15),
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 7, 7, 7, 7, 0xee]
    );
}

#[test]
fn copies_between_other_memories_make_the_batch_first() {
    let (a, b, d) = (memory("a"), memory("b"), memory("d"));
    a.mem().write_slice(&[1u8; 8], GuestAddress(0)).unwrap();
    b.mem().write_slice(&[2u8; 8], GuestAddress(0)).unwrap();
    let mut c = Copies::default();
    assert!(c.push(a.maps(), 0, 8, d.maps(), 0, 0x40, HEAD, 12));
    assert!(c.push(b.maps(), 0, 8, d.maps(), 0x40, 0x40, HEAD, 12));
    assert_eq!(bytes(&d, 12, 8), [1; 8], "a's copy made when b's came");
    assert_eq!(bytes(&d, 0x40 + 12, 8), [0; 8]);
    c.flush();
    assert_eq!(bytes(&d, 0x40 + 12, 8), [2; 8]);
}

#[test]
fn release_makes_the_copies_and_lets_the_memories_go() {
    let (src, dst) = (memory("src3"), memory("dst3"));
    src.mem().write_slice(&[5u8; 8], GuestAddress(0)).unwrap();
    let mut c = Copies::default();
    assert!(c.push(src.maps(), 0, 8, dst.maps(), 0, 0x40, HEAD, 12));
    assert_eq!(Arc::strong_count(dst.maps()), 2);
    c.release();
    assert_eq!(bytes(&dst, 12, 8), [5; 8]);
    assert!(c.is_empty() && !c.holds());
    assert_eq!(
        (Arc::strong_count(src.maps()), Arc::strong_count(dst.maps())),
        (1, 1)
    );
}

#[test]
fn a_queued_copy_outlives_the_memory_it_was_checked_in() {
    // The port's memory table replaced (or its front-end gone) between
    // the push and the flush: the batch still holds the mappings its
    // addresses point into.
    let (src, dst) = (memory("src4"), memory("dst4"));
    src.mem().write_slice(&[9u8; 8], GuestAddress(0)).unwrap();
    let mut c = Copies::default();
    assert!(c.push(src.maps(), 0, 8, dst.maps(), 0, 0x40, HEAD, 12));
    drop(src);
    c.flush();
    assert_eq!(bytes(&dst, 12, 8), [9; 8]);
}
