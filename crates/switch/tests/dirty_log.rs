//! Dirty-page logging for live migration, against a live switch with a
//! hand-driven front-end: the log arrives as QEMU sends it (SET_LOG_BASE
//! with a memfd, answered; VHOST_F_LOG_ALL; the rings' addresses again with
//! the log flag), frames are delivered into the guest's receive queue, and
//! exactly the pages the switch wrote are marked. Hostile logs reset only
//! their own port: a log that does not fit the memory table or its file,
//! one over the port's guest memory cap, one whose file is truncated
//! under the switch; a sparse log at a huge offset maps only its own
//! pages. A packed ring's descriptor rewritten after the switch popped it
//! does not move the marks away from the pages the switch wrote.

mod common;

use common::attacks::frame;
use common::packed::{F_AVAIL, F_WRITE};
use common::raw::{Order, RawFrontend, BUF, QSIZE};
use common::*;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};
use vnio_switch::daemon::WorkerHandle;
use vnio_switch::vhost_user::log::{bytes_for, pages};
use vnio_switch::vhost_user::protocol::code;

const LOG_ALL: u64 = 1 << 26;
const LOG_SHMFD: u64 = 1 << 1;

/// Shared memory for a log: an unlinked temporary file.
fn log_file(len: u64) -> File {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let p = std::env::temp_dir().join(format!(
        "vnio-test-log-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    std::fs::remove_file(&p).unwrap();
    f.set_len(len).unwrap();
    f
}

fn log_body(size: u64, offset: u64) -> Vec<u8> {
    let mut b = size.to_le_bytes().to_vec();
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

fn mem_size(g: &RawFrontend) -> u64 {
    g.mem.iter().map(vm_memory::GuestMemoryRegion::len).sum()
}

/// The set bits of the log's bitmap (`size` bytes at `offset`).
fn marked(f: &File, offset: u64, size: u64) -> BTreeSet<u64> {
    let mut b = vec![0u8; size as usize];
    f.read_exact_at(&mut b, offset).unwrap();
    let mut out = BTreeSet::new();
    for (i, byte) in b.iter().enumerate() {
        for bit in 0..8 {
            if byte & (1 << bit) != 0 {
                out.insert(i as u64 * 8 + bit);
            }
        }
    }
    out
}

/// Starts logging as QEMU does; returns the reply's request code and payload.
fn start_logging(g: &RawFrontend, log: &File, size: u64, offset: u64) -> (u32, u64) {
    g.send(
        code::SET_LOG_BASE,
        0,
        &log_body(size, offset),
        &[log.as_raw_fd()],
    )
    .unwrap();
    let mut r = [0u8; 20];
    (&g.sock).read_exact(&mut r).unwrap();
    let request = u32::from_le_bytes(r[..4].try_into().unwrap());
    let value = u64::from_le_bytes(r[12..].try_into().unwrap());
    g.send(
        code::SET_FEATURES,
        0,
        &(g.features | LOG_ALL).to_le_bytes(),
        &[],
    )
    .unwrap();
    for q in 0..2u32 {
        let used = if q == 0 {
            g.rx.layout.used
        } else {
            g.tx.layout.used
        };
        let mut b = g.vring_addr_body(q);
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[32..40].copy_from_slice(&used.to_le_bytes());
        g.send(code::SET_VRING_ADDR, 0, &b, &[]).unwrap();
    }
    let _ = g.get_u64(code::GET_FEATURES);
    (request, value)
}

fn rx_used_idx(g: &RawFrontend) -> u16 {
    g.mem
        .read_obj::<u16>(GuestAddress(g.rx.layout.used + 2))
        .unwrap()
}

/// Delivers `n` frames from `peer` into `g` and returns the pages the
/// switch had to write for them: the buffers' bytes, the used elements and
/// the used index.
fn deliver(g: &mut RawFrontend, peer: &mut RawFrontend, n: u16) -> BTreeSet<u64> {
    let before = rx_used_idx(g);
    for _ in 0..n {
        peer.send_frame(&frame(2));
        assert!(g.recv_frame(T).is_some(), "frame delivered");
    }
    let used = g.rx.layout.used;
    let mut want: BTreeSet<u64> = pages(used + 2, 2).collect();
    for k in 0..n {
        let slot = u64::from(before.wrapping_add(k) % QSIZE);
        let e = used + 4 + 8 * slot;
        want.extend(pages(e, 8));
        let id = g.mem.read_obj::<u32>(GuestAddress(e)).unwrap();
        let len = g.mem.read_obj::<u32>(GuestAddress(e + 4)).unwrap();
        assert!(len > 0);
        want.extend(pages(g.rx.layout.buffer(id as u16).0, u64::from(len)));
    }
    want
}

fn started(sw: &WorkerHandle, name: &str, g: &mut RawFrontend, features: u64, protocol: u64) {
    g.handshake_with(Order::Standard, features, protocol);
    wait_for(&format!("{name} running"), || port(sw, name).running);
}

#[test]
fn logging_marks_exactly_the_pages_the_switch_writes() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dirty-log");
        let sw = switch(&dir, 2);
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
        let mut peer = RawFrontend::connect(&dir.sock("p2"));
        started(sw.handle(), "p2", &mut peer, 0, 0);
        deliver(&mut g, &mut peer, 3);

        // QEMU's log: 64-bit chunks covering guest memory, here at an offset.
        let size = bytes_for(mem_size(&g)).div_ceil(8) * 8;
        let offset = 24;
        let log = log_file(offset + size);
        let (request, value) = start_logging(&g, &log, size, offset);
        assert_eq!(
            (request, value),
            (code::SET_LOG_BASE, 0),
            "SET_LOG_BASE answered"
        );
        // The switch switches the guest's notifications on and off (the
        // used rings' flags) when rings start and as it polls or sleeps:
        // those pages may be marked at any time.
        let flags: BTreeSet<u64> = pages(g.rx.layout.used, 2)
            .chain(pages(g.tx.layout.used, 2))
            .collect();
        assert!(
            marked(&log, offset, size).is_subset(&flags),
            "no frame written yet"
        );

        let want = deliver(&mut g, &mut peer, 40);
        wait_for("the written pages marked", || {
            marked(&log, offset, size).is_superset(&want)
        });
        let got = marked(&log, offset, size);
        let extra: Vec<_> = got
            .difference(&want)
            .filter(|p| !flags.contains(p))
            .collect();
        assert!(extra.is_empty(), "pages marked but not written: {extra:?}");
        // 40 frames of 2 KiB buffers cross many pages: the test is not trivial.
        assert!(want.len() > 10, "{want:?}");

        // Logging off: the features without LOG_ALL; nothing more is marked.
        g.send(code::SET_FEATURES, 0, &g.features.to_le_bytes(), &[])
            .unwrap();
        let _ = g.get_u64(code::GET_FEATURES);
        log.write_all_at(&vec![0u8; size as usize], offset).unwrap();
        deliver(&mut g, &mut peer, 5);
        assert!(
            marked(&log, offset, size).is_empty(),
            "marked with logging off"
        );
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}

#[test]
fn a_bad_log_resets_only_its_own_port() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dirty-log-bad");
        let sw = switch(&dir, 2);
        let mut peer = RawFrontend::connect(&dir.sock("p2"));
        started(sw.handle(), "p2", &mut peer, 0, 0);
        let mem = 2 << 20;
        let need = bytes_for(mem);
        let (sock, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let cases: Vec<(&str, File, u64, u64)> = vec![
            (
                "a socket, not memory",
                File::from(std::os::fd::OwnedFd::from(sock)),
                64,
                0,
            ),
            (
                "smaller than guest memory needs",
                log_file(4096),
                need / 2,
                0,
            ),
            ("larger than its file", log_file(4096), 8192, 0),
            ("huge", log_file(4096), 1 << 40, 0),
            ("offset past everything", log_file(4096), 64, u64::MAX - 8),
            ("offset past its file", log_file(4096), need, 1 << 40),
            (
                "larger than guest memory needs",
                log_file(need + 8192),
                need + 8192,
                0,
            ),
        ];
        for (what, file, size, offset) in cases {
            let mut g = RawFrontend::connect(&dir.sock("p1"));
            started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
            assert!(mem_size(&g) <= mem, "the test's memory fits its sizes");
            let resets = port(sw.handle(), "p1").stats.resets;
            g.send(
                code::SET_LOG_BASE,
                0,
                &log_body(size, offset),
                &[file.as_raw_fd()],
            )
            .unwrap();
            wait_for(&format!("{what}: reset"), || {
                port(sw.handle(), "p1").stats.resets > resets
            });
            assert!(g.closed(T), "{what}: connection closed");
            // The neighbour keeps forwarding.
            let before = port(sw.handle(), "p2").stats.tx.packets;
            peer.send_frame(&frame(2));
            wait_for(&format!("{what}: neighbour forwards"), || {
                port(sw.handle(), "p2").stats.tx.packets > before
            });
            assert_eq!(port(sw.handle(), "p2").stats.resets, 0);
        }
        // The port serves a well-behaved front-end afterwards, logging too.
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
        let size = bytes_for(mem_size(&g));
        let log = log_file(size);
        assert_eq!(start_logging(&g, &log, size, 0), (code::SET_LOG_BASE, 0));
    });
}

