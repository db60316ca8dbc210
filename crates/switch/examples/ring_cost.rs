//! The ring layer's own cost per frame, split against packed virtqueues:
//! one thread plays the driver and the device (`ActiveQueue`) of a
//! transmit queue (the device pops bursts of 32 and returns them) and of a
//! receive queue (the device takes one chain per frame and returns it with
//! a length), on the same memory, so no line crosses cores. The layouts
//! alternate round by round; the medians and the ratio packed/split are
//! printed. The drivers are the split one of the poll-mode endpoint and the
//! packed one of the tests (`vnio_switch_testkit::packed`).
//!
//! `cargo run --release -p vnio-switch --example ring_cost [-- SECONDS [ROUNDS]]`
//!
//! Only the device's side is timed (the two drivers are not alike). Under
//! `valgrind --tool=callgrind` with `-- 0 1 FRAMES split` (or `packed`) it
//! runs FRAMES frames of that layout in each direction once: the inclusive
//! instruction count of `Pair::device` divided by 2 FRAMES is a measure
//! this host's noise does not move.

use std::sync::Arc;
use std::time::{Duration, Instant};
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap};
use vnio_switch::endpoint::ring::{DriverRing, RingLayout};
use vnio_switch::vhost_user::chain::Chain;
use vnio_switch::vhost_user::memory::{GuestMem, DEFAULT_MAX_MEMORY};
use vnio_switch::vhost_user::protocol::MemoryRegion;
use vnio_switch::vhost_user::queue::{ActiveQueue, Burst, PackedFeatures, RingAddrs};
use vnio_switch_testkit::packed::PackedRing;

const SIZE: u16 = 256;
const BURST: usize = 32;
const MEM: u64 = 8 << 20;

/// A queue and its driver, of either layout.
enum Driver {
    Split(DriverRing),
    Packed(PackedRing),
}

struct Pair {
    q: ActiveQueue,
    d: Driver,
    writable: bool,
}

fn addrs(l: &RingLayout) -> RingAddrs {
    RingAddrs {
        desc: GuestAddress(l.desc),
        avail: GuestAddress(l.avail),
        used: GuestAddress(l.used),
    }
}

impl Pair {
    fn new(
        mem: &GuestMemoryMmap,
        dev: &Arc<GuestMem>,
        base: u64,
        packed: bool,
        writable: bool,
    ) -> Self {
        let l = RingLayout::at(base, SIZE, 2048);
        let (q, d) = if packed {
            let f = PackedFeatures {
                event_idx: false,
                in_order: true,
                indirect: false,
            };
            let q =
                ActiveQueue::start_packed(dev.clone(), SIZE, addrs(&l), 0x8000, f, None, writable);
            (q.expect("packed queue"), Driver::Packed(PackedRing::new(l)))
        } else {
            let q = ActiveQueue::start(dev.clone(), SIZE, addrs(&l), 0, false, None, writable);
            (
                q.expect("split queue"),
                Driver::Split(DriverRing::new(mem, l, false).expect("ring inside memory")),
            )
        };
        Self { q, d, writable }
    }

    /// The driver offers `n` buffers of 64 bytes (2 KiB when the device writes).
    fn offer(&mut self, mem: &GuestMemoryMmap, n: usize) {
        let len = if self.writable { 2048 } else { 64 };
        match &mut self.d {
            Driver::Split(r) => {
                r.stage();
                for _ in 0..n {
                    let id = r.take().expect("a free buffer");
                    r.publish(id, len, self.writable);
                }
                r.flush();
            }
            Driver::Packed(r) => {
                for _ in 0..n {
                    let id = r.take().expect("a free buffer");
                    r.publish(mem, id, len, self.writable);
                }
            }
        }
    }

    /// The driver takes back what the device used.
    fn reap(&mut self, mem: &GuestMemoryMmap) -> usize {
        let mut n = 0;
        match &mut self.d {
            Driver::Split(r) => {
                while let Some((id, _)) = r.reap() {
                    r.release(id);
                    n += 1;
                }
            }
            Driver::Packed(r) => {
                let before = r.available();
                while let Some((id, _)) = r.reap(mem) {
                    r.release(id);
                }
                n = r.available() - before;
            }
        }
        n
    }

