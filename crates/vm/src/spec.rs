//! What the user asks for: a VM's size, NICs, latency level and
//! accelerator ([`VmSpec`]), parsed and checked before anything touches
//! the host.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::addr::{Cidr, Mac};
use crate::error::{Error, Result};

/// Latency-sensitivity level (the studies' Default vs Latency Sensitivity High).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Latency {
    /// Shared cores, memory on demand, the switch's default port policy.
    Normal,
    /// Dedicated pinned cores, preallocated locked memory (hugepages where
    /// available), guest idle without exits, the switch port latency-high.
    High,
}

impl FromStr for Latency {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "normal" => Ok(Latency::Normal),
            "high" => Ok(Latency::High),
            _ => Err(format!("unknown latency level {s:?}: normal or high")),
        }
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Latency::Normal => "normal",
            Latency::High => "high",
        })
    }
}

/// Which accelerator the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// KVM if a probe boot shows it can run a stock guest, else TCG.
    Auto,
    /// KVM, no questions asked.
    Kvm,
    /// QEMU's binary translator.
    Tcg,
}

impl FromStr for AccelChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(format!("unknown accelerator {s:?}: auto, kvm or tcg")),
        }
    }
}

/// The device model the guest sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// virtio-net-pci (paravirtual).
    Virtio,
    /// QEMU's emulated Intel e1000, for comparison.
    E1000,
}

impl FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "virtio" => Ok(Model::Virtio),
            "e1000" => Ok(Model::E1000),
            _ => Err(format!("unknown NIC model {s:?}: virtio or e1000")),
        }
    }
}

/// macvtap modes (how macvtaps on one parent reach each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MacvtapMode {
    /// Switch between macvtaps on the parent.
    Bridge,
    /// Hairpin through the adjacent switch.
    Vepa,
    /// Isolated.
    Private,
    /// The VM takes the parent over.
    Passthru,
}

impl FromStr for MacvtapMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bridge" => Ok(Self::Bridge),
            "vepa" => Ok(Self::Vepa),
            "private" => Ok(Self::Private),
            "passthru" | "passthrough" => Ok(Self::Passthru),
            _ => Err(format!(
                "unknown macvtap mode {s:?}: bridge, vepa, private or passthru"
            )),
        }
    }
}

impl fmt::Display for MacvtapMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bridge => "bridge",
            Self::Vepa => "vepa",
            Self::Private => "private",
            Self::Passthru => "passthrough",
        })
    }
}

/// Where a NIC's frames go on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Backend {
    /// A vnio switch port (vhost-user): QEMU connects to `socket`, or
    /// listens on it with `server`.
    VhostUser {
        /// The port's socket.
        socket: PathBuf,
        /// QEMU listens (the switch port is in client mode).
        server: bool,
        /// The switch's control socket, to find the port and set its policy.
        control: Option<PathBuf>,
    },
    /// A tap interface QEMU creates (and the kernel removes with it),
    /// optionally enslaved to a Linux bridge.
    Tap {
        /// Interface name (default derived from the VM name).
        ifname: Option<String>,
        /// Bridge to enslave it to (created if missing, removed with the VM
        /// if the launcher created it).
        bridge: Option<String>,
        /// Address for the host's side of the tap (gone with the tap).
        host_ip: Option<Cidr>,
    },
    /// A macvtap on a host interface, created by the launcher.
    Macvtap {
        /// The host interface.
        parent: String,
        /// Mode.
        mode: MacvtapMode,
    },
    /// A host PCI function handed to the guest through VFIO.
    Vfio {
        /// Its PCI address (`0000:03:00.0`).
        addr: String,
    },
    /// Virtual function `vf` of SR-IOV NIC `pf` (interface or PCI
    /// address), created at launch and handed over through VFIO.
    Sriov {
        /// The physical function.
        pf: String,
        /// The VF's index.
        vf: u32,
    },
}

/// One NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// Host side.
    pub backend: Backend,
    /// Guest side.
    pub model: Model,
    /// MAC (default stable per VM name and NIC index).
    pub mac: Option<Mac>,
    /// Address configured by the guest's init.
    pub ip: Option<Cidr>,
    /// virtio-net receive offloads offered to the guest (checksum, TSO,
    /// ECN); `guest-offloads=off` makes the host side segment and checksum
    /// in software, as for a guest whose NIC cannot.
    pub guest_offloads: bool,
    /// virtio-net on packed virtqueues (`packed=on`; QEMU's `packed`).
    #[serde(default)]
    pub packed: bool,
    /// vhost-user: queue pairs (`queues=N`, 1-8; QEMU's netdev `queues`
    /// and the device's `mq=on`); the guest's init turns them all on.
    #[serde(default = "one_queue_pair")]
    pub queues: u16,
}

fn one_queue_pair() -> u16 {
    1
}

