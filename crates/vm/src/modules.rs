//! Kernel modules in load order, read from the kernel's own `modules.dep`
//! (what depmod computed from the modules' symbols), never a hard-coded
//! list: a new kernel that splits or merges modules still boots.

use std::collections::HashMap;

/// The parsed `modules.dep` (and `modules.builtin`) of one kernel.
#[derive(Debug, Default)]
pub struct ModuleDeps {
    /// Module path (relative to /lib/modules/VERSION) -> its dependencies' paths.
    deps: HashMap<String, Vec<String>>,
    /// Module name -> path.
    by_name: HashMap<String, String>,
    /// Names of modules built into the kernel image.
    builtin: Vec<String>,
}

/// The module name of a path: `kernel/drivers/net/virtio_net.ko.xz` ->
/// `virtio_net`. Dashes and underscores are the same to the kernel.
pub fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

impl ModuleDeps {
    /// Parses `modules.dep` ("path: dep dep ...") and `modules.builtin`
    /// (one path per line).
    pub fn parse(modules_dep: &str, modules_builtin: &str) -> Self {
        let mut me = Self::default();
        for line in modules_dep.lines() {
            let Some((path, deps)) = line.split_once(':') else {
                continue;
            };
            let path = path.trim().to_string();
            let deps = deps.split_whitespace().map(str::to_string).collect();
            me.by_name.insert(module_name(&path), path.clone());
            me.deps.insert(path, deps);
        }
        me.builtin = modules_builtin
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(module_name)
            .collect();
        me
    }

    /// Whether `name` is compiled into the kernel (nothing to load).
    pub fn is_builtin(&self, name: &str) -> bool {
        let name = name.replace('-', "_");
        self.builtin.contains(&name)
    }

    /// The module files to load, dependencies first, so that every module
    /// in `wanted` (by name) ends up loaded. Built-in modules are skipped;
    /// unknown ones are an error naming them.
    pub fn load_order(&self, wanted: &[&str]) -> Result<Vec<String>, String> {
        let mut order = Vec::new();
        let mut missing = Vec::new();
        for name in wanted {
            let key = name.replace('-', "_");
            match self.by_name.get(&key) {
                Some(path) => self.visit(path, &mut order, &mut Vec::new())?,
                None if self.is_builtin(&key) => {}
                None => missing.push(*name),
            }
        }
        if missing.is_empty() {
            Ok(order)
        } else {
            Err(format!(
                "modules.dep has no module {} (and it is not built in)",
                missing.join(", ")
            ))
        }
    }

    /// Depth-first: each dependency's own dependencies before it. Each
    /// module's line already lists its whole closure, but visiting them
    /// recursively makes the order right whatever order depmod wrote.
    fn visit(
        &self,
        path: &str,
        order: &mut Vec<String>,
        stack: &mut Vec<String>,
    ) -> Result<(), String> {
        if order.iter().any(|p| p == path) {
            return Ok(());
        }
        if stack.iter().any(|p| p == path) {
            return Err(format!("modules.dep has a dependency cycle through {path}"));
        }
        stack.push(path.to_string());
        for dep in self.deps.get(path).into_iter().flatten() {
            if !self.deps.contains_key(dep) {
                return Err(format!(
                    "modules.dep: {path} needs {dep}, which it does not list"
                ));
            }
            self.visit(dep, order, stack)?;
        }
        stack.pop();
        order.push(path.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape of Debian 6.1's modules.dep for the NIC drivers.
    const DEP: &str = "\
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/char/virtio_console.ko:
kernel/drivers/net/ethernet/intel/e1000/e1000.ko:
kernel/drivers/char/hw_random/virtio-rng.ko:
";
    const BUILTIN: &str = "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n";

    fn pos(order: &[String], name: &str) -> usize {
        order
            .iter()
            .position(|p| module_name(p) == name)
            .unwrap_or_else(|| panic!("{name} not in {order:?}"))
    }

    #[test]
    fn dependencies_come_first() {
        let d = ModuleDeps::parse(DEP, BUILTIN);
        let order = d
            .load_order(&[
                "virtio",
                "virtio_pci",
                "virtio_net",
                "virtio_console",
                "e1000",
            ])
            .unwrap();
        assert_eq!(order.len(), 8, "{order:?}");
        assert!(pos(&order, "failover") < pos(&order, "net_failover"));
        assert!(pos(&order, "net_failover") < pos(&order, "virtio_net"));
        assert!(pos(&order, "virtio_pci_modern_dev") < pos(&order, "virtio_pci"));
        assert!(pos(&order, "virtio_pci_legacy_dev") < pos(&order, "virtio_pci"));
        // Each module once, even when wanted twice or shared.
        let again = d
            .load_order(&["virtio_net", "net_failover", "virtio_net"])
            .unwrap();
        assert_eq!(again.len(), 3);
    }

    #[test]
    fn builtin_modules_are_skipped_and_unknown_ones_named() {
        let d = ModuleDeps::parse(DEP, BUILTIN);
        assert!(d.is_builtin("virtio_ring"));
        assert!(d.load_order(&["virtio", "virtio_ring"]).unwrap().is_empty());
        let err = d
            .load_order(&["virtio_net", "vhost_net", "nope"])
            .unwrap_err();
        assert!(err.contains("vhost_net, nope"), "{err}");
    }

    #[test]
    fn names_ignore_compression_and_dashes() {
        assert_eq!(module_name("kernel/a/virtio_net.ko.xz"), "virtio_net");
        assert_eq!(module_name("kernel/a/virtio-rng.ko.zst"), "virtio_rng");
        let d = ModuleDeps::parse(DEP, BUILTIN);
        assert_eq!(d.load_order(&["virtio-rng"]).unwrap().len(), 1);
    }

    #[test]
    fn a_cycle_is_an_error_not_a_hang() {
        let d = ModuleDeps::parse("a.ko: b.ko\nb.ko: a.ko\n", "");
        assert!(d.load_order(&["a"]).unwrap_err().contains("cycle"));
    }
}
