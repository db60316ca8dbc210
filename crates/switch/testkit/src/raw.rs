//! A hand-driven vhost-user front-end for tests: every request is sent
//! explicitly (so orderings like QEMU 7.2's can be reproduced), and the
//! rings live in shared memory the test can scribble on (hostile chains).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use vm_memory::{Address, Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use vnio_switch::endpoint::ring::{DriverRing, RingLayout};
use vnio_switch::vhost_user::protocol::{code, encode_request};

use crate::packed::PackedRing;

pub const QSIZE: u16 = 256;
pub const BUF: u32 = 2048;
const VERSION_1: u64 = 1 << 32;
const PROTOCOL_FEATURES: u64 = 1 << 30;
const MRG_RXBUF: u64 = 1 << 15;
pub const EVENT_IDX: u64 = 1 << 29;
const RING_PACKED: u64 = 1 << 34;

/// Which order the handshake uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Order {
    /// Features, memory, rings, then SET_VRING_ENABLE.
    Standard,
    /// QEMU 7.2: SET_VRING_ENABLE before SET_FEATURES, never again.
    Qemu72,
}

pub struct RawFrontend {
    pub sock: UnixStream,
    pub mem: GuestMemoryMmap,
    memfd: File,
    pub base_va: u64,
    pub rx: DriverRing,
    pub tx: DriverRing,
    pub kick: [EventFd; 2],
    pub call: [EventFd; 2],
    pub features: u64,
    /// Packed rings (receive, transmit) instead of `rx` and `tx`, over the
    /// same layouts.
    pub packed: Option<[PackedRing; 2]>,
}

