//! The vhost-user wire protocol (QEMU's docs/interop/vhost-user.rst):
//! message header, request codes, bodies, in the two-layer shape: bytes are
//! checked once, then turned into a [`Request`] value. Pure functions over
//! byte slices, so hostile and truncated messages are unit-testable and fuzzable.

use std::fs::File;

/// Header: request (u32), flags (u32), size (u32), little-endian.
pub const HEADER_LEN: usize = 12;
/// Largest body accepted (the spec's payload union is far smaller).
pub const MAX_BODY: usize = 4096;
/// The protocol version in the low two bits of `flags`.
pub const VERSION: u32 = 1;
/// `flags`: this message is a reply.
pub const FLAG_REPLY: u32 = 0x4;
/// `flags`: the sender wants a REPLY_ACK.
pub const FLAG_NEED_REPLY: u32 = 0x8;
/// The memory table holds at most this many regions.
pub const MAX_REGIONS: usize = 8;
/// In SET_VRING_KICK/CALL/ERR: no descriptor attached (polling mode).
pub const VRING_NOFD_MASK: u64 = 0x100;

/// Request codes (front-end to back-end).
#[allow(missing_docs)]
pub mod code {
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_LOG_FD: u32 = 7;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const SEND_RARP: u32 = 19;
    pub const NET_SET_MTU: u32 = 20;
    pub const GET_CONFIG: u32 = 24;
    pub const SET_CONFIG: u32 = 25;
    pub const RESET_DEVICE: u32 = 34;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
}

/// Why bytes are not a valid vhost-user message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The header's version bits are not 1.
    #[error("unsupported protocol version in flags {0:#x}")]
    BadVersion(u32),
    /// A reply arrived where a request was expected.
    #[error("unexpected reply flag")]
    UnexpectedReply,
    /// `size` exceeds [`MAX_BODY`].
    #[error("body of {0} bytes exceeds the limit")]
    TooLarge(u32),
    /// The body's length does not match the request.
    #[error("request {request} has a {got}-byte body, expected {expected}")]
    BadSize {
        /// Request code.
        request: u32,
        /// Body length received.
        got: usize,
        /// Body length the request needs.
        expected: usize,
    },
    /// A field holds a value the request forbids.
    #[error("request {request}: invalid {what}")]
    BadValue {
        /// Request code.
        request: u32,
        /// Which field.
        what: &'static str,
    },
    /// The wrong number of descriptors came with the message.
    #[error("request {request} came with {got} file descriptors, expected {expected}")]
    BadFds {
        /// Request code.
        request: u32,
        /// Descriptors received.
        got: usize,
        /// Descriptors needed.
        expected: usize,
    },
}

/// A checked message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Request code.
    pub request: u32,
    /// Flags (version, reply, need-reply).
    pub flags: u32,
    /// Body length.
    pub size: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Header {
    /// Reads and checks a request header from 12 bytes.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<Self, ProtocolError> {
        let h = Self {
            request: u32_at(b, 0),
            flags: u32_at(b, 4),
            size: u32_at(b, 8),
        };
        if h.flags & 0x3 != VERSION {
            return Err(ProtocolError::BadVersion(h.flags));
        }
        if h.flags & FLAG_REPLY != 0 {
            return Err(ProtocolError::UnexpectedReply);
        }
        if h.size as usize > MAX_BODY {
            return Err(ProtocolError::TooLarge(h.size));
        }
        Ok(h)
    }

    /// True when the sender asked for a REPLY_ACK.
    pub fn need_reply(&self) -> bool {
        self.flags & FLAG_NEED_REPLY != 0
    }

    /// The 12 header bytes.
    pub fn emit(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.request.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.size.to_le_bytes());
        b
    }
}

/// One region of the front-end's memory table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRegion {
    /// Guest physical address.
    pub guest_phys_addr: u64,
    /// Size in bytes.
    pub memory_size: u64,
    /// The front-end's virtual address of the region (ring addresses use it).
    pub userspace_addr: u64,
    /// Offset of the region in the attached file.
    pub mmap_offset: u64,
}

