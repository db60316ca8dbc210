//! Passthrough NICs at launch, the DirectPath counterpart of the switch's
//! paravirtual path: a host PCI function handed to the guest through VFIO
//! (`--nic vfio:PCI_ADDR`), or a virtual function of an SR-IOV NIC created
//! for it (`--nic sriov:PF,vf=N`).
//!
//! Everything is read and written through [`Sysfs`], rooted at `/` on the
//! host and at a fake tree in tests. [`plan`] (and [`plans`] for a whole
//! VM) decides what a launch does or refuses in one line naming what is
//! missing (no IOMMU, no such device, no SR-IOV, too few VFs);
//! [`bind_vfio`] / [`unbind_vfio`] and [`set_numvfs`] are the host
//! effects, which [`apply`] journals in the VM's state before making them
//! (the launcher calls it through `hand_over`), so `stop` (or the next
//! launch after a crash) puts every device back on its driver ([`undo`]).
//!
//! VFIO needs the whole IOMMU group on vfio-pci (bridges excepted), and
//! pins all guest memory for DMA: the launcher raises RLIMIT_MEMLOCK to
//! cover it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Context;
use crate::plan::Plan;
use crate::spec::Backend;
use crate::state::{Owned, State, VmDir};

/// The driver VFIO devices are bound to.
pub const VFIO_DRIVER: &str = "vfio-pci";
/// PCI class of a PCI-to-PCI bridge (stays on its driver).
const CLASS_BRIDGE: &str = "0x0604";
/// Memory QEMU locks beyond guest RAM (its own DMA-visible structures).
pub const MEMLOCK_SLACK: u64 = 256 << 20;

/// A sysfs tree: `/` on the host, a directory in tests.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The host's.
    pub fn host() -> Self {
        Self::at("/")
    }

    /// A tree rooted at `root` (`root/sys/...`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn exists(&self, p: &str) -> bool {
        self.path(p).exists()
    }

    fn read(&self, p: &str) -> Option<String> {
        std::fs::read_to_string(self.path(p))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// The last component of the symlink at `p`.
    fn link_name(&self, p: &str) -> Option<String> {
        let t = std::fs::read_link(self.path(p)).ok()?;
        Some(t.file_name()?.to_string_lossy().into_owned())
    }

    fn list(&self, p: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(p))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn write(&self, p: &str, value: &str) -> std::io::Result<()> {
        std::fs::write(self.path(p), value)
            .map_err(|e| std::io::Error::new(e.kind(), format!("writing {value:?} to {p}: {e}")))
    }
}

/// A PCI address in sysfs form (`0000:03:00.0`); the domain may be left
/// out (`03:00.0`).
pub fn pci_addr(s: &str) -> Result<String, String> {
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s.to_string()
    };
    let ok = full.len() == 12
        && full.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b':',
            10 => b == b'.',
            _ => b.is_ascii_hexdigit(),
        });
    if ok {
        Ok(full.to_ascii_lowercase())
    } else {
        Err(format!(
            "{s:?} is not a PCI address (DDDD:BB:SS.F, as `lspci -D` prints)"
        ))
    }
}

/// A device moved to vfio-pci, and the driver it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// PCI address.
    pub addr: String,
    /// Its driver now (`None`: none bound).
    pub driver: Option<String>,
}

/// Virtual functions created on a physical function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfCreation {
    /// The PF's PCI address.
    pub pf: String,
    /// Its network interface, for setting the VF's MAC.
    pub pf_ifname: Option<String>,
    /// `sriov_numvfs` before.
    pub before: u32,
    /// `sriov_numvfs` to write (equal to `before`: nothing to create).
    pub after: u32,
    /// The VF used.
    pub vf: u32,
}

/// What launching one passthrough NIC does on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passthrough {
    /// The device QEMU gets (`None`: a VF created at launch, its address
    /// known only then).
    pub addr: Option<String>,
    /// VFs to create first.
    pub sriov: Option<VfCreation>,
    /// Devices to bind to vfio-pci (the device and its IOMMU group).
    pub bindings: Vec<Binding>,
    /// vfio-pci is not loaded yet (`modprobe vfio-pci` at launch).
    pub load_vfio: bool,
}

fn dev(addr: &str) -> String {
    format!("/sys/bus/pci/devices/{addr}")
}

fn driver_of(sys: &Sysfs, addr: &str) -> Option<String> {
    sys.link_name(&format!("{}/driver", dev(addr)))
}

fn check_iommu(sys: &Sysfs) -> Result<(), String> {
    if sys.list("/sys/kernel/iommu_groups").is_empty() {
        return Err("no IOMMU: /sys/kernel/iommu_groups is empty (enable VT-d or AMD-Vi in the firmware and boot with intel_iommu=on iommu=pt)".into());
    }
    Ok(())
}