/// A sparse memfd of `len` bytes (tmpfs takes sizes far beyond a disk
/// file system's).
fn sparse_memfd(len: u64) -> File {
    // SAFETY: a NUL-terminated name; the descriptor is fresh and owned here.
    let f = unsafe {
        let fd = libc::memfd_create(c"vnio-test-log".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        <File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    };
    f.set_len(len).unwrap();
    f
}

/// This process's address space, in bytes (VmSize).
fn vm_size() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

/// The neighbour on p2 still forwards.
fn neighbour_forwards(sw: &WorkerHandle, peer: &mut RawFrontend, what: &str) {
    let before = port(sw, "p2").stats.tx.packets;
    peer.send_frame(&frame(2));
    wait_for(&format!("{what}: neighbour forwards"), || {
        port(sw, "p2").stats.tx.packets > before
    });
    assert_eq!(port(sw, "p2").stats.resets, 0);
}

/// A log 64 TiB into a sparse file: the switch maps its few pages, not
/// the 64 TiB below them (it once did, and a few dozen such ports used
/// up the address space), and marks them as any log.
#[test]
fn a_sparse_log_at_a_huge_offset_maps_only_its_pages() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dirty-log-sparse");
        let sw = switch(&dir, 2);
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
        let mut peer = RawFrontend::connect(&dir.sock("p2"));
        started(sw.handle(), "p2", &mut peer, 0, 0);
        let size = bytes_for(mem_size(&g)).div_ceil(8) * 8;
        let offset = (64u64 << 40) + 24;
        let log = sparse_memfd(offset + size);
        let before = vm_size();
        assert_eq!(
            start_logging(&g, &log, size, offset),
            (code::SET_LOG_BASE, 0)
        );
        let grown = vm_size().saturating_sub(before);
        // Other tests of this binary map memory meanwhile: megabytes, not
        // the 64 TiB an unbounded mapping takes.
        assert!(grown < 1 << 40, "address space grew by {grown} bytes");
        let want = deliver(&mut g, &mut peer, 5);
        wait_for("the written pages marked at the offset", || {
            marked(&log, offset, size).is_superset(&want)
        });
        neighbour_forwards(sw.handle(), &mut peer, "sparse log");
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}