    /// One burst through the device: popped and returned together
    /// (transmit), or taken one by one and returned with a length
    /// (receive), as the datapath does.
    #[inline(never)]
    fn device(&mut self, b: &mut Burst, c: &mut Chain) {
        if self.writable {
            for _ in 0..BURST {
                assert!(self.q.take(c, BURST).unwrap(), "a receive buffer");
                self.q.add_used(c.head(), 60).unwrap();
            }
        } else {
            self.q.pop_burst(b, BURST).unwrap();
            assert_eq!(b.len(), BURST);
            // As the datapath returns a transmit burst.
            self.q.add_used_burst(b, b.len()).unwrap();
        }
        self.q.flush();
    }
}

/// `frames` frames through the pair; the device's time (the drivers'
/// work is not counted: the two drivers are not alike).
fn run(p: &mut Pair, mem: &GuestMemoryMmap, frames: u64) -> Duration {
    let (mut b, mut c) = (Burst::new(), Chain::new());
    let mut spent = Duration::ZERO;
    let mut done = 0;
    while done < frames {
        p.offer(mem, BURST);
        let t = Instant::now();
        p.device(&mut b, &mut c);
        spent += t.elapsed();
        let n = p.reap(mem);
        assert_eq!(n, BURST, "every buffer came back");
        done += n as u64;
    }
    spent
}

#[inline(never)]
fn split(p: &mut Pair, mem: &GuestMemoryMmap, frames: u64) -> Duration {
    run(p, mem, frames)
}

#[inline(never)]
fn packed(p: &mut Pair, mem: &GuestMemoryMmap, frames: u64) -> Duration {
    run(p, mem, frames)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(0.5);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(9);
    let fixed: Option<u64> = args.next().map(|a| a.parse()).transpose()?;
    let only = args.next();
    let file = tempfile()?;
    let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
        GuestAddress(0),
        MEM as usize,
        Some(FileOffset::new(file.try_clone()?, 0)),
    )])?;
    let region = MemoryRegion {
        guest_phys_addr: 0,
        memory_size: MEM,
        userspace_addr: 0,
        mmap_offset: 0,
    };
    let dev = Arc::new(GuestMem::from_table(
        vec![(region, file)],
        DEFAULT_MAX_MEMORY,
    )?);
    let span = RingLayout::at(0, SIZE, 2048).end().div_ceil(4096) * 4096;
    for (what, writable) in [("transmit (pop_burst)", false), ("receive (take)", true)] {
        let at = if writable { 2 * span } else { 0 };
        let mut s = Pair::new(&mem, &dev, at, false, writable);
        let mut k = Pair::new(&mem, &dev, at + span, true, writable);
        if let Some(frames) = fixed {
            if only.as_deref() != Some("packed") {
                split(&mut s, &mem, frames);
            }
            if only.as_deref() != Some("split") {
                packed(&mut k, &mem, frames);
            }
            continue;
        }
        // Warm both, then measure how many frames fill `secs`.
        let probe = 32 * 1024;
        let per = run(&mut s, &mem, probe).as_secs_f64() / probe as f64;
        run(&mut k, &mem, probe);
        let frames = ((secs / per) as u64).max(probe) / 32 * 32;
        let (mut ns, mut nk, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let a = split(&mut s, &mem, frames).as_nanos() as f64 / frames as f64;
            let b = packed(&mut k, &mem, frames).as_nanos() as f64 / frames as f64;
            ns.push(a);
            nk.push(b);
            ratio.push(b / a);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{what}: split {:.1} ns/frame, packed {:.1} ns/frame, packed/split {:.2} (median of {rounds} alternating rounds of {frames} frames)",
            med(&mut ns),
            med(&mut nk),
            med(&mut ratio)
        );
    }
    Ok(())
}

/// An unlinked temporary file as the shared memory.
fn tempfile() -> std::io::Result<std::fs::File> {
    let p = std::env::temp_dir().join(format!("vnio-ring-cost-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)?;
    std::fs::remove_file(&p)?;
    f.set_len(MEM)?;
    Ok(f)
}
