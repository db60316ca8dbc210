//! Pods added and deleted through a configuration's CNI plugin, timed
//! (workload kinds `attach` and `detach`, knob `attach = "cni"`): what a
//! node's runtime pays per pod, beside what its traffic pays.
//!
//! An iteration adds N pods one after another, then deletes them, last
//! first. Each pod is a fresh namespace, made before its ADD and removed
//! after its DEL, outside the time taken; the plugin is run exactly as the
//! testbed attaches its hosts (`super::cni::call`: the CNI_* environment,
//! the configuration on stdin, host-local IPAM), `vnio cni` of the host
//! named by the workload's `from` (a tap, or a vhost-user socket for a
//! poll-mode host) on the switch, the reference `bridge` plugin on the
//! Linux bridge. The pods take their addresses from a subnet of their own,
//! with their own records and leases, so what they leave is theirs.
//!
//! After each DEL, everything the pod's ADD brought must be gone: its
//! namespace, its switch port, its interface in the wire's namespace, its
//! lease, its record and its socket directory. Anything left fails the
//! point with what it was. The ADDs' times are an `attach` point's
//! round trips, the DELs' a `detach` point's, so the p50/p99 and ratio
//! findings read them as they read any latency.

use super::*;
use crate::host::RunnerOptions;
use crate::scenario::{Attach, Point, RunSpec, WorkloadKind};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, Iteration, Measured};
use vnio_measure::stats::Latency;

/// The pods' subnet, apart from the hosts' (the lab's 10.x.y.0/24s).
const POD_SUBNET: &str = "10.251.0.0/16";

/// Times point `p` (an attach or detach workload) on `bed`, its pods
/// attached as `from` is.
pub fn measure(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let w = &p.workload;
    let plugin = Plugin::of(bed, from, &opts.vnio).map_err(|e| e.to_string())?;
    let mut doc = Document::new(
        w.kind.as_str(),
        json!({ "pods": w.pods, "plugin": plugin.what, "netns": "one per pod" }),
        Vec::new(),
        Environment::capture(250),
    );
    for index in 0..run.iterations.max(1) as usize {
        if stop.load(Ordering::Relaxed) {
            doc.interrupted = true;
            break;
        }
        match plugin.cycle(w.pods, &opts.journal, stop) {
            Ok(times) => {
                let timed = match w.kind {
                    WorkloadKind::Detach => &times.dels,
                    _ => &times.adds,
                };
                doc.iterations.push(iteration(index, timed, times.seconds));
            }
            Err(e) if doc.iterations.is_empty() => return Err(e),
            Err(e) => {
                doc.errors.push(e);
                break;
            }
        }
    }
    doc.conclude();
    Ok(doc)
}

/// One iteration's operations as round trips: `ops` of them, their
/// histogram, over `seconds` of the whole cycle.
fn iteration(index: usize, timed: &[u64], seconds: f64) -> Iteration {
    let mut lat = Latency::new();
    for &ns in timed {
        lat.record(ns);
    }
    let busy_s = timed.iter().sum::<u64>() as f64 / 1e9;
    let ops = timed.len() as u64;
    let merged = Measured {
        target: "all".into(),
        latency: Some(lat.summary()),
        histogram: Some(lat.encode()),
        ops,
        ops_per_s: if busy_s > 0.0 {
            ops as f64 / busy_s
        } else {
            0.0
        },
        sent: ops,
        ..Default::default()
    };
    Iteration {
        index,
        seconds,
        per_target: vec![Measured {
            target: "pods".into(),
            ..merged.clone()
        }],
        merged,
        ..Default::default()
    }
}

/// The times of one iteration's ADDs and DELs, ns.
struct Times {
    adds: Vec<u64>,
    dels: Vec<u64>,
    /// Wall time of the whole cycle, namespaces and checks included.
    seconds: f64,
}