/// The log's mapping counts against the port's guest memory cap: with a
/// cap its memory table fills, a log is refused and the port reset.
#[test]
fn a_log_over_the_memory_cap_is_refused() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dirty-log-cap");
        let sw = switch_tuned(&dir, 2, |s| s.max_guest_memory_mib = 2);
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
        assert_eq!(mem_size(&g), 2 << 20, "the table fills the cap");
        let mut peer = RawFrontend::connect(&dir.sock("p2"));
        started(sw.handle(), "p2", &mut peer, 0, 0);
        let size = bytes_for(mem_size(&g));
        let log = log_file(size);
        g.send(
            code::SET_LOG_BASE,
            0,
            &log_body(size, 0),
            &[log.as_raw_fd()],
        )
        .unwrap();
        wait_for("over the cap: reset", || {
            port(sw.handle(), "p1").stats.resets > 0
        });
        assert!(g.closed(T), "connection closed");
        neighbour_forwards(sw.handle(), &mut peer, "log over the cap");
    });
}

/// A log whose file is truncated while the switch marks it: the switch
/// survives the fault, resets that port, and its neighbour goes on.
#[test]
fn a_truncated_log_resets_only_its_port() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dirty-log-trunc");
        let sw = switch(&dir, 2);
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
        let mut peer = RawFrontend::connect(&dir.sock("p2"));
        started(sw.handle(), "p2", &mut peer, 0, 0);
        let size = bytes_for(mem_size(&g));
        let log = sparse_memfd(size);
        assert_eq!(start_logging(&g, &log, size, 0), (code::SET_LOG_BASE, 0));
        log.set_len(0).unwrap();
        // Frames into p1 make the switch mark the vanished log.
        peer.send_frame(&frame(2));
        wait_for("truncated log: reset", || {
            port(sw.handle(), "p1").stats.resets > 0
        });
        neighbour_forwards(sw.handle(), &mut peer, "truncated log");
    });
}