/// Most queue pairs a vhost-user NIC may have (as the switch's ports).
pub const MAX_QUEUE_PAIRS: u16 = 8;

mod nic;

fn check_ifname(what: &str, name: &str) -> std::result::Result<(), String> {
    vnio_topo::check_ifname(name).map_err(|e| format!("{what}: {e}"))
}

/// Parses a memory size: `256M`, `1G`, `512` (MiB).
pub fn parse_mem(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'M' | 'm')) => (&t[..i], 1),
        Some((i, 'G' | 'g')) => (&t[..i], 1024),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a memory size: {s:?} (try 256M or 1G)"))?;
    Ok(n * mult)
}

/// Everything `vnio vm run` needs to know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    /// Name (state directory, QEMU's -name, derived interface names).
    pub name: String,
    /// vCPU count.
    pub vcpus: u32,
    /// Memory in MiB.
    pub mem_mib: u64,
    /// NICs, in device order.
    pub nics: Vec<Nic>,
    /// Latency-sensitivity level.
    pub latency: Latency,
    /// Accelerator choice.
    pub accel: AccelChoice,
    /// Default gateway in the guest.
    pub gateway: Option<IpAddr>,
    /// Extra guest routes: (destination, via).
    pub routes: Vec<(Cidr, IpAddr)>,
    /// The agent's port in the guest (0: no agent).
    pub agent_port: u16,
    /// The agent's token.
    pub agent_token: Option<String>,
    /// Refuse to launch when any latency setting cannot be honoured.
    pub strict: bool,
}

/// Smallest guest memory: the kernel plus an initramfs of ~10-20 MiB
/// unpacked into RAM.
pub const MIN_MEM_MIB: u64 = 128;
/// Most vCPUs (q35 without an IOMMU can address 255; beyond is unusual here).
pub const MAX_VCPUS: u32 = 64;

impl VmSpec {
    /// A VM with defaults: 1 vCPU, 256 MiB, no NIC, normal latency, auto accel.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            vcpus: 1,
            mem_mib: 256,
            nics: Vec::new(),
            latency: Latency::Normal,
            accel: AccelChoice::Auto,
            gateway: None,
            routes: Vec::new(),
            agent_port: crate::cmdline::AGENT_PORT,
            agent_token: None,
            strict: false,
        }
    }

    /// Checks the spec as a whole (each part was checked when parsed).
    pub fn validate(&self) -> Result<()> {
        check_name(&self.name)?;
        if self.vcpus == 0 || self.vcpus > MAX_VCPUS {
            return Err(Error::Invalid(format!(
                "--vcpus {}: 1 to {MAX_VCPUS}",
                self.vcpus
            )));
        }
        if self.mem_mib < MIN_MEM_MIB {
            return Err(Error::Invalid(format!(
                "--mem {}M: at least {MIN_MEM_MIB}M (the initramfs lives in guest memory)",
                self.mem_mib
            )));
        }
        let mut names = Vec::new();
        for i in 0..self.nics.len() {
            if let Some(n) = self.host_ifname(i) {
                if names.contains(&n) {
                    return Err(Error::Invalid(format!(
                        "two NICs would use the host interface {n}"
                    )));
                }
                names.push(n);
            }
        }
        let mut macs: Vec<Mac> = (0..self.nics.len()).map(|i| self.mac(i)).collect();
        macs.sort_by_key(|m| m.0);
        macs.dedup();
        if macs.len() != self.nics.len() {
            return Err(Error::Invalid("two NICs have the same MAC".into()));
        }
        Ok(())
    }

    /// The MAC of NIC `i`.
    pub fn mac(&self, i: usize) -> Mac {
        self.nics[i]
            .mac
            .unwrap_or_else(|| Mac::for_vm(&self.name, i))
    }

    /// The host interface of NIC `i` (tap or macvtap), if it has one.
    pub fn host_ifname(&self, i: usize) -> Option<String> {
        let derived = |prefix: &str| {
            let plain = format!("{prefix}{}-{i}", self.name);
            if plain.len() <= vnio_topo::IFNAME_MAX {
                plain
            } else {
                // Long VM names: a stable short hash keeps names unique.
                let mac = Mac::for_vm(&self.name, 0).0;
                format!("{prefix}{:02x}{:02x}-{i}", mac[3], mac[4])
            }
        };
        match &self.nics[i].backend {
            Backend::VhostUser { .. } | Backend::Vfio { .. } | Backend::Sriov { .. } => None,
            Backend::Tap { ifname, .. } => Some(ifname.clone().unwrap_or_else(|| derived("vt-"))),
            Backend::Macvtap { .. } => Some(derived("mvt-")),
        }
    }
}

/// VM names: they name a directory and interfaces, so letters, digits,
/// '-' and '_' only.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "VM name {name:?}: 1-32 letters, digits, '-' or '_'"
        )))
    }
}

#[cfg(test)]
mod tests;