/// SET_VRING_ADDR's body: ring addresses in the front-end's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VringAddr {
    /// Queue index.
    pub index: u32,
    /// Bit 0: log used ring writes.
    pub flags: u32,
    /// Descriptor table.
    pub desc: u64,
    /// Used ring.
    pub used: u64,
    /// Available ring.
    pub avail: u64,
    /// Log address.
    pub log: u64,
}

/// A validated request.
#[derive(Debug)]
pub enum Request {
    /// Device feature bits, please.
    GetFeatures,
    /// The driver accepts these features.
    SetFeatures(u64),
    /// The sender owns the device.
    SetOwner,
    /// Give the device up (deprecated; treated as a reset).
    ResetOwner,
    /// Guest memory: regions and one file per region.
    SetMemTable(Vec<(MemoryRegion, File)>),
    /// Queue size.
    SetVringNum {
        /// Queue index.
        index: u32,
        /// Size.
        num: u32,
    },
    /// Ring addresses.
    SetVringAddr(VringAddr),
    /// Next available index to process.
    SetVringBase {
        /// Queue index.
        index: u32,
        /// Index.
        num: u32,
    },
    /// Stop the queue and report where it stopped.
    GetVringBase {
        /// Queue index.
        index: u32,
    },
    /// The driver's notification eventfd (None: the back-end polls).
    SetVringKick {
        /// Queue index.
        index: u8,
        /// Eventfd.
        fd: Option<File>,
    },
    /// The device's notification eventfd (None: the driver polls).
    SetVringCall {
        /// Queue index.
        index: u8,
        /// Eventfd.
        fd: Option<File>,
    },
    /// Where to report queue errors.
    SetVringErr {
        /// Queue index.
        index: u8,
        /// Eventfd.
        fd: Option<File>,
    },
    /// Protocol feature bits, please.
    GetProtocolFeatures,
    /// The front-end accepts these protocol features.
    SetProtocolFeatures(u64),
    /// Number of queues, please.
    GetQueueNum,
    /// Enable or disable a queue.
    SetVringEnable {
        /// Queue index.
        index: u32,
        /// On or off.
        enable: bool,
    },
    /// The dirty-page log: `size` bytes of `fd` from `offset`.
    SetLogBase {
        /// Bytes of log.
        size: u64,
        /// Where the log starts in the file.
        offset: u64,
        /// The shared memory holding it.
        fd: File,
    },
    /// An eventfd to signal log changes on (kept, never signalled: the
    /// shared log needs no notification).
    SetLogFd(File),
    /// Announce the guest's MAC after a migration (a guest without
    /// VIRTIO_NET_F_GUEST_ANNOUNCE).
    SendRarp([u8; 6]),
    /// The guest's MTU.
    NetSetMtu(u64),
    /// Reset the device.
    ResetDevice,
    /// Maximum memory slots, please.
    GetMaxMemSlots,
    /// A request this back-end does not implement (answered with a failure ack if asked).
    Unsupported(u32),
}

fn expect_size(h: &Header, body: &[u8], expected: usize) -> Result<(), ProtocolError> {
    if body.len() != expected || h.size as usize != expected {
        return Err(ProtocolError::BadSize {
            request: h.request,
            got: body.len(),
            expected,
        });
    }
    Ok(())
}

fn expect_fds(h: &Header, fds: &[File], expected: usize) -> Result<(), ProtocolError> {
    if fds.len() != expected {
        return Err(ProtocolError::BadFds {
            request: h.request,
            got: fds.len(),
            expected,
        });
    }
    Ok(())
}

fn one_fd(h: &Header, mut fds: Vec<File>) -> Result<File, ProtocolError> {
    expect_fds(h, &fds, 1)?;
    fds.pop().ok_or(ProtocolError::BadFds {
        request: h.request,
        got: 0,
        expected: 1,
    })
}