/// A receive ring whose driver rewrites a descriptor after the switch
/// popped its chain (here: points it at a transmit buffer, which the
/// switch never writes): the switch wrote into the chain as popped, and
/// those pages are marked, not the ones the ring names by then. Packed
/// (the issue as found) and split rings alike.
fn rewritten_after_the_pop(packed: bool) {
    let dir = Dir::new(if packed {
        "dirty-log-packed"
    } else {
        "dirty-log-rewrite"
    });
    let sw = switch(&dir, 2);
    let mut g = if packed {
        RawFrontend::connect_packed(&dir.sock("p1"), false)
    } else {
        RawFrontend::connect(&dir.sock("p1"))
    };
    started(sw.handle(), "p1", &mut g, 0, LOG_SHMFD);
    let mut peer = RawFrontend::connect(&dir.sock("p2"));
    started(sw.handle(), "p2", &mut peer, 0, 0);
    let size = bytes_for(mem_size(&g)).div_ceil(8) * 8;
    let log = log_file(size);
    assert_eq!(start_logging(&g, &log, size, 0), (code::SET_LOG_BASE, 0));
    // Buffer 0 takes a first frame; idle, the switch then pops the next
    // chain ahead (buffer 1: descriptor 1, or packed ring slot 1).
    peer.send_frame(&frame(2));
    assert!(g.recv_frame(T).is_some(), "first frame delivered");
    std::thread::sleep(Duration::from_millis(500));
    let (rx, elsewhere) = (g.rx.layout, g.tx.layout.buffer(5).0);
    match g.packed.as_ref() {
        Some([ring, _]) => ring.put(&g.mem, 1, elsewhere, BUF, 1, F_WRITE | F_AVAIL),
        None => g.rx_desc(1, elsewhere, BUF, F_WRITE, 0),
    }
    // Cleared, as QEMU does as it copies: the first frame's marks (on
    // buffer 1's page too) are gone.
    log.write_all_at(&vec![0u8; size as usize], 0).unwrap();
    let mut f = frame(2);
    f[20..24].copy_from_slice(b"mark");
    peer.send_frame(&f);
    let got = g.recv_frame(T).expect("second frame delivered");
    assert_eq!(got, f, "written into buffer 1, popped before the rewrite");
    let written: BTreeSet<u64> = pages(rx.buffer(1).0, 12 + f.len() as u64).collect();
    wait_for("the pages written marked", || {
        marked(&log, 0, size).is_superset(&written)
    });
    let got = marked(&log, 0, size);
    assert!(
        !got.contains(&(elsewhere / 4096)),
        "the rewritten descriptor's page marked: {got:?}"
    );
    assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
}

#[test]
fn a_packed_descriptor_rewritten_after_the_pop_leaves_the_marks_on_the_pages_written() {
    bounded(Duration::from_secs(60), || rewritten_after_the_pop(true));
}

#[test]
fn a_split_descriptor_rewritten_after_the_pop_leaves_the_marks_on_the_pages_written() {
    bounded(Duration::from_secs(60), || rewritten_after_the_pop(false));
}
