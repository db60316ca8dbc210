//! `vnio vm run --print-qemu` for passthrough NICs: rendering only; the
//! plan is `vnio_vm::passthrough`.

/// `--print-qemu`'s lines for passthrough NICs: what the launch would do
/// on this host, or why it cannot.
pub fn print_passthrough(spec: &vnio_vm::spec::VmSpec) {
    use vnio_vm::passthrough::Sysfs;
    match vnio_vm::passthrough::plans(spec, &Sysfs::host()) {
        Err(e) => println!("# cannot launch on this host: {e}"),
        Ok(plans) => {
            for (i, p) in plans {
                if let Some(c) = &p.sriov {
                    if c.after != c.before {
                        println!(
                            "# host: nic{i}: sriov_numvfs of {} {} -> {} (back at stop)",
                            c.pf, c.before, c.after
                        );
                    }
                }
                for b in &p.bindings {
                    println!(
                        "# host: nic{i}: {} from {} to vfio-pci (IOMMU group; back at stop)",
                        b.addr,
                        b.driver.as_deref().unwrap_or("no driver")
                    );
                }
                println!(
                    "# host: RLIMIT_MEMLOCK >= {} MiB (VFIO pins guest memory)",
                    vnio_vm::passthrough::memlock_bytes(spec.mem_mib) >> 20
                );
            }
        }
    }
}