fn vring_fd(
    h: &Header,
    body: &[u8],
    mut fds: Vec<File>,
) -> Result<(u8, Option<File>), ProtocolError> {
    expect_size(h, body, 8)?;
    let v = u64_at(body, 0);
    if v & !(0xff | VRING_NOFD_MASK) != 0 {
        return Err(ProtocolError::BadValue {
            request: h.request,
            what: "vring index",
        });
    }
    if v & VRING_NOFD_MASK != 0 {
        expect_fds(h, &fds, 0)?;
        Ok((v as u8, None))
    } else {
        expect_fds(h, &fds, 1)?;
        Ok((v as u8, fds.pop()))
    }
}

fn vring_state(h: &Header, body: &[u8]) -> Result<(u32, u32), ProtocolError> {
    expect_size(h, body, 8)?;
    Ok((u32_at(body, 0), u32_at(body, 4)))
}

fn u64_body(h: &Header, body: &[u8]) -> Result<u64, ProtocolError> {
    expect_size(h, body, 8)?;
    Ok(u64_at(body, 0))
}

/// Turns a checked header, its body and the descriptors that came with it into a request.
pub fn parse_request(h: &Header, body: &[u8], fds: Vec<File>) -> Result<Request, ProtocolError> {
    use code::*;
    let fd_carrier = matches!(
        h.request,
        SET_MEM_TABLE | SET_VRING_KICK | SET_VRING_CALL | SET_VRING_ERR | SET_LOG_BASE | SET_LOG_FD
    );
    if !fd_carrier {
        expect_fds(h, &fds, 0)?;
    }
    let empty = |r: Request| expect_size(h, body, 0).map(|()| r);
    Ok(match h.request {
        GET_FEATURES => empty(Request::GetFeatures)?,
        SET_FEATURES => Request::SetFeatures(u64_body(h, body)?),
        SET_OWNER => empty(Request::SetOwner)?,
        RESET_OWNER => empty(Request::ResetOwner)?,
        SET_MEM_TABLE => Request::SetMemTable(mem_table(h, body, fds)?),
        SET_VRING_NUM => {
            let (index, num) = vring_state(h, body)?;
            Request::SetVringNum { index, num }
        }
        SET_VRING_ADDR => Request::SetVringAddr(vring_addr(h, body)?),
        SET_VRING_BASE => {
            let (index, num) = vring_state(h, body)?;
            Request::SetVringBase { index, num }
        }
        GET_VRING_BASE => {
            let (index, _) = vring_state(h, body)?;
            Request::GetVringBase { index }
        }
        SET_VRING_KICK => {
            let (index, fd) = vring_fd(h, body, fds)?;
            Request::SetVringKick { index, fd }
        }
        SET_VRING_CALL => {
            let (index, fd) = vring_fd(h, body, fds)?;
            Request::SetVringCall { index, fd }
        }
        SET_VRING_ERR => {
            let (index, fd) = vring_fd(h, body, fds)?;
            Request::SetVringErr { index, fd }
        }
        GET_PROTOCOL_FEATURES => empty(Request::GetProtocolFeatures)?,
        SET_PROTOCOL_FEATURES => Request::SetProtocolFeatures(u64_body(h, body)?),
        GET_QUEUE_NUM => empty(Request::GetQueueNum)?,
        SET_VRING_ENABLE => vring_enable(h, body)?,
        SEND_RARP => {
            expect_size(h, body, 8)?;
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&body[..6]);
            Request::SendRarp(mac)
        }
        SET_LOG_BASE => {
            expect_size(h, body, 16)?;
            Request::SetLogBase {
                size: u64_at(body, 0),
                offset: u64_at(body, 8),
                fd: one_fd(h, fds)?,
            }
        }
        SET_LOG_FD => {
            if body.len() > 8 {
                return Err(ProtocolError::BadSize {
                    request: h.request,
                    got: body.len(),
                    expected: 8,
                });
            }
            Request::SetLogFd(one_fd(h, fds)?)
        }
        NET_SET_MTU => Request::NetSetMtu(u64_body(h, body)?),
        RESET_DEVICE => empty(Request::ResetDevice)?,
        GET_MAX_MEM_SLOTS => empty(Request::GetMaxMemSlots)?,
        other => Request::Unsupported(other),
    })
}

