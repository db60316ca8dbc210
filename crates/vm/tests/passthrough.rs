//! Passthrough NICs on fake sysfs trees (no host is touched): what a
//! launch plans on a host with an IOMMU, SR-IOV NICs and IOMMU groups;
//! the one-line refusals on hosts without (this one has no IOMMU and a
//! virtio NIC); binding to vfio-pci and back, and VF creation and removal,
//! as the files a kernel would see written; the QEMU and libvirt forms.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use vnio_vm::passthrough::{
    self, apply, bind_vfio, plan, unbind_vfio, undo, Binding, Passthrough, Sysfs, Undo,
};
use vnio_vm::spec::{Backend, Nic};

/// A fake machine: `root/sys/...` as the kernel lays it out.
struct Fake(PathBuf);

impl Fake {
    fn new(tag: &str) -> Fake {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("vnio-fake-sysfs-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("sys/kernel/iommu_groups")).unwrap();
        std::fs::create_dir_all(p.join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(p.join("sys/class/net")).unwrap();
        std::fs::write(p.join("sys/bus/pci/drivers_probe"), "").unwrap();
        Fake(p)
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.0.join(rel.trim_start_matches('/'))
    }

    fn sys(&self) -> Sysfs {
        Sysfs::at(&self.0)
    }

    fn driver(&self, name: &str) -> PathBuf {
        let d = self.p(&format!("sys/bus/pci/drivers/{name}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("unbind"), "").unwrap();
        d
    }

    /// A PCI function in IOMMU group `group` (None: no IOMMU), bound to `driver`.
    fn device(&self, addr: &str, class: &str, driver: Option<&str>, group: Option<u32>) {
        let d = self.p(&format!("sys/bus/pci/devices/{addr}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(d.join("driver_override"), "(null)\n").unwrap();
        if let Some(drv) = driver {
            symlink(self.driver(drv), d.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gd = self.p(&format!("sys/kernel/iommu_groups/{g}/devices"));
            std::fs::create_dir_all(&gd).unwrap();
            symlink(&d, gd.join(addr)).unwrap();
            symlink(
                self.p(&format!("sys/kernel/iommu_groups/{g}")),
                d.join("iommu_group"),
            )
            .unwrap();
        }
    }

    fn netdev(&self, name: &str, device: &Path) {
        let n = self.p(&format!("sys/class/net/{name}"));
        std::fs::create_dir_all(&n).unwrap();
        symlink(device, n.join("device")).unwrap();
    }

    fn sriov(&self, addr: &str, total: u32, now: u32) {
        let d = self.p(&format!("sys/bus/pci/devices/{addr}"));
        std::fs::write(d.join("sriov_totalvfs"), format!("{total}\n")).unwrap();
        std::fs::write(d.join("sriov_numvfs"), format!("{now}\n")).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.p(rel)).unwrap()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn backend(s: &str) -> Backend {
    s.parse::<Nic>().unwrap().backend
}

/// A server: an ixgbe PF (2 VFs possible) with its sibling port in group
/// 7 behind a bridge, and an unrelated device in group 9.
fn server() -> Fake {
    let f = Fake::new("server");
    f.device("0000:00:01.0", "0x060400", Some("pcieport"), Some(7));
    f.device("0000:03:00.0", "0x020000", Some("ixgbe"), Some(7));
    f.device("0000:03:00.1", "0x020000", Some("ixgbe"), Some(7));
    f.device("0000:05:00.0", "0x010802", Some("nvme"), Some(9));
    f.sriov("0000:03:00.0", 2, 0);
    f.netdev("enp3s0f0", &f.p("sys/bus/pci/devices/0000:03:00.0"));
    f.driver("vfio-pci");
    f
}

#[test]
fn nic_strings_parse_and_refuse() {
    assert_eq!(
        backend("vfio:03:00.0"),
        Backend::Vfio {
            addr: "0000:03:00.0".into()
        }
    );
    assert_eq!(
        backend("sriov:enp3s0f0,vf=1"),
        Backend::Sriov {
            pf: "enp3s0f0".into(),
            vf: 1
        }
    );
    for (bad, needle) in [
        ("vfio:eth0", "not a PCI address"),
        ("vfio", "needs a device"),
        ("sriov:eth0", "sriov:PF,vf=N"),
        ("sriov:eth0,vf=x", "a number"),
        ("vfio:03:00.0,vf=1", "vfio:PCI_ADDR"),
    ] {
        let e = bad.parse::<Nic>().unwrap_err();
        assert!(e.contains(needle), "{bad}: {e}");
    }
}

#[test]
fn a_vfio_plan_takes_the_whole_iommu_group_but_the_bridge() {
    let f = server();
    let p = plan(&f.sys(), &backend("vfio:0000:03:00.1"))
        .unwrap()
        .unwrap();
    assert_eq!(p.addr.as_deref(), Some("0000:03:00.1"));
    assert_eq!(
        p.bindings,
        vec![
            Binding {
                addr: "0000:03:00.0".into(),
                driver: Some("ixgbe".into())
            },
            Binding {
                addr: "0000:03:00.1".into(),
                driver: Some("ixgbe".into())
            },
        ]
    );
    assert!(!p.load_vfio, "vfio-pci is there");
    assert!(p.sriov.is_none());
}

#[test]
fn binding_goes_to_vfio_pci_and_back_to_the_driver() {
    let f = server();
    let sys = f.sys();
    let b = Binding {
        addr: "0000:03:00.1".into(),
        driver: Some("ixgbe".into()),
    };
    bind_vfio(&sys, &b).unwrap();
    let dev = "sys/bus/pci/devices/0000:03:00.1";
    assert_eq!(f.read(&format!("{dev}/driver_override")), "vfio-pci");
    assert_eq!(f.read("sys/bus/pci/drivers/ixgbe/unbind"), "0000:03:00.1");
    assert_eq!(f.read("sys/bus/pci/drivers_probe"), "0000:03:00.1");
    // The kernel moved it: the driver link now names vfio-pci.
    std::fs::remove_file(f.p(&format!("{dev}/driver"))).unwrap();
    symlink(f.driver("vfio-pci"), f.p(&format!("{dev}/driver"))).unwrap();
    std::fs::write(f.p("sys/bus/pci/drivers_probe"), "").unwrap();
    unbind_vfio(&sys, &b).unwrap();
    assert_eq!(
        f.read("sys/bus/pci/drivers/vfio-pci/unbind"),
        "0000:03:00.1"
    );
    assert_eq!(f.read(&format!("{dev}/driver_override")), "\n");
    assert_eq!(f.read("sys/bus/pci/drivers_probe"), "0000:03:00.1");
}

#[test]
fn a_vf_is_created_journalled_bound_and_removed() {
    let f = server();
    let sys = f.sys();
    let p = plan(&sys, &backend("sriov:enp3s0f0,vf=1"))
        .unwrap()
        .unwrap();
    let c = p.sriov.clone().unwrap();
    assert_eq!(
        (c.pf.as_str(), c.before, c.after, c.vf),
        ("0000:03:00.0", 0, 2, 1)
    );
    assert_eq!(c.pf_ifname.as_deref(), Some("enp3s0f0"));
    assert!(p.addr.is_none(), "the VF appears at launch");
    assert_eq!(
        passthrough::qemu_device_for("nic0", &backend("sriov:enp3s0f0,vf=1")).unwrap(),
        "vfio-pci,host=VF1-OF-enp3s0f0,id=nic0"
    );

    // What the kernel does when sriov_numvfs is written, done ahead: the
    // VFs exist with their own groups. (The MAC is set with `ip`, which
    // a fake tree cannot answer: the VF's PF has no interface here.)
    f.device("0000:03:10.1", "0x020000", Some("ixgbevf"), Some(12));
    symlink(
        f.p("sys/bus/pci/devices/0000:03:10.1"),
        f.p("sys/bus/pci/devices/0000:03:00.0/virtfn1"),
    )
    .unwrap();
    let mut no_ifname = p.clone();
    no_ifname.sriov.as_mut().unwrap().pf_ifname = None;
    let mut journal = Vec::new();
    let addr = apply(&sys, &no_ifname, "52:54:00:00:00:01", &mut |u| {
        journal.push(u);
        Ok(())
    })
    .unwrap();
    assert_eq!(addr, "0000:03:10.1");
    assert_eq!(f.read("sys/bus/pci/devices/0000:03:00.0/sriov_numvfs"), "2");
    assert_eq!(
        f.read("sys/bus/pci/devices/0000:03:10.1/driver_override"),
        "vfio-pci"
    );
    assert_eq!(
        journal,
        vec![
            Undo::NumVfs {
                pf: "0000:03:00.0".into(),
                before: 0
            },
            Undo::Driver {
                binding: Binding {
                    addr: "0000:03:10.1".into(),
                    driver: Some("ixgbevf".into())
                }
            },
        ],
        "every change journalled before it is made"
    );
    // Stop undoes in reverse.
    for u in journal.iter().rev() {
        let said = undo(&sys, u);
        assert!(!said.contains("NOT"), "{said}");
    }
    assert_eq!(f.read("sys/bus/pci/devices/0000:03:00.0/sriov_numvfs"), "0");
}

fn refusal(f: &Fake, nic: &str) -> String {
    match plan(&f.sys(), &backend(nic)).unwrap() {
        Ok(p) => panic!("{nic}: planned {p:?}"),
        Err(e) => e,
    }
}

#[test]
fn refusals_name_what_is_missing() {
    // This host: no IOMMU groups, a virtio NIC, no SR-IOV.
    let f = Fake::new("thishost");
    f.device("0000:00:03.0", "0x020000", Some("virtio-pci"), None);
    let virtio = f.p("sys/bus/virtio/devices/virtio2");
    std::fs::create_dir_all(&virtio).unwrap();
    f.netdev("eth0", &virtio);
    assert!(
        refusal(&f, "vfio:0000:00:03.0").starts_with("no IOMMU: /sys/kernel/iommu_groups is empty")
    );
    assert_eq!(
        refusal(&f, "vfio:0000:09:00.0"),
        "no PCI device 0000:09:00.0 on this host (see `lspci -D`)"
    );
    assert_eq!(
        refusal(&f, "sriov:eth0,vf=0"),
        "eth0 is not a PCI function (its device is virtio2): no SR-IOV"
    );
    assert_eq!(
        refusal(&f, "sriov:eth9,vf=0"),
        "no network interface or PCI device eth9 on this host"
    );
    assert!(refusal(&f, "sriov:0000:00:03.0,vf=0").contains("offers no SR-IOV virtual functions"));

    // A server: too few VFs, VFs in use, a device without a group.
    let s = server();
    assert_eq!(
        refusal(&s, "sriov:enp3s0f0,vf=2"),
        "enp3s0f0 offers 2 virtual functions: vf=2 is out of range"
    );
    s.sriov("0000:03:00.0", 4, 1);
    assert!(
        refusal(&s, "sriov:enp3s0f0,vf=2").contains("has 1 virtual functions and vf=2 needs more")
    );
    s.device("0000:06:00.0", "0x020000", Some("e1000e"), None);
    assert!(refusal(&s, "vfio:0000:06:00.0").contains("in no IOMMU group"));
    // Not a passthrough NIC: nothing to plan.
    assert!(plan(&s.sys(), &backend("tap")).is_none());
}

#[test]
fn vfio_pci_is_loaded_when_missing() {
    let f = server();
    std::fs::remove_dir_all(f.p("sys/bus/pci/drivers/vfio-pci")).unwrap();
    let p: Passthrough = plan(&f.sys(), &backend("vfio:0000:05:00.0"))
        .unwrap()
        .unwrap();
    assert!(p.load_vfio);
    assert_eq!(p.bindings.len(), 1, "nvme alone in its group");
    assert_eq!(
        passthrough::memlock_bytes(256),
        (256 << 20) + passthrough::MEMLOCK_SLACK
    );
}
