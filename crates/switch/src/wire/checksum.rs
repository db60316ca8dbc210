//! The Internet checksum (RFC 1071).

/// One's-complement sum of `data` as big-endian 16-bit words, partly
/// folded (at most 17 bits), so a few sums add without losing carries.
///
/// Eight bytes at a time: the one's-complement sum of 32-bit big-endian
/// words, folded, equals the sum of their 16-bit halves (RFC 1071 2(B)),
/// and software checksums over 64 KiB GSO frames are on the fallback path.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Two 32-bit halves: no overflow before 2^32 chunks (far beyond a frame).
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let mut rest = chunks.remainder().chunks_exact(2);
    for c in &mut rest {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = rest.remainder() {
        acc += u64::from(*last) << 8;
    }
    while acc > 0x1_ffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u32
}

/// Adds two partial sums (as [`sum`] returns), keeping the carries.
pub fn add(a: u32, b: u32) -> u32 {
    let mut acc = u64::from(a) + u64::from(b);
    while acc > 0x1_ffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u32
}

/// Folds a partial sum to 16 bits without complementing it (the value a
/// sender with checksum offload leaves in the field: the pseudo-header sum).
pub fn fold_partial(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Folds a 32-bit partial sum into the 16-bit one's-complement checksum.
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Checksum of `data` alone.
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum(data))
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 8.1) for an upper-layer length.
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, length: u32) -> u32 {
    add(
        add(sum(src), sum(dst)),
        add(length >> 16, (length & 0xffff) + u32::from(next_header)),
    )
}

/// Partial sum of the IPv4 pseudo-header used by UDP and TCP.
pub fn pseudo_header(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u32 {
    sum(&src)
        .wrapping_add(sum(&dst))
        .wrapping_add(u32::from(protocol))
        .wrapping_add(u32::from(length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is 0xddf2 before complement.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), !0xddf2);
    }

    #[test]
    fn wide_sum_matches_the_word_by_word_definition() {
        let data: Vec<u8> = (0..70_001u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0usize, 1, 2, 7, 8, 9, 15, 16, 17, 1500, 65_535, 70_001] {
            let d = &data[..len];
            let mut acc: u64 = 0;
            for (i, b) in d.iter().enumerate() {
                acc += if i % 2 == 0 {
                    u64::from(*b) << 8
                } else {
                    u64::from(*b)
                };
            }
            while acc > 0xffff {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            assert_eq!(fold_partial(sum(d)), acc as u16, "length {len}");
        }
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0xab]), checksum(&[0xab, 0x00]));
    }

    #[test]
    fn a_checksummed_buffer_sums_to_zero() {
        let mut data = vec![
            0x45, 0x00, 0x00, 0x1c, 0x12, 0x34, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = checksum(&data);
        data[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&data), 0);
    }
}
