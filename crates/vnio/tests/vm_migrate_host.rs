//! `vnio vm migrate NAME --to HOST` end to end: HOST is machine m1 of
//! scripts/lab-machines (network namespace vnio-m1 with its own sshd,
//! sharing this file system), running its own vnio switch; the two switches
//! are joined by a VXLAN port each over the machines' 10.99.0.0/24 network.
//! Guest A stays here, guest B (TCG) moves to m1 over TLS (certificates
//! from `vnio vm tls init`) while A pings it every 10 ms and B streams to
//! A: at most 5% of the pings lost, the stream arrives with the sender's
//! md5, B answers afterwards from a QEMU in vnio-m1 booted from the image
//! copied into m1's cache (`--remote-cache`), `vnio vm list` and `stop` on
//! m1 see and remove it, and nothing is left on either side. A capture of
//! the underlay (tcpdump on vniom0) during the migration holds none of a
//! marker that fills a file in B's memory; as a control, A then moves with
//! `--insecure` and its marker is in that capture.
//!
//! Before that, each refused in one line, the guest running on here and
//! nothing left on m1: a migration without certificates (and without
//! `--insecure`), into a helper directory others can write, to an m1 whose
//! switch control socket is missing, to an unreachable m1, with
//! certificates of another CA on either end, and one whose destination
//! QEMU is killed while the guest's memory arrives; a binary planted under
//! the copy's name is replaced, never run. `vnio vm wait-agent` from a
//! namespace with no route of its own to the guests uses the command
//! channel at once.
//!
//! Needs root, sshd and ssh, tcpdump, QEMU and the guests' static vnio
//! (else one `skip:` line).

mod machines;
mod migrate_host;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use machines::{ready_or_skip, Machines};
use migrate_host::bed::Bed;
use migrate_host::{moved, refused};
use vnio_vm::testkit::{bounded, Kit};

pub const VNIO: &str = env!("CARGO_BIN_EXE_vnio");
/// The VNI joining the two switches.
pub const VNI: u32 = 4242;
/// This host's and m1's addresses on the machines' network (scripts/lab-machines).
pub const HERE: &str = "10.99.0.1";
pub const M1: &str = "10.99.0.2";

/// Kills and reaps a child when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_guest_migrates_to_another_machine_under_ping_and_tcp() {
    if !ready_or_skip() {
        return;
    }
    if Command::new("tcpdump").arg("--version").output().is_err() {
        eprintln!("skip: no tcpdump (scripts/setup --e2e installs it)");
        return;
    }
    let Some(kit) = Kit::get("live migration to another machine") else {
        return;
    };
    let started = Instant::now();
    let _machines = Machines::up();
    bounded(Duration::from_secs(600), move || to_m1(kit));
    println!(
        "migration to m1: {:.0} s in all",
        started.elapsed().as_secs_f64()
    );
}

/// The whole test, step by step, on one test bed.
fn to_m1(kit: Kit) {
    let bed = Bed::up(kit);
    refused::without_certificates(&bed);
    let planted = refused::into_a_writable_directory(&bed);
    refused::without_a_switch_on_m1(&bed, &planted);
    refused::to_an_unreachable_m1(&bed);
    refused::with_another_ca(&bed);
    refused::when_the_destination_dies(&bed);
    let (remote, new_pid) = moved::over_tls(&bed);
    moved::stopped_on_m1(&bed, &remote, &new_pid);
    moved::insecure_control(&bed);
}
