//! ADD, DEL, CHECK and GC of one attachment: a switch port per
//! (network, container, interface), its record, the delegated IPAM call,
//! and the pod's side (a tap in its namespace, or a vhost-user socket in
//! its directory with the device-info file).

use crate::conf::{mac_text, Env, Kind, Mode, NetConf};
use crate::error::{CniError, CHECK_FAILED, INVALID_CONFIG};
use crate::ipam::Ipam;
use crate::record::{port_name, Record, Records};
use crate::result::{CniResult, Interface};
use crate::{netns, switch};
use std::path::{Path, PathBuf};
use vnio_switch::config::{KindSpec, PortSpec, TapSpec, VhostUserSpec};
use vnio_switch::control::Request;
use vnio_switch::port::SocketMode;
use vnio_switch::socket_access::{Resolved, SocketAccess};

/// Longest path a Unix socket address holds (sun_path, with its NUL).
const SUN_PATH: usize = 108;

/// ADD.
pub fn add(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<CniResult, CniError> {
    env.require_attachment(conf.kind == Kind::Tap)?;
    let port = port_name(&conf.name, &env.container_id, &env.ifname);
    let records = Records(conf.data_dir());
    if let Some(r) = records.get(&port) {
        // Repeated: the same answer while the port is there.
        if let (Some(res), Some(_)) = (&r.result, switch::port(&conf.control, &port)?) {
            if let Ok(res) = serde_json::from_value::<CniResult>(res.clone()) {
                return Ok(res);
            }
        }
        // Half made (a crash mid-ADD), or its port lost: undone first.
        teardown(&r, &records)?;
    }
    let conf_json: serde_json::Value = serde_json::from_slice(stdin)
        .map_err(|e| CniError::new(crate::error::DECODE, "configuration").details(e.to_string()))?;
    let mut rec = Record {
        network: conf.name.clone(),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        port: port.clone(),
        socket_dir: None,
        device_info: None,
        conf: conf_json,
        cni_path: env.path.clone(),
        result: None,
    };
    if conf.kind == Kind::VhostUser {
        // Bad values are refused before anything is made.
        socket_access(conf)?;
        rec.socket_dir = Some(pod_dir(conf, env)?);
        rec.device_info = conf.runtime_config.device_info_file.clone();
    }
    records.put(&rec)?;
    match build(env, conf, &rec) {
        Ok(res) => {
            rec.result = Some(serde_json::to_value(&res).unwrap_or_default());
            records.put(&rec)?;
            Ok(res)
        }
        Err(e) => {
            // Nothing of a failed ADD stays; the first error is the one told.
            let _ = teardown(&rec, &records);
            Err(e)
        }
    }
}

/// The pod's socket directory: one per pod (its CNI_CONTAINERID), under `socketDir`.
fn pod_dir(conf: &NetConf, env: &Env) -> Result<PathBuf, CniError> {
    let clean: String = env
        .container_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    // Short, for sun_path: a long ID keeps its first 12 characters and a
    // hash of the whole (distinct pods whose IDs share a prefix stay apart).
    let id = if clean.len() <= 24 {
        clean
    } else {
        let h = port_name("", &env.container_id, "");
        format!("{}-{}", &clean[..12], &h[h.len() - 8..])
    };
    if id.is_empty() || id.starts_with('.') {
        return Err(CniError::new(
            crate::error::INVALID_ENV,
            "CNI_CONTAINERID has no characters usable in a directory name",
        ));
    }
    Ok(conf.socket_dir().join(id))
}

fn build(env: &Env, conf: &NetConf, rec: &Record) -> Result<CniResult, CniError> {
    let mac = conf.mac()?;
    let mut spec = match conf.kind {
        Kind::Tap => {
            let tap = TapSpec {
                netns: Some(PathBuf::from(&env.netns)),
                ..TapSpec::new(&env.ifname)
            };
            PortSpec::new(&rec.port, KindSpec::Tap(tap))
        }
        Kind::VhostUser => {
            let dir = rec.socket_dir.as_deref().unwrap_or(Path::new("/"));
            let sock = dir.join(format!("{}.sock", env.ifname));
            if sock.as_os_str().len() >= SUN_PATH {
                return Err(CniError::new(
                    INVALID_CONFIG,
                    format!(
                        "socket path {} is longer than a Unix socket address holds ({} bytes): use a shorter socketDir",
                        sock.display(),
                        SUN_PATH - 1
                    ),
                ));
            }
            make_private_dir(dir)?;
            let mode = match conf.mode {
                Mode::Server => SocketMode::Server,
                Mode::Client => SocketMode::Client,
            };
            let mut v = VhostUserSpec::new(&sock, mode);
            if let Some(q) = conf.queues {
                v.queues = q;
            }
            if conf.mode == Mode::Server {
                v.socket_access = socket_access(conf)?.map(|(numeric, _)| numeric);
            }
            PortSpec::new(&rec.port, KindSpec::VhostUser(v))
        }
    };
    spec.vlan = conf.vlan;
    spec.mac = mac.map(mac_text);
    switch::call(&conf.control, &Request::PortAdd { port: spec.clone() })?;
    if let Some(dir) = &rec.socket_dir {
        open_dir(conf, dir)?;
    }
    let ipam = match Ipam::from_conf(conf.ipam.as_ref(), &env.path, &conf.data_dir())? {
        Some(i) => i
            .exec(
                "ADD",
                &[],
                &serde_json::to_vec(&rec.conf).unwrap_or_default(),
            )?
            .unwrap_or_default(),
        None => CniResult::default(),
    };
    let mut iface = Interface {
        name: env.ifname.clone(),
        ..Default::default()
    };
    match conf.kind {
        Kind::Tap => {
            let got = netns::configure(&env.netns, &env.ifname, conf.mtu, mac, &ipam)?;
            iface.mac = got.map(mac_text).unwrap_or_default();
            iface.sandbox = env.netns.clone();
            iface.mtu = conf.mtu;
        }
        Kind::VhostUser => {
            let sock = spec
                .kind
                .vhost_user()
                .map(|v| v.socket.clone())
                .unwrap_or_default();
            iface.mac = mac.map(mac_text).unwrap_or_default();
            iface.socket_path = sock.display().to_string();
            if let Some(f) = &rec.device_info {
                write_device_info(f, conf.mode, &sock)?;
            }
        }
    }
    let mut ips = ipam.ips;
    for ip in &mut ips {
        ip.interface = Some(0);
    }
    Ok(CniResult {
        cni_version: conf.cni_version.clone(),
        interfaces: vec![iface],
        ips,
        routes: ipam.routes,
        dns: ipam.dns,
    })
}

/// The socket's owner, group and mode with names resolved here (the
/// switch is handed ids: it may run with another user database), or the
/// one-line error naming the configuration key.
fn socket_access(conf: &NetConf) -> Result<Option<(SocketAccess, Resolved)>, CniError> {
    let Some(a) = conf.socket_access() else {
        return Ok(None);
    };
    let key = |e: String| {
        let mut c = e.chars();
        let first = c.next().map(|f| f.to_ascii_uppercase()).unwrap_or(' ');
        CniError::new(INVALID_CONFIG, format!("socket{first}{}", c.as_str()))
    };
    let resolved = a.resolve().map_err(key)?;
    Ok(Some((a.numeric().map_err(key)?, resolved)))
}

/// The pod's directory, made reachable by root only until its socket has
/// its owner and mode ([`open_dir`]): no other user can reach the socket
/// in between. One that exists (another interface of the pod) is kept as it is.
fn make_private_dir(dir: &Path) -> Result<(), CniError> {
    use std::os::unix::fs::DirBuilderExt;
    let err = |e: std::io::Error| CniError::io(format!("creating {}", dir.display()), &e);
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r.map_err(err),
    }
}