/// The devices of `addr`'s IOMMU group that must go to vfio-pci.
fn group_bindings(sys: &Sysfs, addr: &str) -> Result<Vec<Binding>, String> {
    let group = sys
        .link_name(&format!("{}/iommu_group", dev(addr)))
        .ok_or_else(|| format!("{addr} is in no IOMMU group (is the IOMMU on for it?)"))?;
    let members = sys.list(&format!("/sys/kernel/iommu_groups/{group}/devices"));
    Ok(members
        .into_iter()
        .filter(|m| {
            !sys.read(&format!("{}/class", dev(m)))
                .is_some_and(|c| c.starts_with(CLASS_BRIDGE))
        })
        .map(|m| Binding {
            driver: driver_of(sys, &m),
            addr: m,
        })
        .collect())
}

fn plan_device(sys: &Sysfs, addr: &str) -> Result<Passthrough, String> {
    if !sys.exists(&dev(addr)) {
        return Err(format!(
            "no PCI device {addr} on this host (see `lspci -D`)"
        ));
    }
    check_iommu(sys)?;
    Ok(Passthrough {
        addr: Some(addr.to_string()),
        sriov: None,
        bindings: group_bindings(sys, addr)?,
        load_vfio: !sys.exists(&format!("/sys/bus/pci/drivers/{VFIO_DRIVER}")),
    })
}

/// The PF's PCI address and interface name, from either.
fn resolve_pf(sys: &Sysfs, pf: &str) -> Result<(String, Option<String>), String> {
    if let Ok(a) = pci_addr(pf) {
        if sys.exists(&dev(&a)) {
            let ifname = sys.list(&format!("{}/net", dev(&a))).into_iter().next();
            return Ok((a, ifname));
        }
        return Err(format!("no PCI device {a} on this host (see `lspci -D`)"));
    }
    match sys.link_name(&format!("/sys/class/net/{pf}/device")) {
        Some(a) if pci_addr(&a).is_ok() => Ok((a, Some(pf.to_string()))),
        Some(other) => Err(format!(
            "{pf} is not a PCI function (its device is {other}): no SR-IOV"
        )),
        None if sys.exists(&format!("/sys/class/net/{pf}")) => Err(format!(
            "{pf} is not a PCI NIC (no device behind it): no SR-IOV"
        )),
        None => Err(format!(
            "no network interface or PCI device {pf} on this host"
        )),
    }
}

fn plan_vf(sys: &Sysfs, pf: &str, vf: u32) -> Result<Passthrough, String> {
    let (pf_addr, pf_ifname) = resolve_pf(sys, pf)?;
    let d = dev(&pf_addr);
    let driver = driver_of(sys, &pf_addr).unwrap_or_else(|| "no driver".into());
    let total: u32 = sys
        .read(&format!("{d}/sriov_totalvfs"))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    if total == 0 {
        return Err(format!(
            "{pf} ({pf_addr}, {driver}) offers no SR-IOV virtual functions (no sriov_totalvfs)"
        ));
    }
    if vf >= total {
        return Err(format!(
            "{pf} offers {total} virtual functions: vf={vf} is out of range"
        ));
    }
    check_iommu(sys)?;
    let before: u32 = sys
        .read(&format!("{d}/sriov_numvfs"))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    if before > 0 && before <= vf {
        return Err(format!(
            "{pf} has {before} virtual functions and vf={vf} needs more: the kernel changes the count only from 0 (set sriov_numvfs yourself)"
        ));
    }
    let after = before.max(vf + 1);
    let sriov = Some(VfCreation {
        pf: pf_addr,
        pf_ifname,
        before,
        after,
        vf,
    });
    let load_vfio = !sys.exists(&format!("/sys/bus/pci/drivers/{VFIO_DRIVER}"));
    if before == 0 {
        // Created at launch: its group is known only then.
        return Ok(Passthrough {
            addr: None,
            sriov,
            bindings: Vec::new(),
            load_vfio,
        });
    }
    let vf_addr = sys
        .link_name(&format!("{d}/virtfn{vf}"))
        .ok_or_else(|| format!("{pf}: virtual function {vf} has no PCI device"))?;
    Ok(Passthrough {
        addr: Some(vf_addr.clone()),
        sriov,
        bindings: group_bindings(sys, &vf_addr)?,
        load_vfio,
    })
}