fn memfd(size: u64) -> File {
    // A regular unlinked temp file works as shared memory for the mapping.
    let p = std::env::temp_dir().join(format!(
        "vnio-raw-mem-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    std::fs::remove_file(&p).unwrap();
    f.set_len(size).unwrap();
    f
}

impl RawFrontend {
    pub fn connect(path: &Path) -> Self {
        Self::connect_with(path, false)
    }

    /// Like [`RawFrontend::connect`]; `blocking`: kick and call eventfds
    /// without EFD_NONBLOCK (legal: the spec does not ask for it).
    pub fn connect_with(path: &Path, blocking: bool) -> Self {
        let deadline = Instant::now() + Duration::from_secs(5);
        let sock = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("connect {}: {e}", path.display()),
            }
        };
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let rx_l = RingLayout::at(0, QSIZE, BUF);
        let tx_l = RingLayout::at(rx_l.end().div_ceil(4096) * 4096, QSIZE, BUF);
        let size = tx_l.end().div_ceil(1 << 20) * (1 << 20);
        let memfd = memfd(size);
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0),
            size as usize,
            Some(FileOffset::new(memfd.try_clone().unwrap(), 0)),
        )])
        .unwrap();
        let base_va = mem.get_host_address(GuestAddress(0)).unwrap() as u64;
        let rx = DriverRing::new(&mem, rx_l, false).expect("ring inside memory");
        let tx = DriverRing::new(&mem, tx_l, false).expect("ring inside memory");
        let flags = if blocking { 0 } else { EFD_NONBLOCK };
        let ev = || EventFd::new(flags).unwrap();
        Self {
            sock,
            mem,
            memfd,
            base_va,
            rx,
            tx,
            kick: [ev(), ev()],
            call: [ev(), ev()],
            features: 0,
            packed: None,
        }
    }

    /// Like [`RawFrontend::connect_with`], on packed rings.
    pub fn connect_packed(path: &Path, blocking: bool) -> Self {
        let mut h = Self::connect_with(path, blocking);
        h.packed = Some([PackedRing::new(h.rx.layout), PackedRing::new(h.tx.layout)]);
        h
    }

    pub fn send(
        &self,
        request: u32,
        flags: u32,
        body: &[u8],
        fds: &[RawFd],
    ) -> std::io::Result<()> {
        let m = encode_request(request, flags, body);
        if fds.is_empty() {
            (&self.sock).write_all(&m)
        } else {
            self.sock
                .send_with_fds(&[&m[..]], fds)
                .map(|_| ())
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
        }
    }

    /// Reads one 20-byte reply and returns its u64 payload.
    pub fn reply_u64(&self) -> std::io::Result<u64> {
        let mut b = [0u8; 20];
        (&self.sock).read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b[12..20].try_into().unwrap()))
    }

    pub fn get_u64(&self, request: u32) -> u64 {
        self.send(request, 0, &[], &[]).unwrap();
        self.reply_u64().unwrap()
    }

    fn state(index: u32, num: u32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&index.to_le_bytes());
        b[4..].copy_from_slice(&num.to_le_bytes());
        b
    }

    pub fn mem_table_body(&self) -> Vec<u8> {
        let mut body = vec![0u8; 8 + 32];
        body[0] = 1;
        let size = self
            .mem
            .iter()
            .next()
            .map(vm_memory::GuestMemoryRegion::len)
            .unwrap();
        body[8 + 8..8 + 16].copy_from_slice(&size.to_le_bytes());
        body[8 + 16..8 + 24].copy_from_slice(&self.base_va.to_le_bytes());
        body
    }

    pub fn vring_addr_body(&self, q: u32) -> Vec<u8> {
        let l = if q == 0 {
            self.rx.layout
        } else {
            self.tx.layout
        };
        self.addr_body(q, l)
    }

    /// SET_VRING_ADDR's body for vring `q` at `l` in this front-end's memory.
    fn addr_body(&self, q: u32, l: RingLayout) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[..4].copy_from_slice(&q.to_le_bytes());
        b[8..16].copy_from_slice(&(self.base_va + l.desc).to_le_bytes());
        b[16..24].copy_from_slice(&(self.base_va + l.used).to_le_bytes());
        b[24..32].copy_from_slice(&(self.base_va + l.avail).to_le_bytes());
        b
    }

    /// Starts vring `q` at `layout` (in this front-end's memory), with
    /// `kick` and `call`, enabled; returns once the switch processed it
    /// (a round trip follows). For rings beyond the handshake's two.
    pub fn start_vring(&self, q: u32, layout: RingLayout, kick: &EventFd, call: &EventFd) {
        let q64 = u64::from(q).to_le_bytes();
        let num = Self::state(q, u32::from(layout.size));
        self.send(code::SET_VRING_NUM, 0, &num, &[]).unwrap();
        self.send(code::SET_VRING_ADDR, 0, &self.addr_body(q, layout), &[])
            .unwrap();
        self.send(code::SET_VRING_BASE, 0, &Self::state(q, 0), &[])
            .unwrap();
        self.send(code::SET_VRING_CALL, 0, &q64, &[call.as_raw_fd()])
            .unwrap();
        self.send(code::SET_VRING_KICK, 0, &q64, &[kick.as_raw_fd()])
            .unwrap();
        self.send(code::SET_VRING_ENABLE, 0, &Self::state(q, 1), &[])
            .unwrap();
        let _ = self.get_u64(code::GET_FEATURES);
    }

    /// The whole handshake; RX buffers are posted before the rings start.
    pub fn handshake(&mut self, order: Order) {
        self.handshake_with(order, 0, 0);
    }

    /// Like [`RawFrontend::handshake`], also acking the `features` and
    /// `protocol` feature bits (which the switch must offer).
    pub fn handshake_with(&mut self, order: Order, features: u64, protocol: u64) {
        self.send(code::SET_OWNER, 0, &[], &[]).unwrap();
        let offered = self.get_u64(code::GET_FEATURES);
        assert!(offered & VERSION_1 != 0);
        assert_eq!(offered & features, features, "features offered");
        self.features = offered & (VERSION_1 | PROTOCOL_FEATURES | MRG_RXBUF) | features;
        if self.packed.is_some() {
            assert!(offered & RING_PACKED != 0, "packed rings offered");
            self.features |= RING_PACKED;
        }
        let pf = self.get_u64(code::GET_PROTOCOL_FEATURES);
        assert_eq!(pf & protocol, protocol, "protocol features offered");
        self.send(code::SET_PROTOCOL_FEATURES, 0, &protocol.to_le_bytes(), &[])
            .unwrap();
        if order == Order::Qemu72 {
            for q in 0..2 {
                self.send(code::SET_VRING_ENABLE, 0, &Self::state(q, 1), &[])
                    .unwrap();
            }
        }
        self.send(code::SET_FEATURES, 0, &self.features.to_le_bytes(), &[])
            .unwrap();
        self.send(
            code::SET_MEM_TABLE,
            0,
            &self.mem_table_body(),
            &[self.memfd.as_raw_fd()],
        )
        .unwrap();
        if let Some([rx, _]) = self.packed.as_mut() {
            while let Some(id) = rx.take() {
                rx.publish(&self.mem, id, BUF, true);
            }
        } else {
            while let Some(id) = self.rx.take() {
                self.rx.publish(id, BUF, true);
            }
        }
        // Packed: slot 0 in the first lap (the wrap counter starts at 1).
        let base = if self.packed.is_some() { 0x8000 } else { 0 };
        for q in 0..2u32 {
            self.send(
                code::SET_VRING_NUM,
                0,
                &Self::state(q, u32::from(QSIZE)),
                &[],
            )
            .unwrap();
            self.send(code::SET_VRING_ADDR, 0, &self.vring_addr_body(q), &[])
                .unwrap();
            self.send(code::SET_VRING_BASE, 0, &Self::state(q, base), &[])
                .unwrap();
            self.send(
                code::SET_VRING_CALL,
                0,
                &u64::from(q).to_le_bytes(),
                &[self.call[q as usize].as_raw_fd()],
            )
            .unwrap();
            self.send(
                code::SET_VRING_KICK,
                0,
                &u64::from(q).to_le_bytes(),
                &[self.kick[q as usize].as_raw_fd()],
            )
            .unwrap();
        }
        if order == Order::Standard {
            for q in 0..2 {
                self.send(code::SET_VRING_ENABLE, 0, &Self::state(q, 1), &[])
                    .unwrap();
            }
        }
        // A round trip proves everything before it was processed.
        let _ = self.get_u64(code::GET_FEATURES);
    }

    pub fn hdr_len(&self) -> usize {
        12
    }

    pub fn send_frame(&mut self, frame: &[u8]) {
        assert!(self.try_send_frame(frame), "tx descriptor");
    }

    /// True once every frame sent so far was taken by the switch.
    pub fn tx_reaped(&mut self) -> bool {
        if let Some([_, tx]) = self.packed.as_mut() {
            while let Some((id, _)) = tx.reap(&self.mem) {
                tx.release(id);
            }
            return tx.available() == usize::from(QSIZE);
        }
        while let Some((id, _)) = self.tx.reap() {
            self.tx.release(id);
        }
        self.tx.available() == usize::from(QSIZE)
    }

    /// Like [`RawFrontend::send_frame`], but false (nothing sent) while the
    /// switch has not yet taken back a transmit descriptor.
    pub fn try_send_frame(&mut self, frame: &[u8]) -> bool {
        if let Some([_, tx]) = self.packed.as_mut() {
            while let Some((id, _)) = tx.reap(&self.mem) {
                tx.release(id);
            }
            let Some(id) = tx.take() else {
                return false;
            };
            let at = tx.layout.buffer(id);
            self.mem.write_slice(&[0u8; 12], at).unwrap();
            self.mem.write_slice(frame, at.unchecked_add(12)).unwrap();
            tx.publish(&self.mem, id, 12 + frame.len() as u32, false);
            self.kick[1].write(1).unwrap();
            return true;
        }
        while let Some((id, _)) = self.tx.reap() {
            self.tx.release(id);
        }
        let Some(id) = self.tx.take() else {
            return false;
        };
        let at = self.tx.layout.buffer(id);
        self.mem.write_slice(&[0u8; 12], at).unwrap();
        self.mem.write_slice(frame, at.unchecked_add(12)).unwrap();
        self.tx.publish(id, 12 + frame.len() as u32, false);
        self.kick[1].write(1).unwrap();
        true
    }

    pub fn recv_frame(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some([rx, _]) = self.packed.as_mut() {
                if let Some((id, len)) = rx.reap(&self.mem) {
                    let mut v = vec![0u8; len as usize - 12];
                    self.mem
                        .read_slice(&mut v, rx.layout.buffer(id).unchecked_add(12))
                        .unwrap();
                    rx.publish(&self.mem, id, BUF, true);
                    return Some(v);
                }
            } else if let Some((id, len)) = self.rx.reap() {
                let mut v = vec![0u8; len as usize - 12];
                self.mem
                    .read_slice(&mut v, self.rx.layout.buffer(id).unchecked_add(12))
                    .unwrap();
                self.rx.publish(id, BUF, true);
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Writes descriptor `i` of the transmit queue.
    pub fn tx_desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let d = GuestAddress(self.tx.layout.desc + 16 * u64::from(i));
        self.mem.write_obj(addr, d).unwrap();
        self.mem.write_obj(len, d.unchecked_add(8)).unwrap();
        self.mem.write_obj(flags, d.unchecked_add(12)).unwrap();
        self.mem.write_obj(next, d.unchecked_add(14)).unwrap();
    }

    /// Writes descriptor `i` of the receive queue.
    pub fn rx_desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let d = GuestAddress(self.rx.layout.desc + 16 * u64::from(i));
        self.mem.write_obj(addr, d).unwrap();
        self.mem.write_obj(len, d.unchecked_add(8)).unwrap();
        self.mem.write_obj(flags, d.unchecked_add(12)).unwrap();
        self.mem.write_obj(next, d.unchecked_add(14)).unwrap();
    }

    /// Offers head `head` on the transmit queue at avail slot `slot` and sets avail.idx to `idx`, then kicks.
    pub fn tx_offer(&self, slot: u16, head: u16, idx: u16) {
        let l = self.tx.layout;
        self.mem
            .write_obj(
                head,
                GuestAddress(l.avail + 4 + 2 * u64::from(slot % l.size)),
            )
            .unwrap();
        self.mem.write_obj(idx, GuestAddress(l.avail + 2)).unwrap();
        self.kick[1].write(1).unwrap();
    }

    /// The file behind the shared memory (to truncate it under the switch).
    pub fn memory_file(&self) -> &File {
        &self.memfd
    }

    /// Sends SET_MEM_TABLE announcing `size` bytes of memory (more than
    /// the file has, when hostile).
    pub fn send_mem_table_of(&self, size: u64) {
        let mut b = self.mem_table_body();
        b[16..24].copy_from_slice(&size.to_le_bytes());
        self.send(code::SET_MEM_TABLE, 0, &b, &[self.memfd.as_raw_fd()])
            .unwrap();
    }

    /// True when the switch closed the connection.
    pub fn closed(&self, timeout: Duration) -> bool {
        self.sock.set_read_timeout(Some(timeout)).unwrap();
        let mut b = [0u8; 64];
        matches!((&self.sock).read(&mut b), Ok(0))
            || matches!((&self.sock).read(&mut b), Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    }
}
