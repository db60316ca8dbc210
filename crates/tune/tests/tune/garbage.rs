//! Garbage in /proc and /sys: every file of the fake machines replaced by
//! garbage of several kinds must give findings, never a panic; the files a
//! knob depends on must make that knob say `unreadable` and name the file.

use vnio_tune::{audit, Profile, Status};

use crate::audit_fake::find;
use crate::fake::Fake;

const VARIANTS: &[&[u8]] = &[
    b"",
    b"garbage\n",
    b"\xff\xfe\x00\x01",
    b"-1\n",
    b"99999999999999999999999999\n",
    b"[\n",
    b"1-0,,\n",
    b"   \n\n\t",
];

fn check_all(fake: &Fake, file: &str, what: &str) {
    for p in Profile::ALL {
        let a = audit(&fake.host(), p);
        for f in &a.findings {
            assert!(
                !f.current.contains("internal error"),
                "{file} as {what}: {}: {}",
                f.id,
                f.current
            );
            assert!(
                !f.current.is_empty(),
                "{file} as {what}: {}: empty value",
                f.id
            );
            if f.status == Status::Unreadable {
                assert!(
                    f.current.starts_with("unreadable: /"),
                    "{file} as {what}: {}: {}",
                    f.id,
                    f.current
                );
            }
            if f.status == Status::NotVisible {
                assert!(
                    f.current.starts_with("not visible from here: "),
                    "{file} as {what}: {}: {}",
                    f.id,
                    f.current
                );
            }
        }
        let s = a.summary;
        assert_eq!(
            s.ok + s.differs + s.info + s.not_visible + s.unreadable,
            a.findings.len()
        );
    }
}

#[test]
fn every_file_replaced_by_garbage_never_panics() {
    for fake in [Fake::kvm_guest(), Fake::bare_metal()] {
        for file in fake.files() {
            let path = fake.path(&file);
            let original = std::fs::read(&path).expect("read original");
            for v in VARIANTS {
                std::fs::write(&path, v).expect("write garbage");
                check_all(&fake, &file, &format!("{:?}", String::from_utf8_lossy(v)));
            }
            // A directory where a file should be.
            std::fs::remove_file(&path).expect("remove");
            std::fs::create_dir(&path).expect("mkdir in place of file");
            check_all(&fake, &file, "a directory");
            std::fs::remove_dir(&path).expect("rmdir");
            // Absent.
            check_all(&fake, &file, "absent");
            std::fs::write(&path, original).expect("restore original");
        }
    }
}

#[test]
fn garbage_in_a_knob_file_names_the_file() {
    let cases: &[(&str, &str)] = &[
        ("/proc/sys/net/core/busy_poll", "net.busy-poll"),
        ("/sys/devices/system/cpu/online", "idle.states"),
        (
            "/sys/devices/system/cpu/cpu0/cpuidle/state1/latency",
            "idle.states",
        ),
        (
            "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
            "idle.haltpoll",
        ),
        ("/sys/kernel/mm/transparent_hugepage/enabled", "mem.thp"),
        ("/sys/kernel/mm/ksm/run", "mem.ksm"),
        ("/proc/stat", "virt.steal"),
        ("/proc/self/limits", "mem.memlock"),
        (
            "/proc/sys/net/netfilter/nf_conntrack_count",
            "sec.conntrack",
        ),
        ("/proc/sys/vm/swappiness", "mem.vm-sysctls"),
        ("/sys/devices/system/node/online", "mem.numa"),
        ("/proc/meminfo", "mem.hugepages"),
        ("/sys/class/net/eth0/napi_defer_hard_irqs", "net.napi"),
        ("/sys/class/net/eth0/queues/rx-0/rps_cpus", "net.rps-xps"),
        ("/dev/cpu_dma_latency", "idle.pm-qos"),
        ("/proc/cpuinfo", "virt.hypervisor"),
    ];
    let fake = Fake::kvm_guest();
    for (file, id) in cases {
        let original = std::fs::read(fake.path(file)).expect("read original");
        fake.put(file, "garbage\n");
        let a = audit(&fake.host(), Profile::Latency);
        let f = find(&a, id);
        assert_eq!(f.status, Status::Unreadable, "{file}: {id}: {}", f.current);
        assert!(
            f.current.starts_with(&format!("unreadable: {file}: ")),
            "{file}: {id}: {}",
            f.current
        );
        assert!(
            f.changes.is_empty(),
            "{id}: nothing is planned on an unreadable knob"
        );
        fake.put(file, original);
    }
}

#[test]
fn garbage_messages_say_what_was_expected() {
    let fake = Fake::kvm_guest();
    fake.put("/proc/sys/net/core/busy_poll", "fifty\n");
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(
        find(&a, "net.busy-poll").current,
        "unreadable: /proc/sys/net/core/busy_poll: expected an unsigned integer, found \"fifty\""
    );
    fake.put("/proc/sys/net/core/busy_poll", b"\xff\xfe");
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(
        find(&a, "net.busy-poll").current,
        "unreadable: /proc/sys/net/core/busy_poll: not UTF-8 text"
    );
    fake.put(
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise never\n",
    );
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(
        find(&a, "mem.thp").current,
        "unreadable: /sys/kernel/mm/transparent_hugepage/enabled: expected a [selected] choice, found \"always madvise never\""
    );
    fake.put("/proc/stat", "cpu  1 2 3\n");
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(
        find(&a, "virt.steal").current,
        "unreadable: /proc/stat: expected at least 8 fields on the cpu line, found 3"
    );
    fake.put("/sys/devices/system/cpu/online", "x".repeat(100_000));
    let a = audit(&fake.host(), Profile::Latency);
    let cur = &find(&a, "idle.states").current;
    assert!(cur.len() < 200, "long garbage is cut: {cur}");
}
