//! Guests as lab hosts, through the vm crate as a library: the image and
//! the accelerator are settled once per run ([`GuestKit`]), then each VM
//! host of a configuration is one QEMU ([`Guest`]) with its state directory
//! in the testbed's scratch directory, its NIC on the testbed's wire, and
//! the vnio agent started by the guest's init.
//!
//! QEMU is journaled right after it is spawned (the launcher does it), so a
//! run killed with SIGKILL leaves nothing `vnio lab clean` cannot remove:
//! QEMU dies, its taps go with it, and its sockets and state go with the
//! scratch directory. On the normal path dropping a [`Guest`] runs the
//! launcher's own teardown (QMP `quit`, then signals; owned interfaces,
//! sockets and the state directory removed).

use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vnio_measure::client::one_line;
use vnio_topo::{Entry, Journal};
use vnio_vm::accel::{self, Accel, AccelDecision};
use vnio_vm::image::{self, Image, ImageOptions};
use vnio_vm::launch::{self, LaunchOptions};
use vnio_vm::spec::{AccelChoice, Nic, VmSpec};
use vnio_vm::state::{State, VmDir};

/// How long a guest may take from QEMU's start to its agent listening: a
/// TCG guest boots in 10-25 s on a loaded 2-CPU host (docs/vm.md), several
/// at once take longer.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// What every guest of a run shares: the image (with the static vnio whose
/// agent the workloads talk to) and the accelerator.
#[derive(Debug, Clone)]
pub struct GuestKit {
    image: Image,
    accel: AccelDecision,
    qemu: String,
}

/// The guests' side of a run's environment, stored with the run and shown
/// in its report: guest latencies mean little without knowing whether the
/// guest ran on KVM or under QEMU's binary translator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestEnvironment {
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Why that accelerator (the probe's verdict).
    pub why: String,
    /// QEMU's version line.
    pub qemu: String,
    /// The guest image (its cache key).
    pub image: String,
    /// The guest kernel's release.
    pub kernel: String,
}

impl GuestKit {
    /// Find QEMU, build the guest image (cached when nothing changed) and
    /// decide the accelerator (`auto`: KVM only if a probe guest boots on
    /// it; the verdict is cached). One line on failure.
    pub fn prepare() -> Result<GuestKit, String> {
        let line = |e: vnio_vm::Error| one_line(&e);
        let qemu = accel::qemu_version().map_err(line)?;
        let opts = ImageOptions::new();
        let built =
            image::build(&opts).map_err(|e| format!("the guest image: {}", one_line(&e)))?;
        let accel = accel::decide(AccelChoice::Auto, &built.image, &opts.cache, false)
            .map_err(|e| format!("choosing the accelerator: {}", one_line(&e)))?;
        Ok(GuestKit {
            image: built.image,
            accel,
            qemu,
        })
    }

    /// The accelerator every guest of the run uses.
    pub fn accel(&self) -> &AccelDecision {
        &self.accel
    }

    /// What to store with the run.
    pub fn environment(&self) -> GuestEnvironment {
        GuestEnvironment {
            accel: self.accel.accel.to_string(),
            why: self.accel.why.clone(),
            qemu: self.qemu.clone(),
            image: self.image.manifest.key.clone(),
            kernel: self.image.manifest.kernel_release.clone(),
        }
    }
}

/// One running guest; dropping it stops the VM and removes what it owned.
#[derive(Debug)]
pub struct Guest {
    dir: VmDir,
    state: State,
    child: Child,
    journal: Journal,
    journaled: Option<Entry>,
}