/// Gives the pod's directory the socket's owner and group and a mode that
/// lets them in (and, in client mode, lets the pod's VMM make its socket).
fn open_dir(conf: &NetConf, dir: &Path) -> Result<(), CniError> {
    let resolved = socket_access(conf)?.map(|(_, r)| r).unwrap_or_default();
    let d = Resolved {
        mode: Some(resolved.dir_mode(conf.mode == Mode::Client)),
        ..resolved
    };
    d.apply(dir)
        .map_err(|e| CniError::io(format!("giving {} its owner and mode", dir.display()), &e))
}

/// The device-info file (k8snetworkplumbingwg device-info spec 1.1.0):
/// `mode` is the pod's side, the other end from the switch's (a switch
/// in server mode has the pod's VMM connect as a client).
fn write_device_info(path: &Path, switch_mode: Mode, sock: &Path) -> Result<(), CniError> {
    let pod_mode = match switch_mode {
        Mode::Server => "client",
        Mode::Client => "server",
    };
    let info = serde_json::json!({
        "type": "vhost-user",
        "version": "1.1.0",
        "vhost-user": { "mode": pod_mode, "path": sock.display().to_string() },
    });
    let err =
        |e: std::io::Error| CniError::io(format!("writing device info {}", path.display()), &e);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(err)?;
    }
    std::fs::write(path, serde_json::to_vec(&info).unwrap_or_default()).map_err(err)
}