/// The configuration's plugin, ready to run for any pod.
struct Plugin<'a> {
    /// What runs, for the document.
    what: String,
    /// The plugin's executable and its arguments.
    program: PathBuf,
    args: Vec<&'static str>,
    /// Where it runs (the bridge plugin makes its veths there).
    netns: Option<&'a Netns>,
    /// The namespace whose interfaces a pod may leave behind.
    wire: &'a Netns,
    /// The switch's control socket (`vnio cni` only).
    control: Option<PathBuf>,
    cni_path: &'static str,
    conf: Value,
    /// The pods' records, leases and socket directories.
    records: PathBuf,
    leases: PathBuf,
    sockets: PathBuf,
}

impl<'a> Plugin<'a> {
    /// The plugin `bed` attaches `from` with, set up for pods.
    fn of(bed: &'a Testbed, from: &BedHost, vnio: &Path) -> Result<Plugin<'a>, BedError> {
        let what = "attach and detach";
        if bed.description.knobs.attach != Some(Attach::Cni) {
            return Err(setup(what, "time CNI plugins: set knob attach = \"cni\""));
        }
        let wire = bed
            .wire_ns
            .as_ref()
            .ok_or_else(|| setup(what, "need the switch or a Linux bridge as the wire"))?;
        let cni_path = cni::plugin_dir()?;
        let dir = bed.scratch.path().join("cni-pods");
        let name = "lab-pods";
        let (records, leases, sockets) = (
            dir.join("records"),
            dir.join("ipam").join(name),
            dir.join("pods"),
        );
        let ipam = json!({
            "type": "host-local",
            "ranges": [[{ "subnet": POD_SUBNET }]],
            "dataDir": dir.join("ipam").display().to_string(),
        });
        if bed.switch.is_none() {
            let conf = json!({
                "cniVersion": "1.0.0",
                "name": name,
                "type": "bridge",
                "bridge": "cni0",
                "ipam": ipam,
            });
            return Ok(Plugin {
                what: format!("{cni_path}/bridge"),
                program: Path::new(cni_path).join("bridge"),
                args: Vec::new(),
                netns: Some(wire),
                wire,
                control: None,
                cni_path,
                conf,
                records,
                leases,
                sockets,
            });
        }
        let control = bed.scratch.path().join("switch.sock");
        let kind = match from.kind {
            HostKind::Namespace => "tap",
            _ => "vhost-user",
        };
        let mut conf = json!({
            "cniVersion": "1.1.0",
            "name": name,
            "type": "vnio-cni",
            "kind": kind,
            "control": control,
            "dataDir": records.display().to_string(),
            "ipam": ipam,
        });
        if kind == "vhost-user" {
            conf["socketDir"] = sockets.display().to_string().into();
        }
        Ok(Plugin {
            what: format!("vnio cni kind {kind}"),
            program: vnio.to_path_buf(),
            args: vec!["cni"],
            netns: None,
            wire,
            control: Some(control),
            cni_path,
            conf,
            records,
            leases,
            sockets,
        })
    }

    /// Runs `command` for `container` in `netns`; how long it took, ns.
    fn timed(&self, command: &str, container: &str, netns: &Netns) -> Result<u64, String> {
        let mut program = match self.netns {
            Some(ns) => ns.command(&self.program),
            None => std::process::Command::new(&self.program),
        };
        program.args(&self.args);
        let call = cni::Call {
            plugin: program,
            container,
            netns: netns.path(),
            cni_path: self.cni_path,
            conf: self.conf.clone(),
        };
        let t0 = Instant::now();
        cni::call(command, call).map_err(|e| e.to_string())?;
        Ok(t0.elapsed().as_nanos() as u64)
    }

    /// N pods added, then deleted last first, each DEL checked to leave
    /// what was there before its ADD. Every pod made is deleted, even
    /// after a failure.
    fn cycle(&self, n: u32, journal: &Journal, stop: &AtomicBool) -> Result<Times, String> {
        let t0 = Instant::now();
        let (id, _) = unique_id();
        let mut pods: Vec<(String, Netns, Census)> = Vec::new();
        let mut adds = Vec::new();
        let mut failed = None;
        for k in 0..n {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let before = match self.census() {
                Ok(c) => c,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let ns = match Netns::create_with_journal(&format!("vnio-{id}-pod{k}"), journal) {
                Ok(ns) => ns,
                Err(e) => {
                    failed = Some(format!("making pod {k}'s namespace: {e}"));
                    break;
                }
            };
            let container = format!("{id}-pod{k}");
            let added = self.timed("ADD", &container, &ns);
            pods.push((container, ns, before));
            match added {
                Ok(ns) => adds.push(ns),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut dels = Vec::new();
        while let Some((container, ns, before)) = pods.pop() {
            let deleted = self.timed("DEL", &container, &ns);
            let path = ns.path();
            let removed = ns
                .delete()
                .map_err(|e| format!("removing {}: {e}", path.display()));
            let outcome = deleted
                .and_then(|t| removed.map(|()| t))
                .and_then(|t| self.left_by(&container, &path, &before).map(|()| t));
            match outcome {
                Ok(t) => dels.push(t),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        dels.reverse();
        Ok(Times {
            adds,
            dels,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Nothing of `container` left: its namespace `netns` gone, and the
    /// census back to `before` its ADD.
    fn left_by(&self, container: &str, netns: &Path, before: &Census) -> Result<(), String> {
        let mut left = Vec::new();
        if netns.exists() {
            left.push(format!("namespace {}", netns.display()));
        }
        let now = self.census()?;
        let mut differs = |what: &str, was: usize, is: usize| {
            if is != was {
                left.push(format!("{what}: {is} where {was} were before its ADD"));
            }
        };
        differs("switch ports", before.ports, now.ports);
        differs(
            "interfaces in the wire's namespace",
            before.links,
            now.links,
        );
        differs("IPAM leases", before.leases, now.leases);
        differs("vnio cni records", before.records, now.records);
        differs("vhost-user socket directories", before.sockets, now.sockets);
        if left.is_empty() {
            return Ok(());
        }
        Err(format!(
            "pod {container} left after its DEL: {}",
            left.join("; ")
        ))
    }

    /// What the pods can leave behind, counted.
    fn census(&self) -> Result<Census, String> {
        let ports = match &self.control {
            None => 0,
            Some(sock) => switch_ports(sock)?,
        };
        Ok(Census {
            ports,
            links: links_in(self.wire)?,
            // host-local keeps a file per lease, named by its address,
            // beside its lock and last-reserved notes.
            leases: entries(&self.leases, |n| n.parse::<std::net::IpAddr>().is_ok()),
            records: entries(&self.records, |n| {
                n.ends_with(".json") && !n.starts_with('.')
            }),
            sockets: entries(&self.sockets, |_| true),
        })
    }
}

/// Counts of what pods leave behind.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Census {
    ports: usize,
    links: usize,
    leases: usize,
    records: usize,
    sockets: usize,
}

/// The switch's ports, counted over its control socket.
fn switch_ports(control: &Path) -> Result<usize, String> {
    use vnio_switch::control::{Client, Request};
    let listed = Client::connect(control)
        .and_then(|mut c| c.request(&Request::PortList))
        .map_err(|e| format!("listing the switch's ports: {e}"))?;
    listed
        .as_array()
        .map(Vec::len)
        .ok_or_else(|| format!("the switch's port list is not a list: {listed}"))
}

/// Interfaces in `ns`, counted by `ip` run there.
fn links_in(ns: &Netns) -> Result<usize, String> {
    let out = ns
        .command("ip")
        .args(["-o", "link", "show"])
        .output()
        .map_err(|e| format!("running ip in {}: {e}", ns.name()))?;
    if !out.status.success() {
        return Err(format!(
            "ip link in {}: {}",
            ns.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().count())
}

/// Entries of `dir` whose names pass `keep` (none when it does not exist).
fn entries(dir: &Path, keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(dir).map_or(0, |it| {
        it.filter_map(Result::ok)
            .filter(|e| e.file_name().to_str().is_some_and(&keep))
            .count()
    })
}