/// What launching NIC `backend` does, or why this host cannot (one line);
/// `None` for a NIC that is not a passthrough NIC.
pub fn plan(sys: &Sysfs, backend: &Backend) -> Option<Result<Passthrough, String>> {
    match backend {
        Backend::Vfio { addr } => Some(plan_device(sys, addr)),
        Backend::Sriov { pf, vf } => Some(plan_vf(sys, pf, *vf)),
        _ => None,
    }
}

/// Each passthrough NIC's host plan (by NIC index), or the one-line
/// refusal naming what this host lacks.
pub fn plans(spec: &crate::spec::VmSpec, sys: &Sysfs) -> crate::Result<Vec<(usize, Passthrough)>> {
    let mut out = Vec::new();
    for (i, n) in spec.nics.iter().enumerate() {
        if let Some(p) = plan(sys, &n.backend) {
            out.push((
                i,
                p.map_err(|why| crate::Error::Missing(format!("NIC {i} (passthrough): {why}")))?,
            ));
        }
    }
    Ok(out)
}

/// After [`set_numvfs`]: the created VF's address and its group's bindings.
pub fn created_vf(sys: &Sysfs, c: &VfCreation) -> Result<(String, Vec<Binding>), String> {
    let a = sys
        .link_name(&format!("{}/virtfn{}", dev(&c.pf), c.vf))
        .ok_or_else(|| format!("{}: virtual function {} did not appear", c.pf, c.vf))?;
    let b = group_bindings(sys, &a)?;
    Ok((a, b))
}

/// Writes `sriov_numvfs` of PF `pf` (through 0: the kernel refuses other changes).
pub fn set_numvfs(sys: &Sysfs, pf: &str, n: u32) -> std::io::Result<()> {
    let p = format!("{}/sriov_numvfs", dev(pf));
    let now: u32 = sys.read(&p).and_then(|t| t.parse().ok()).unwrap_or(0);
    if now != 0 && now != n {
        sys.write(&p, "0")?;
    }
    sys.write(&p, &n.to_string())
}

/// Moves `b.addr` to vfio-pci: driver_override, unbind from its driver,
/// probe again.
pub fn bind_vfio(sys: &Sysfs, b: &Binding) -> std::io::Result<()> {
    if b.driver.as_deref() == Some(VFIO_DRIVER) {
        return Ok(());
    }
    let d = dev(&b.addr);
    sys.write(&format!("{d}/driver_override"), VFIO_DRIVER)?;
    if b.driver.is_some() {
        sys.write(&format!("{d}/driver/unbind"), &b.addr)?;
    }
    sys.write("/sys/bus/pci/drivers_probe", &b.addr)
}

/// Puts `b.addr` back on the driver it had: unbind from vfio-pci, clear
/// driver_override, probe again.
pub fn unbind_vfio(sys: &Sysfs, b: &Binding) -> std::io::Result<()> {
    if b.driver.as_deref() == Some(VFIO_DRIVER) {
        return Ok(());
    }
    let d = dev(&b.addr);
    if driver_of(sys, &b.addr).as_deref() == Some(VFIO_DRIVER) {
        sys.write(&format!("{d}/driver/unbind"), &b.addr)?;
    }
    sys.write(&format!("{d}/driver_override"), "\n")?;
    if b.driver.is_some() {
        sys.write("/sys/bus/pci/drivers_probe", &b.addr)?;
    }
    Ok(())
}

/// QEMU's device for a passthrough NIC at `addr`.
pub fn qemu_device(id: &str, addr: &str) -> String {
    format!("vfio-pci,host={addr},id={id}")
}

/// QEMU's device for NIC `id` when it is a passthrough NIC (a VF created
/// at launch shows as [`pending_vf`] until the launcher knows its address).
pub fn qemu_device_for(id: &str, backend: &Backend) -> Option<String> {
    match backend {
        Backend::Vfio { addr } => Some(qemu_device(id, addr)),
        Backend::Sriov { pf, vf } => Some(qemu_device(id, &pending_vf(pf, *vf))),
        _ => None,
    }
}

/// The plan's note for passthrough NIC `id`.
pub fn note(id: &str) -> String {
    format!("{id} is a passthrough NIC: the guest drives it with the NIC's own driver (the vnio image carries virtio-net and e1000 only), no switch sees its traffic, and the VM cannot live-migrate")
}

/// What `--print-qemu` shows for a VF created at launch.
pub fn pending_vf(pf: &str, vf: u32) -> String {
    format!("VF{vf}-OF-{pf}")
}

/// Bytes of locked memory a guest of `mem_mib` with passthrough needs.
pub fn memlock_bytes(mem_mib: u64) -> u64 {
    (mem_mib << 20) + MEMLOCK_SLACK
}