/// SET_MEM_TABLE's regions, each with the descriptor that maps it.
fn mem_table(
    h: &Header,
    body: &[u8],
    fds: Vec<File>,
) -> Result<Vec<(MemoryRegion, File)>, ProtocolError> {
    if body.len() < 8 {
        return Err(ProtocolError::BadSize {
            request: h.request,
            got: body.len(),
            expected: 8,
        });
    }
    let n = u32_at(body, 0) as usize;
    if n == 0 || n > MAX_REGIONS {
        return Err(ProtocolError::BadValue {
            request: h.request,
            what: "region count",
        });
    }
    expect_size(h, body, 8 + 32 * n)?;
    expect_fds(h, &fds, n)?;
    let mut out = Vec::with_capacity(n);
    for (i, f) in fds.into_iter().enumerate() {
        out.push((memory_region(h, &body[8 + 32 * i..])?, f));
    }
    Ok(out)
}

/// One region of SET_MEM_TABLE: not empty, no end past 2^64.
fn memory_region(h: &Header, r: &[u8]) -> Result<MemoryRegion, ProtocolError> {
    let region = MemoryRegion {
        guest_phys_addr: u64_at(r, 0),
        memory_size: u64_at(r, 8),
        userspace_addr: u64_at(r, 16),
        mmap_offset: u64_at(r, 24),
    };
    if region.memory_size == 0
        || region
            .guest_phys_addr
            .checked_add(region.memory_size)
            .is_none()
        || region
            .userspace_addr
            .checked_add(region.memory_size)
            .is_none()
        || region.mmap_offset.checked_add(region.memory_size).is_none()
    {
        return Err(ProtocolError::BadValue {
            request: h.request,
            what: "memory region",
        });
    }
    Ok(region)
}

fn vring_addr(h: &Header, body: &[u8]) -> Result<VringAddr, ProtocolError> {
    expect_size(h, body, 40)?;
    Ok(VringAddr {
        index: u32_at(body, 0),
        flags: u32_at(body, 4),
        desc: u64_at(body, 8),
        used: u64_at(body, 16),
        avail: u64_at(body, 24),
        log: u64_at(body, 32),
    })
}

fn vring_enable(h: &Header, body: &[u8]) -> Result<Request, ProtocolError> {
    let (index, num) = vring_state(h, body)?;
    let enable = match num {
        0 => false,
        1 => true,
        _ => {
            return Err(ProtocolError::BadValue {
                request: h.request,
                what: "enable flag",
            })
        }
    };
    Ok(Request::SetVringEnable { index, enable })
}

/// A reply message carrying a u64 (features, acks, counts).
pub fn reply_u64(request: u32, value: u64) -> [u8; HEADER_LEN + 8] {
    let mut b = [0u8; HEADER_LEN + 8];
    b[..HEADER_LEN].copy_from_slice(
        &Header {
            request,
            flags: VERSION | FLAG_REPLY,
            size: 8,
        }
        .emit(),
    );
    b[HEADER_LEN..].copy_from_slice(&value.to_le_bytes());
    b
}

/// A reply message carrying a vring state (index, num).
pub fn reply_vring_state(request: u32, index: u32, num: u32) -> [u8; HEADER_LEN + 8] {
    let mut b = [0u8; HEADER_LEN + 8];
    b[..HEADER_LEN].copy_from_slice(
        &Header {
            request,
            flags: VERSION | FLAG_REPLY,
            size: 8,
        }
        .emit(),
    );
    b[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&index.to_le_bytes());
    b[HEADER_LEN + 4..].copy_from_slice(&num.to_le_bytes());
    b
}

/// Encodes a request (used by test front-ends and the fuzz target).
pub fn encode_request(request: u32, flags: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Header {
        request,
        flags: VERSION | flags,
        size: body.len() as u32,
    }
    .emit()
    .to_vec();
    v.extend_from_slice(body);
    v
}

#[cfg(test)]
mod tests;