/// DEL: whatever of the attachment is left goes; nothing left is fine.
pub fn del(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    env.require_attachment(false)?;
    let port = port_name(&conf.name, &env.container_id, &env.ifname);
    let records = Records(conf.data_dir());
    let rec = records.get(&port).unwrap_or_else(|| Record {
        network: conf.name.clone(),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        port,
        socket_dir: None,
        device_info: None,
        conf: serde_json::from_slice(stdin).unwrap_or_default(),
        cni_path: env.path.clone(),
        result: None,
    });
    teardown(&rec, &records)
}

/// Undoes an attachment from its record: the port (which takes a tap with
/// it), the IPAM lease, the socket directory and device info, the record.
/// The record goes last, so that a failure leaves it for the next DEL or GC.
fn teardown(rec: &Record, records: &Records) -> Result<(), CniError> {
    let conf: NetConf = serde_json::from_value(rec.conf.clone()).map_err(|e| {
        CniError::new(crate::error::DECODE, "recorded configuration").details(e.to_string())
    })?;
    switch::del(&conf.control, &rec.port)?;
    netns::remove_tap(&rec.netns, &rec.ifname)?;
    if let Some(ipam) = Ipam::from_conf(conf.ipam.as_ref(), &rec.cni_path, &conf.data_dir())? {
        let env = [
            ("CNI_CONTAINERID", rec.container_id.as_str()),
            ("CNI_IFNAME", rec.ifname.as_str()),
            ("CNI_NETNS", rec.netns.as_str()),
        ];
        ipam.exec(
            "DEL",
            &env,
            &serde_json::to_vec(&rec.conf).unwrap_or_default(),
        )?;
    }
    if let Some(dir) = &rec.socket_dir {
        if crate::record::is_under(&conf.socket_dir(), dir) {
            let sock = dir.join(format!("{}.sock", rec.ifname));
            let _ = vnio_switch::sockpath::remove_stale(&sock);
            // The pod's directory goes with its last socket.
            let _ = std::fs::remove_dir(dir);
        }
    }
    if let Some(f) = &rec.device_info {
        let _ = std::fs::remove_file(f);
    }
    records.remove(&rec.port)
}

/// CHECK: the port, the pod's side and the IPAM lease are as ADD left them.
pub fn check(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    env.require_attachment(conf.kind == Kind::Tap)?;
    let prev: CniResult = match &conf.prev_result {
        Some(p) => serde_json::from_value(p.clone()).map_err(|e| {
            CniError::new(crate::error::DECODE, "prevResult").details(e.to_string())
        })?,
        None => return Err(CniError::new(INVALID_CONFIG, "CHECK needs prevResult")),
    };
    let port = port_name(&conf.name, &env.container_id, &env.ifname);
    let fail = |m: String| CniError::new(CHECK_FAILED, m);
    let p = switch::port(&conf.control, &port)?
        .ok_or_else(|| fail(format!("the switch has no port {port}")))?;
    match conf.kind {
        Kind::Tap => {
            if p["kind"] != "tap" {
                return Err(fail(format!("port {port} is not a tap")));
            }
            netns::check(&env.netns, &env.ifname, &prev)?;
        }
        Kind::VhostUser => {
            if p["kind"] != "vhost-user" {
                return Err(fail(format!("port {port} is not a vhost-user port")));
            }
            let sock = prev
                .interfaces
                .first()
                .map(|i| i.socket_path.clone())
                .unwrap_or_default();
            if conf.mode == Mode::Server && !Path::new(&sock).exists() {
                return Err(fail(format!("socket {sock} is gone")));
            }
        }
    }
    if let Some(ipam) = Ipam::from_conf(conf.ipam.as_ref(), &env.path, &conf.data_dir())? {
        ipam.exec("CHECK", &[], stdin)?;
    }
    Ok(())
}

/// GC: every attachment of this network not among the valid ones is torn
/// down; all are tried, the first failure is told.
pub fn gc(conf: &NetConf) -> Result<(), CniError> {
    // libcni leaves the key out when the list is empty: nothing is valid.
    let valid = conf.valid_attachments.as_deref().unwrap_or_default();
    let records = Records(conf.data_dir());
    let mut first = None;
    for r in records.of_network(&conf.name) {
        let keep = valid
            .iter()
            .any(|a| a.container_id == r.container_id && a.ifname == r.ifname);
        if !keep {
            if let Err(e) = teardown(&r, &records) {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}