/// The sysfs path of a PCI device (for messages).
pub fn device_path(addr: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(addr)
}

/// A host change a launch made, to undo at stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum Undo {
    /// A device moved to vfio-pci: back to its driver.
    Driver {
        /// The device and the driver it had.
        binding: Binding,
    },
    /// VFs created on a PF: `sriov_numvfs` back to `before`.
    NumVfs {
        /// The PF's PCI address.
        pf: String,
        /// The count before.
        before: u32,
    },
}

/// Makes `p` so on the host: the VFs created (the VF's MAC set to `mac`),
/// vfio-pci loaded, every device of the group on vfio-pci. Each change is
/// handed to `record` before it is made (the launcher saves it in the
/// VM's state, so stop undoes exactly that). Returns the address QEMU gets.
pub fn apply(
    sys: &Sysfs,
    p: &Passthrough,
    mac: &str,
    record: &mut dyn FnMut(Undo) -> crate::Result<()>,
) -> crate::Result<String> {
    if p.load_vfio {
        crate::tool::run(
            std::process::Command::new("modprobe").arg(VFIO_DRIVER),
            "loading vfio-pci",
            "kmod",
        )?;
    }
    let (addr, bindings) = match (&p.sriov, &p.addr) {
        (Some(c), addr) => {
            if c.after != c.before {
                record(Undo::NumVfs {
                    pf: c.pf.clone(),
                    before: c.before,
                })?;
                set_numvfs(sys, &c.pf, c.after)
                    .ctx(|| format!("creating {} virtual functions on {}", c.after, c.pf))?;
            }
            if let Some(ifname) = &c.pf_ifname {
                let vf = c.vf.to_string();
                crate::tool::run(
                    std::process::Command::new("ip")
                        .args(["link", "set", "dev", ifname, "vf", &vf, "mac", mac]),
                    &format!("setting the MAC of VF {vf} of {ifname}"),
                    "iproute2",
                )?;
            }
            match addr {
                Some(a) => (a.clone(), p.bindings.clone()),
                None => created_vf(sys, c).map_err(crate::Error::Missing)?,
            }
        }
        (None, Some(a)) => (a.clone(), p.bindings.clone()),
        (None, None) => return Err(crate::Error::Invalid("passthrough without a device".into())),
    };
    for b in bindings {
        record(Undo::Driver { binding: b.clone() })?;
        bind_vfio(sys, &b).ctx(|| format!("binding {} to {VFIO_DRIVER}", b.addr))?;
    }
    Ok(addr)
}

/// Undoes one change; says what it did.
pub fn undo(sys: &Sysfs, u: &Undo) -> String {
    match u {
        Undo::Driver { binding } => match unbind_vfio(sys, binding) {
            Ok(()) => format!(
                "{} back to {}",
                binding.addr,
                binding.driver.as_deref().unwrap_or("no driver")
            ),
            Err(e) => format!("{} NOT back on its driver: {e}", binding.addr),
        },
        Undo::NumVfs { pf, before } => match set_numvfs(sys, pf, *before) {
            Ok(()) => format!("{pf} back to {before} virtual functions"),
            Err(e) => format!("{pf} NOT back to {before} virtual functions: {e}"),
        },
    }
}

/// Hands each passthrough NIC's device to vfio-pci (each change journalled
/// in the state first) and raises RLIMIT_MEMLOCK for QEMU, which pins all
/// guest memory for the device's DMA; returns the command line with the
/// created VFs' addresses.
pub(crate) fn hand_over(
    dir: &VmDir,
    st: &mut State,
    plan: &Plan,
    pt: &[(usize, Passthrough)],
) -> crate::Result<Vec<String>> {
    let mut argv = plan.argv.clone();
    if pt.is_empty() {
        return Ok(argv);
    }
    let sys = Sysfs::host();
    for (i, p) in pt {
        let n = &plan.nics[*i];
        let mut record = |undo| {
            st.owned.push(Owned::Passthrough { undo });
            st.save(dir)
        };
        let addr = apply(&sys, p, &n.mac.to_string(), &mut record)?;
        if let Backend::Sriov { pf, vf } = &n.backend {
            let pending = pending_vf(pf, *vf);
            for a in &mut argv {
                *a = a.replace(&pending, &addr);
            }
        }
    }
    let want = memlock_bytes(st.spec.mem_mib);
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_MEMLOCK).ctx(|| "reading RLIMIT_MEMLOCK".into())?;
    if soft < want {
        setrlimit(Resource::RLIMIT_MEMLOCK, want, hard.max(want))
            .ctx(|| format!("raising RLIMIT_MEMLOCK to {want} bytes for VFIO"))?;
    }
    Ok(argv)
}
