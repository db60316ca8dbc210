//! Host state the lab borrows and gives back (root): 2 MiB hugepages with a
//! hugetlbfs, and a CPU shield (a cgroup v1 cpuset holding every other
//! task). Both restore on drop, and `clean` restores what a crashed owner
//! left (simulated with `mem::forget`). Under a second.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use vnio_topo::{Entry, Hugepages, Shield, CPUSET_ROOT};

fn pool() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*path.to_string_lossy()))
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-host-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn hugepages_are_reserved_mounted_and_given_back_also_by_clean() {
    if common::skip_unless_root("hugepages") {
        return;
    }
    let journal = common::journal("huge");
    let before = pool();
    let mount = scratch("huge").join("hugetlbfs");
    let want = before + 4;
    {
        let h = Hugepages::reserve(&mount, want, &journal).expect("reserve");
        assert!(pool() >= want);
        assert!(mounted(h.dir()));
        // A file in it takes a page: the mount is a real hugetlbfs.
        std::fs::write(h.dir().join("probe"), b"").unwrap();
        assert_eq!(journal.entries().unwrap().len(), 1);
    }
    assert_eq!(pool(), before);
    assert!(!mounted(&mount) && !mount.exists());
    assert!(journal.entries().unwrap().is_empty());

    // An owner that died holding them: clean gives them back.
    let h = Hugepages::reserve(&mount, want, &journal).expect("reserve");
    std::mem::forget(h);
    let report = journal.clean().unwrap();
    assert!(
        matches!(report.removed[..], [Entry::Hugepages { .. }]),
        "{report:?}"
    );
    assert_eq!(pool(), before);
    assert!(!mounted(&mount));
}

/// The cpuset of process `pid` ("/" for the root cpuset).
fn cpuset_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cpuset"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn a_shield_moves_every_other_task_and_puts_it_back_also_by_clean() {
    if common::skip_unless_root("the CPU shield") {
        return;
    }
    if !Path::new(CPUSET_ROOT).join("cgroup.procs").exists() {
        println!("skip: the CPU shield: no cgroup v1 cpuset controller at {CPUSET_ROOT}");
        return;
    }
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus < 2 {
        println!("skip: the CPU shield: one CPU");
        return;
    }
    let journal = common::journal("shield");
    let mut other = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let last = cpus - 1;
    {
        let shield = Shield::raise(&[last], &journal).expect("raise");
        assert!(shield.moved() > 0);
        let set = cpuset_of(other.id());
        assert!(set.starts_with("/vnio-lab-shield-"), "{set}");
        let cpus_file = Path::new(CPUSET_ROOT).join(&set[1..]).join("cpuset.cpus");
        let allowed = std::fs::read_to_string(cpus_file).unwrap();
        assert!(!allowed.contains(&last.to_string()), "{allowed}");
        // This process (and what it starts from now on) stays outside.
        assert_eq!(cpuset_of(std::process::id()), "/");
    }
    assert_eq!(cpuset_of(other.id()), "/");
    assert!(journal.entries().unwrap().is_empty());

    let shield = Shield::raise(&[last], &journal).expect("raise");
    std::mem::forget(shield);
    let report = journal.clean().unwrap();
    assert!(
        matches!(report.removed[..], [Entry::Cpuset(_)]),
        "{report:?}"
    );
    assert_eq!(cpuset_of(other.id()), "/");
    let _ = other.kill();
    let _ = other.wait();
}