impl Guest {
    /// Launch guest `name` with one NIC, its state under `root`, with the
    /// kit's image and accelerator. Returns once QEMU runs the guest (not
    /// yet booted: see [`Guest::wait_ready`]). `stop` (Ctrl-C) aborts the
    /// launch and undoes it.
    pub fn launch(
        kit: &GuestKit,
        root: &Path,
        name: &str,
        nic: Nic,
        journal: &Journal,
        stop: &Arc<AtomicBool>,
    ) -> Result<Guest, String> {
        let mut spec = VmSpec::new(name);
        spec.nics = vec![nic];
        // The run's decision, not a new probe per guest.
        spec.accel = match kit.accel.accel {
            Accel::Kvm => AccelChoice::Kvm,
            Accel::Tcg => AccelChoice::Tcg,
        };
        let mut opts = LaunchOptions::new(stop.clone());
        opts.root = root.to_path_buf();
        opts.image = Some(kit.image.dir.clone());
        opts.start_timeout = Duration::from_secs(120);
        opts.journal = Some(journal.clone());
        let launched = launch::launch(&spec, &opts)
            .map_err(|e| format!("launching VM {name}: {}", one_line(&e)))?;
        Ok(Guest {
            dir: launched.dir,
            state: launched.state,
            child: launched.child,
            journal: journal.clone(),
            journaled: launched.journaled,
        })
    }

    /// KVM or TCG, as launched.
    pub fn accel(&self) -> Accel {
        self.state.accel.accel
    }

    /// The host interface of its NIC (a tap QEMU created), if any.
    pub fn host_ifname(&self) -> Option<&str> {
        self.state.host_ifnames.first()?.as_deref()
    }

    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until the guest's init says its agent listens (the console's
    /// ready line: no network path is needed, so this works for guests
    /// only other guests can reach). Returns the time from QEMU's start.
    pub fn wait_ready(&mut self, timeout: Duration, stop: &AtomicBool) -> Result<Duration, String> {
        let name = self.dir.name();
        let started = Instant::now();
        loop {
            let serial = std::fs::read_to_string(self.dir.serial_log()).unwrap_or_default();
            if serial.contains(vnio_vm::init::READY_MARKER) {
                return Ok(Duration::from_nanos(
                    vnio_vm::state::monotonic_ns().saturating_sub(self.state.launched_ns),
                ));
            }
            // The kernel's own complaint says more than its last line (the
            // end of a stack trace).
            let last = || {
                let lines = || serial.lines().map(str::trim).filter(|l| !l.is_empty());
                let complaint = lines().find(|l| {
                    ["Kernel panic", "BUG:", "Oops", "general protection", "RIP:"]
                        .iter()
                        .any(|k| l.contains(k))
                });
                match (complaint, lines().next_back()) {
                    (Some(c), Some(l)) if c != l => format!("{c} ... {l}"),
                    (_, Some(l)) => l.to_owned(),
                    _ => "none".to_owned(),
                }
            };
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "VM {name}: QEMU exited while booting ({status}); last console line: {}",
                    last()
                ));
            }
            if stop.load(Ordering::Relaxed) {
                return Err(format!("VM {name}: stopped while booting"));
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "VM {name}: not ready within {} s (accel {}); last console line: {}",
                    timeout.as_secs(),
                    self.accel(),
                    last()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Run `argv` inside the guest (the command channel), for at most
    /// `timeout`. Its stdout on success, else one line with its stderr.
    pub fn exec(&self, argv: &[String], timeout: Duration) -> Result<String, String> {
        let name = self.dir.name();
        let out = vnio_vm::exec::exec(&self.dir, argv, timeout)
            .map_err(|e| format!("VM {name}: {}", one_line(&e)))?;
        if out.success() {
            return Ok(out.stdout);
        }
        let why = out
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_owned();
        Err(if out.timed_out {
            format!(
                "VM {name}: `{}` ran past {} s",
                argv.join(" "),
                timeout.as_secs()
            )
        } else {
            format!(
                "VM {name}: `{}` failed ({:?}): {why}",
                argv.join(" "),
                out.code
            )
        })
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        launch::teardown(&self.dir, &self.state, Some(&mut self.child));
        if let Some(entry) = self.journaled.take() {
            let _ = self.journal.forget(&entry);
        }
    }
}
