//! Fake machines: a temporary directory holding the files a KVM guest or a
//! bare-metal host shows under /proc, /sys and /dev.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use vnio_tune::host::FixedProbe;
use vnio_tune::sys::{Coalesce, KvmCpuid, Offloads};
use vnio_tune::Host;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("vnio-tune-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fake machine.
pub struct Fake {
    pub dir: TempDir,
    pub probe: FixedProbe,
}

impl Fake {
    pub fn root(&self) -> &Path {
        &self.dir.0
    }

    pub fn path(&self, logical: &str) -> PathBuf {
        self.dir.0.join(logical.trim_start_matches('/'))
    }

    /// Writes a file (creating parents).
    pub fn put(&self, logical: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.path(logical);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write fake file");
        self
    }

    pub fn mkdir(&self, logical: &str) -> &Self {
        std::fs::create_dir_all(self.path(logical)).expect("mkdir");
        self
    }

    pub fn symlink(&self, logical: &str, target: &str) -> &Self {
        let p = self.path(logical);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(target, p).expect("symlink");
        self
    }

    pub fn chmod(&self, logical: &str, mode: u32) -> &Self {
        std::fs::set_permissions(self.path(logical), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        self
    }

    pub fn read(&self, logical: &str) -> String {
        std::fs::read_to_string(self.path(logical)).expect("read fake file")
    }

    pub fn host(&self) -> Host {
        Host::new(self.root(), Arc::new(self.probe.clone()))
    }

    /// Every regular file of the tree, as logical paths.
    pub fn files(&self) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
                let p = e.path();
                let ft = e.file_type().expect("file type");
                if ft.is_dir() {
                    walk(base, &p, out);
                } else if ft.is_file() {
                    out.push(format!(
                        "/{}",
                        p.strip_prefix(base).expect("prefix").display()
                    ));
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root(), self.root(), &mut out);
        out.sort();
        out
    }

    fn common(tag: &str, flags: &str) -> Fake {
        let f = Fake {
            dir: TempDir::new(tag),
            probe: FixedProbe {
                euid: 0,
                coalesce: Some(Coalesce {
                    rx_usecs: 0,
                    rx_frames: 1,
                    tx_usecs: 0,
                    tx_frames: 1,
                    adaptive_rx: false,
                    adaptive_tx: false,
                }),
                offloads: Some(Offloads {
                    lro: Some(false),
                    gro: Some(true),
                }),
                iptables: Some((5, 3)),
                nft_rules: Some(4),
                kvm: None,
                clock_ns: 25.0,
            },
        };
        f.put("/proc/cpuinfo", format!("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"))
            .put("/proc/sys/kernel/osrelease", "6.1.0-fake\n")
            .put("/sys/devices/system/cpu/online", "0-1\n")
            .put("/dev/cpu_dma_latency", 2_000_000_000i32.to_ne_bytes())
            .put("/proc/1/comm", "init\n")
            .mkdir("/proc/1/fd")
            .put("/proc/irq/default_smp_affinity", "3\n")
            .put("/proc/irq/30/smp_affinity_list", "0\n")
            .put("/proc/irq/31/smp_affinity_list", "1\n")
            .put(
                "/proc/interrupts",
                "           CPU0       CPU1\n 30:   100   0  PCI-MSIX-0000:00:03.0   1-edge      virtio1-input.0\n 31:   0   7  PCI-MSIX-0000:00:03.0   2-edge      virtio1-output.0\nNMI:   0   0   Non-maskable interrupts\n",
            )
            .mkdir("/sys/class/net/eth0/device")
            .put("/sys/class/net/eth0/device/numa_node", "0\n")
            .mkdir("/sys/class/net/lo")
            .put("/sys/class/net/eth0/napi_defer_hard_irqs", "0\n")
            .put("/sys/class/net/eth0/gro_flush_timeout", "0\n")
            .put("/sys/class/net/eth0/queues/rx-0/rps_cpus", "0\n")
            .put("/sys/class/net/eth0/queues/tx-0/xps_cpus", "3\n")
            .put("/proc/sys/net/core/busy_poll", "0\n")
            .put("/proc/sys/net/ipv4/tcp_fastopen", "1\n")
            .put("/proc/sys/kernel/nmi_watchdog", "1\n")
            .put("/proc/sys/kernel/timer_migration", "1\n")
            .put("/proc/sys/vm/stat_interval", "1\n")
            .put("/sys/devices/system/cpu/cpu0/power/pm_qos_resume_latency_us", "0\n")
            .put("/sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us", "0\n")
            .put("/proc/sys/net/core/busy_read", "0\n")
            .put("/sys/devices/system/node/online", "0\n")
            .put("/proc/sys/kernel/numa_balancing", "1\n")
            .put("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
            .put("/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never\n")
            .put("/proc/meminfo", "MemTotal:       16384000 kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n")
            .put("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
            .put("/sys/kernel/mm/ksm/run", "1\n")
            .put("/sys/kernel/mm/ksm/pages_sharing", "42\n")
            .put("/proc/sys/vm/swappiness", "60\n")
            .put("/proc/sys/vm/dirty_ratio", "20\n")
            .put("/proc/sys/vm/dirty_background_ratio", "10\n")
            .put(
                "/proc/self/limits",
                "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         8388608              8388608              bytes     \n",
            )
            .put("/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc\n")
            .put("/sys/devices/system/clocksource/clocksource0/available_clocksource", "tsc hpet acpi_pm \n")
            .put("/proc/net/ip_tables_names", "filter\n")
            .put("/proc/sys/net/netfilter/nf_conntrack_count", "12\n")
            .put("/proc/sys/net/netfilter/nf_conntrack_max", "262144\n")
            .put("/proc/stat", "cpu  100 0 50 1000 5 0 1 20 0 0\ncpu0 50 0 25 500 2 0 0 10 0 0\n")
            .put("/sys/module/apparmor/parameters/enabled", "Y\n")
            .put("/sys/kernel/security/apparmor/profiles", "/usr/sbin/ntpd (enforce)\n/usr/bin/man (complain)\n");
        f
    }

    /// A 2-vCPU KVM guest much like the machine these tests were written on.
    pub fn kvm_guest() -> Fake {
        let mut f = Fake::common("guest", "fpu tsc hypervisor avx2");
        f.probe.kvm = Some(KvmCpuid {
            signature: "KVMKVMKVM".into(),
            features: (1 << 3) | (1 << 5) | (1 << 7),
            hints: 0,
        });
        f.put(
            "/proc/cmdline",
            "console=ttyS0 quiet cpuidle_haltpoll.force=1\n",
        )
        .put(
            "/sys/devices/system/cpu/cpuidle/current_driver",
            "haltpoll\n",
        )
        .put(
            "/sys/devices/system/cpu/cpuidle/current_governor_ro",
            "haltpoll\n",
        )
        .put("/sys/devices/system/cpu/isolated", "\n")
        .put("/sys/module/haltpoll/parameters/guest_halt_poll_ns", "0\n")
        .put(
            "/sys/module/haltpoll/parameters/guest_halt_poll_grow",
            "2\n",
        )
        .put(
            "/sys/module/haltpoll/parameters/guest_halt_poll_shrink",
            "2\n",
        )
        .put(
            "/sys/module/haltpoll/parameters/guest_halt_poll_allow_shrink",
            "Y\n",
        )
        .put("/sys/bus/virtio/devices/virtio0/device", "0x0005\n")
        .put("/sys/bus/virtio/devices/virtio1/device", "0x0001\n");
        for cpu in 0..2 {
            f.put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/name"),
                "POLL\n",
            )
            .put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/latency"),
                "0\n",
            )
            .put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/disable"),
                "0\n",
            )
            .put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/name"),
                "haltpoll idle\n",
            )
            .put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/latency"),
                "1\n",
            )
            .put(
                &format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/disable"),
                "0\n",
            );
        }
        f
    }

    /// A 2-CPU bare-metal host with intel_pstate and deep C-states.
    pub fn bare_metal() -> Fake {
        let f = Fake::common("metal", "fpu tsc avx2 vmx");
        f.put("/proc/cmdline", "root=/dev/sda1 ro quiet\n")
            .put(
                "/sys/devices/system/cpu/cpuidle/current_driver",
                "intel_idle\n",
            )
            .put(
                "/sys/devices/system/cpu/cpuidle/current_governor_ro",
                "menu\n",
            )
            .put("/sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
            .put("/sys/devices/system/cpu/intel_pstate/min_perf_pct", "20\n")
            .put("/sys/firmware/acpi/platform_profile", "balanced\n")
            .put(
                "/sys/firmware/acpi/platform_profile_choices",
                "low-power balanced performance\n",
            )
            .put("/sys/devices/system/cpu/cpu0/power/energy_perf_bias", "6\n")
            .put("/sys/devices/system/cpu/cpu1/power/energy_perf_bias", "6\n")
            .put("/proc/net/ip6_tables_names", "filter\n")
            .mkdir("/sys/module/nf_tables")
            .put("/sys/module/kvm/parameters/halt_poll_ns", "200000\n")
            .put("/sys/module/kvm/parameters/halt_poll_ns_grow", "2\n")
            .put("/sys/module/kvm/parameters/halt_poll_ns_shrink", "0\n");
        for (pol, cpu) in [("policy0", 0), ("policy1", 1)] {
            let b = format!("/sys/devices/system/cpu/cpufreq/{pol}");
            f.put(&format!("{b}/scaling_governor"), "powersave\n")
                .put(
                    &format!("{b}/scaling_available_governors"),
                    "performance powersave\n",
                )
                .put(
                    &format!("{b}/energy_performance_preference"),
                    "balance_performance\n",
                );
            for (i, (name, lat)) in [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]
                .iter()
                .enumerate()
            {
                let s = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{i}");
                f.put(&format!("{s}/name"), format!("{name}\n"))
                    .put(&format!("{s}/latency"), format!("{lat}\n"))
                    .put(&format!("{s}/disable"), "0\n");
            }
        }
        f
    }
}
