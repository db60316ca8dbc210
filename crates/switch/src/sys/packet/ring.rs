//! The TPACKET_V2 ring both directions use: the mapping the kernel shares
//! with the process, and the audited accesses to a slot's status word,
//! header fields and data. Separate because every access to the memory
//! shared with the kernel is here, in one place to review.

use super::{setsockopt, TpacketReq, MAX_FRAME_SIZE, SOL_PACKET};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// A mapped TPACKET_V2 ring on a socket: `frames` slots of `frame_size` bytes.
#[derive(Debug)]
pub(super) struct Ring {
    base: *mut u8,
    len: usize,
    /// Bytes per slot.
    pub(super) frame_size: usize,
    frames: usize,
    head: usize,
}

// SAFETY: the mapping is owned by the ring (unmapped on drop) and reached
// only through `&mut Ring`; moving it to another thread moves that ownership.
unsafe impl Send for Ring {}

impl Ring {
    /// Sets up ring `which` (PACKET_RX_RING or PACKET_TX_RING) on `fd` and maps it.
    pub(super) fn new(
        fd: RawFd,
        which: libc::c_int,
        frame_size: usize,
        frames: usize,
    ) -> io::Result<Self> {
        if !frame_size.is_power_of_two() || !(2048..=MAX_FRAME_SIZE).contains(&frame_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring frame size must be a power of two between 2 KiB and 128 KiB",
            ));
        }
        // Blocks of 64 KiB (or one frame when larger): frames never straddle
        // a block, so frame i is at i * frame_size.
        let block_size = frame_size.max(1 << 16);
        let per_block = block_size / frame_size;
        let frames = frames.max(per_block).div_ceil(per_block) * per_block;
        let req = TpacketReq {
            block_size: block_size as u32,
            block_nr: (frames / per_block) as u32,
            frame_size: frame_size as u32,
            frame_nr: frames as u32,
        };
        setsockopt(fd, SOL_PACKET, which, &req)?;
        let len = frames * frame_size;
        // SAFETY: a fresh shared mapping of the ring the kernel just set up
        // on `fd`, of exactly its size; nothing else aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
            frame_size,
            frames,
            head: 0,
        })
    }

    /// The status word of the frame at `head`.
    pub(super) fn status(&self) -> &AtomicU32 {
        // SAFETY: `head < frames`, so the frame start is inside the mapping;
        // frames are 2 KiB aligned and the kernel accesses the word
        // atomically too (smp_store_release / smp_load_acquire).
        unsafe {
            &*(self
                .base
                .add(self.head * self.frame_size)
                .cast::<AtomicU32>())
        }
    }

    /// The header field at `off` (a u16 or u32) of the frame at `head`.
    pub(super) fn field<T: Copy>(&self, off: usize) -> T {
        // SAFETY: `off` is inside the 32-byte header of a frame inside the
        // mapping, aligned for T; the frame belongs to user space (checked
        // by the caller through the status word with acquire ordering).
        unsafe {
            std::ptr::read_volatile(self.base.add(self.head * self.frame_size + off).cast::<T>())
        }
    }

    pub(super) fn set_field<T: Copy>(&mut self, off: usize, v: T) {
        // SAFETY: as in `field`; the frame belongs to user space until its
        // status is handed back.
        unsafe {
            std::ptr::write_volatile(
                self.base.add(self.head * self.frame_size + off).cast::<T>(),
                v,
            )
        }
    }

    /// Bytes `from..frame_size` of the frame at `head`.
    pub(super) fn data(&mut self, from: usize) -> &mut [u8] {
        // SAFETY: the range is inside the frame at `head`, inside the
        // mapping. The frame belongs to user space (the caller saw its
        // status with acquire ordering) until `advance` hands it back, and
        // `&mut self` keeps this the only reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base.add(self.head * self.frame_size + from),
                self.frame_size - from,
            )
        }
    }

    /// Hands the frame at `head` over with `status` and moves on.
    pub(super) fn advance(&mut self, status: u32) {
        self.status().store(status, Ordering::Release);
        self.head += 1;
        if self.head == self.frames {
            self.head = 0;
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference
        // into it outlives `&mut self`.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}
