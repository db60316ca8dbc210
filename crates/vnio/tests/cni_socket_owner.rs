//! A vhost-user pod's socket given to another user (`socketOwner`,
//! `socketGroup`, `socketMode`): a poll-mode endpoint running as `nobody`
//! (`setpriv`, as QEMU runs as `libvirt-qemu`) connects and answers a tap
//! pod's pings, also after a switch restart restored the port; without the
//! keys it is refused; a wrong value is a one-line error that leaves
//! nothing behind. Driven by cnitool; skips as the other CNI tests do, and
//! without setpriv or the user `nobody`.

mod cni;

use cni::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// The uid and gid of `nobody` and its group, when this machine has them.
fn nobody() -> Option<(String, String)> {
    let id = |flag: &str| {
        let o = Command::new("id").args([flag, "nobody"]).output().ok()?;
        let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
        (o.status.success() && !s.is_empty()).then_some(s)
    };
    let have_setpriv = Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let (Some(uid), Some(group), true) = (id("-u"), id("-gn"), have_setpriv) else {
        println!("skip: needs setpriv and the user nobody");
        return None;
    };
    (uid == NOBODY.to_string()).then_some(("nobody".into(), group))
}

/// A network `<name>` of kind vhost-user on 10.`net`.0.0/16 with `extra` keys.
fn vu_net(w: &World, name: &str, net: u8, extra: &str) {
    let d = w.dir.display();
    let extra = format!(r#""kind":"vhost-user","socketDir":"{d}/pods",{extra}"#);
    net_conf(w, name, net, &extra);
}

/// A network `<name>` of `vnio-cni` on 10.`net`.0.0/16 with `extra` keys.
fn net_conf(w: &World, name: &str, net: u8, extra: &str) {
    let d = w.dir.display();
    std::fs::write(
        w.dir.join(format!("net.d/30-{name}.conflist")),
        format!(
            r#"{{"cniVersion":"1.1.0","name":"{name}","plugins":[{{"type":"vnio-cni","control":"{d}/ctl.sock","dataDir":"{d}/data",{extra}"ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.{net}.0.0/16"}}]],"dataDir":"{d}/ipam"}}}}]}}"#
        ),
    )
    .unwrap();
}

/// `vnio endpoint` on `sock` as `nobody`, answering as `ip`.
fn endpoint_as_nobody(sock: &str, ip: std::net::Ipv4Addr, group: &str) -> Child {
    Command::new("setpriv")
        .args([
            "--reuid=nobody",
            &format!("--regid={group}"),
            "--clear-groups",
        ])
        .arg(VNIO)
        .arg("endpoint")
        .arg(format!("vhost-user:{sock},ip={ip},wait"))
        .args(["-d", "30s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Pings `ip` from `pod` until every ping of a round is answered.
fn answered(pod: &str, ip: std::net::Ipv4Addr) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let (sent, lost) = ping(pod, ip, "300ms");
        if sent > 10 && lost == 0 {
            return true;
        }
    }
    false
}

fn socket_of(r: &serde_json::Value) -> String {
    r["interfaces"][0]["socketPath"].as_str().unwrap().into()
}

#[test]
fn a_vmm_running_as_another_user_connects_to_the_socket_given_to_it() {
    let Some((user, group)) = nobody() else {
        return;
    };
    let Some(mut w) = World::new("own", 71) else {
        return;
    };
    let owned = format!(
        r#""socketOwner":"{user}","socketGroup":"{group}","socketMode":"0660","mode":"server","#
    );
    vu_net(&w, "own-nobody", 73, &owned);
    let (plain_ns, vm_ns, pod) = (w.netns(0), w.netns(1), w.netns(2));

    // Without the keys the socket is root's: nobody is refused.
    let plain = socket_of(&w.ok("add", &w.net("vu"), &plain_ns, None));
    let refused = endpoint_as_nobody(&plain, "10.72.0.9".parse().unwrap(), &group);
    let out = refused.wait_with_output_stderr();
    assert!(
        out.contains("ermission denied"),
        "nobody cannot connect to root's socket: {out}"
    );

    let r = w.ok("add", "own-nobody", &vm_ns, None);
    let sock = socket_of(&r);
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!((meta.uid(), meta.gid() > 0), (NOBODY, true));
    assert_eq!(meta.permissions().mode() & 0o7777, 0o660);
    let dir = std::fs::metadata(Path::new(&sock).parent().unwrap()).unwrap();
    assert_eq!(dir.uid(), NOBODY);
    assert_eq!(dir.permissions().mode() & 0o7777, 0o550);

    // A tap pod pings the endpoint that nobody runs on the socket.
    w.ok("add", &w.net("tap"), &pod, None);
    let name = pod.rsplit('/').next().unwrap();
    let ok = Command::new("ip")
        .args(["-n", name, "route", "add", "10.73.0.0/16", "dev", "eth0"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let vm_ip = ip_of(&r);
    let mut ep = Reaped(endpoint_as_nobody(&sock, vm_ip, &group));
    assert!(answered(&pod, vm_ip), "nobody's endpoint answers");
    drop(ep);

    // The restarted switch binds the socket again, with the same access.
    w.kill_switch();
    w.start_switch();
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.uid(), NOBODY);
    assert_eq!(meta.permissions().mode() & 0o7777, 0o660);
    ep = Reaped(endpoint_as_nobody(&sock, vm_ip, &group));
    assert!(answered(&pod, vm_ip), "again after the restart");
    drop(ep);

    for (net, ns) in [
        ("own-nobody".to_string(), &vm_ns),
        (w.net("vu"), &plain_ns),
        (w.net("tap"), &pod),
    ] {
        w.ok("del", &net, ns, None);
    }
    assert_eq!(w.files("pods"), Vec::<String>::new());
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.records(), Vec::<String>::new());
    assert_eq!(w.leases(), Vec::<String>::new());
}

#[test]
fn a_wrong_owner_or_mode_is_one_line_and_leaves_nothing() {
    let Some(mut w) = World::new("ownbad", 75) else {
        return;
    };
    vu_net(&w, "bad-owner", 77, r#""socketOwner":"no-such-user-vnio","#);
    vu_net(&w, "bad-mode", 78, r#""socketMode":"0999","#);
    net_conf(&w, "bad-tap", 79, r#""kind":"tap","socketMode":"0660","#);
    let ns = w.netns(0);
    for (net, said) in [
        (
            "bad-owner",
            "socketOwner no-such-user-vnio: no such name on this machine",
        ),
        (
            "bad-mode",
            "socketMode \"0999\": not an octal permission mode",
        ),
        ("bad-tap", "are for kind vhost-user"),
    ] {
        let o = w.cnitool("add", net, &ns, None);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.status.success(), "{net}: {text}");
        let line = text.lines().find(|l| l.contains(said));
        assert!(line.is_some(), "{net}: {said:?} in {text}");
    }
    assert_eq!(w.files("pods"), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.ports().len(), 0, "and the switch still answers");
}

/// stderr of a child that ends by itself, as text.
trait StderrText {
    fn wait_with_output_stderr(self) -> String;
}

impl StderrText for Child {
    fn wait_with_output_stderr(self) -> String {
        let o = self.wait_with_output().unwrap();
        String::from_utf8_lossy(&o.stderr).into_owned()
    }
}
