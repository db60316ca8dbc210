//! The control socket costs only the offending client: who may connect,
//! where ports' sockets may go, and the bounds on requests, clients and
//! time. A real switch in-process, real sockets.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_switch::serve::ClientLimits;

fn config(dir: &Dir) -> Config {
    Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![],
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("skip: needs root");
    }
    root
}

/// One raw line from the switch (the client of the crate would parse it).
fn line_of(s: &UnixStream) -> String {
    let mut l = String::new();
    BufReader::new(s).read_line(&mut l).unwrap();
    l
}

/// True when the switch closed the connection (EOF within `within`).
fn closed(s: &mut UnixStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) => {
                println!("not closed: {e}");
                return false;
            }
        }
    }
}

#[test]
fn control_socket_is_owner_only_or_group() {
    let dir = Dir::new("ctl-mode");
    let sw = Switch::start(config(&dir)).unwrap();
    let m = std::fs::metadata(sw.control_path()).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(
        m.permissions().mode() & 0o777,
        0o600,
        "owner only by default"
    );
    drop(sw);

    // Giving the socket to a group this process is not in takes root.
    if !is_root() {
        return;
    }
    let dir = Dir::new("ctl-group");
    let mut cfg = config(&dir);
    cfg.switch.control_group = Some("65534".into());
    let sw = Switch::start(cfg).unwrap();
    let m = std::fs::metadata(sw.control_path()).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o660, "owner and group");
    assert_eq!(m.gid(), 65534);
}

/// Connects to `path` as `uid`/`gid` (supplementary groups `groups`) from a
/// forked child, sends `req` and returns what the switch answered up to its
/// close (`None`: the child could not connect).
fn as_user(path: &Path, uid: u32, gid: u32, groups: &[u32], req: &[u8]) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    // Everything the child needs is prepared before fork: it only makes
    // system calls (the parent has threads; allocating after fork could deadlock).
    let mut addr: libc::sockaddr_un = unsafe_zeroed();
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *d = *s as libc::c_char;
    }
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let groups = groups.to_vec();
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: the child makes only async-signal-safe system calls on
    // memory prepared above, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: see above; every pointer is to live, sized memory.
        unsafe {
            // The parent's other descriptors (other tests' connections)
            // must not outlive their owners' closes in this child.
            for fd in 3..4096 {
                if fd != fds[1] {
                    libc::close(fd);
                }
            }
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                libc::_exit(2);
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let tv = libc::timeval {
                tv_sec: 5,
                tv_usec: 0,
            };
            libc::setsockopt(
                s,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            if libc::connect(
                s,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as u32,
            ) != 0
            {
                libc::_exit(3);
            }
            libc::write(s, req.as_ptr() as *const libc::c_void, req.len());
            loop {
                let n = libc::read(s, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
                if n <= 0 {
                    break;
                }
                libc::write(fds[1], buf.as_ptr() as *const libc::c_void, n as usize);
            }
            libc::_exit(0);
        }
    }
    assert!(pid > 0);
    // SAFETY: our copy of the write end; the child holds its own.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is ours, handed to the File that closes it.
    let mut out = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    let mut got = Vec::new();
    out.read_to_end(&mut got).unwrap();
    let mut status = 0;
    // SAFETY: pid is our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status));
    match libc::WEXITSTATUS(status) {
        0 => Some(got),
        3 => None,
        c => panic!("child failed to become {uid}:{gid} (exit {c})"),
    }
}

fn unsafe_zeroed<T>() -> T {
    // SAFETY: only used for plain C structures, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

#[test]
fn peers_are_checked_by_credentials() {
    if !is_root() {
        return;
    }
    let dir = Dir::new("ctl-peer");
    // The group that may connect: one no test user has as its own.
    let group = 4242;
    let mut cfg = config(&dir);
    cfg.switch.control_group = Some(group.to_string());
    let sw = Switch::start(cfg).unwrap();
    // Open the socket and its directory to everyone, as a careless
    // directory or a later chmod would: the credential check must hold alone.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(sw.control_path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let req = b"{\"op\":\"port_list\"}\n";

    let stranger = as_user(sw.control_path(), 65534, 65534, &[], req).expect("connects");
    let text = String::from_utf8_lossy(&stranger);
    assert_eq!(text.lines().count(), 1, "one line, then closed: {text}");
    assert!(
        text.contains("\"ok\":false") && text.contains("not allowed") && text.contains("65534"),
        "{text}"
    );

    let member = as_user(sw.control_path(), 65534, 65534, &[group], req).expect("connects");
    let text = String::from_utf8_lossy(&member);
    assert!(
        text.starts_with("{\"ok\":true"),
        "a group member may: {text}"
    );
    let primary = as_user(sw.control_path(), 65534, group, &[], req).expect("connects");
    assert!(String::from_utf8_lossy(&primary).starts_with("{\"ok\":true"));

    // Root may, whatever the socket's owner.
    let root = as_user(sw.control_path(), 0, 0, &[], req).expect("connects");
    assert!(String::from_utf8_lossy(&root).starts_with("{\"ok\":true"));
}

#[test]
fn port_sockets_stay_in_the_socket_dir() {
    let dir = Dir::new("ctl-dir");
    let outside = Dir::new("ctl-outside");
    let sw = Switch::start(config(&dir)).unwrap();
    let mut ctl = Client::connect(sw.control_path()).unwrap();
    let add = |ctl: &mut Client, name: &str, sock: &Path| {
        ctl.request(&Request::PortAdd {
            port: PortSpec::vhost_user(name, sock, SocketMode::Server),
        })
    };
    // Out, by a plain path, by `..`, and through a symlinked parent.
    std::os::unix::fs::symlink(&outside.0, dir.0.join("link")).unwrap();
    for (name, sock) in [
        ("a", outside.sock("a")),
        ("b", dir.0.join("..").join("b.sock")),
        ("c", dir.0.join("link").join("c.sock")),
        ("d", "relative.sock".into()),
    ] {
        let err = add(&mut ctl, name, &sock).unwrap_err().to_string();
        assert!(
            err.contains("outside") || err.contains("not absolute"),
            "{}: {err}",
            sock.display()
        );
        assert!(!sock.exists() && !outside.sock(name).exists());
    }
    // In, also through `.` and a subdirectory.
    std::fs::create_dir(dir.0.join("sub")).unwrap();
    add(&mut ctl, "e", &dir.0.join("sub").join(".").join("e.sock")).unwrap();
    assert!(dir.0.join("sub/e.sock").exists());
    add(&mut ctl, "f", &dir.sock("f")).unwrap();

    // A configured socket_dir; the operator's own ports go anywhere.
    drop(ctl);
    drop(sw);
    let dir = Dir::new("ctl-dir2");
    let mut cfg = config(&dir);
    cfg.switch.socket_dir = Some(outside.0.clone());
    cfg.ports = vec![PortSpec::vhost_user(
        "cfg",
        dir.sock("cfg"),
        SocketMode::Server,
    )];
    let sw = Switch::start(cfg).unwrap();
    let mut ctl = Client::connect(sw.control_path()).unwrap();
    add(&mut ctl, "g", &outside.sock("g")).unwrap();
    let err = add(&mut ctl, "h", &dir.sock("h")).unwrap_err().to_string();
    assert!(err.contains("outside"), "{err}");
}

#[test]
fn only_sockets_are_replaced_at_a_port_path() {
    let dir = Dir::new("ctl-nonsock");
    let sw = Switch::start(config(&dir)).unwrap();
    let mut ctl = Client::connect(sw.control_path()).unwrap();
    let victim = dir.sock("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let err = ctl
        .request(&Request::PortAdd {
            port: PortSpec::vhost_user("v", &victim, SocketMode::Server),
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // A stale socket is replaced.
    let stale = dir.sock("stale");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    ctl.request(&Request::PortAdd {
        port: PortSpec::vhost_user("s", &stale, SocketMode::Server),
    })
    .unwrap();
    drop(ctl);
    drop(sw);

    // The same for the operator's ports and for the control socket itself.
    let dir = Dir::new("ctl-nonsock2");
    let mut cfg = config(&dir);
    cfg.ports = vec![PortSpec::vhost_user("v", dir.sock("v"), SocketMode::Server)];
    std::fs::write(dir.sock("v"), b"precious").unwrap();
    let err = vnio_switch::error_chain(&Switch::start(cfg.clone()).err().unwrap());
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(dir.sock("v")).unwrap(), b"precious");
    cfg.ports.clear();
    std::fs::write(dir.sock("control"), b"precious").unwrap();
    let err = vnio_switch::error_chain(&Switch::start(cfg).err().unwrap());
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(dir.sock("control")).unwrap(), b"precious");
}

#[test]
fn an_overlong_request_is_refused_unbuffered() {
    let dir = Dir::new("ctl-long");
    let sw = Switch::start(config(&dir)).unwrap();
    let mut s = UnixStream::connect(sw.control_path()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    // Far more than the bound, no newline; the switch answers and closes
    // before it has taken it all (the writer sees the close).
    let w = {
        let mut s = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b' '; 64 << 10];
            let mut sent = 0usize;
            while sent < (64 << 20) {
                match s.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            sent
        })
    };
    let l = line_of(&s);
    assert!(
        l.contains("\"ok\":false") && l.contains("longer than"),
        "{l}"
    );
    assert!(closed(&mut s, T));
    assert!(
        w.join().unwrap() < (64 << 20),
        "the switch did not read it all"
    );
    // Others are served.
    Client::connect(sw.control_path())
        .unwrap()
        .request(&Request::PortList)
        .unwrap();
}

#[test]
fn control_clients_are_bounded_and_reaped() {
    let dir = Dir::new("ctl-many");
    let limits = ClientLimits {
        max_clients: 4,
        ..ClientLimits::default()
    };
    let sw = Switch::start_with_limits(config(&dir), limits).unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| {
            let mut c = Client::connect(sw.control_path()).unwrap();
            c.request(&Request::PortList).unwrap();
            c
        })
        .collect();
    let mut extra = UnixStream::connect(sw.control_path()).unwrap();
    extra.set_read_timeout(Some(T)).unwrap();
    let l = line_of(&extra);
    assert!(l.contains("too many control clients"), "{l}");
    assert!(closed(&mut extra, T));
    drop(held);
    // Finished clients free their places: many more, one after the other.
    let deadline = Instant::now() + T;
    let mut done = 0;
    while done < 20 {
        match Client::connect(sw.control_path())
            .unwrap()
            .request(&Request::PortList)
        {
            Ok(_) => done += 1,
            Err(e) => {
                assert!(Instant::now() < deadline, "places never freed: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn idle_and_slow_control_clients_time_out() {
    let dir = Dir::new("ctl-idle");
    let limits = ClientLimits {
        idle: Duration::from_millis(500),
        ..ClientLimits::default()
    };
    let sw = Switch::start_with_limits(config(&dir), limits).unwrap();
    // Idle: says nothing.
    let mut idle = UnixStream::connect(sw.control_path()).unwrap();
    let t = Instant::now();
    assert!(closed(&mut idle, T), "an idle client is closed");
    assert!(t.elapsed() < Duration::from_secs(3));
    // Slow: a byte every 100 ms never makes a whole request in time.
    let mut slow = UnixStream::connect(sw.control_path()).unwrap();
    let t = Instant::now();
    let trickle = {
        let mut s = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..100 {
                if s.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    assert!(closed(&mut slow, T), "a trickling client is closed");
    assert!(t.elapsed() < Duration::from_secs(3));
    trickle.join().unwrap();
    // A client that asks in time is served, again and again.
    let mut c = Client::connect(sw.control_path()).unwrap();
    for _ in 0..4 {
        c.request(&Request::PortList).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_client_that_never_reads_blocks_nothing() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("ctl-noread");
        let limits = ClientLimits {
            write: Duration::from_millis(500),
            ..ClientLimits::default()
        };
        let sw = Switch::start_with_limits(config(&dir), limits).unwrap();
        // Asks for far more than the socket buffers hold, reads none of it.
        let mut s = UnixStream::connect(sw.control_path()).unwrap();
        let asks = b"{\"op\":\"metrics\"}\n".repeat(2000);
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.write_all(&asks);
        // The switch has filled the socket and waits on it by now.
        std::thread::sleep(Duration::from_secs(1));
        Client::connect(sw.control_path())
            .unwrap()
            .request(&Request::PortList)
            .unwrap();
        let t = Instant::now();
        drop(sw);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        drop(s);
    });
}

#[test]
fn random_requests_leave_the_switch_answering() {
    bounded(Duration::from_secs(120), || {
        let dir = Dir::new("ctl-fuzz");
        let mut cfg = config(&dir);
        cfg.ports = vec![PortSpec::vhost_user(
            "p1",
            dir.sock("p1"),
            SocketMode::Server,
        )];
        let sw = Switch::start(cfg).unwrap();
        let p1 = dir.sock("p1");
        // Well-formed requests that change nothing lasting, mutated.
        let seeds: &[&[u8]] = &[
            br#"{"op":"port_list"}"#,
            br#"{"op":"stats","name":"p1"}"#,
            br#"{"op":"fdb"}"#,
            br#"{"op":"port_set","name":"p1","coalesce":"static:8:20","lro":false}"#,
            br#"{"op":"port_add","port":{"name":"x","kind":"vhost-user","socket":"/nonexistent/x.sock","mode":"server"}}"#,
            br#"{"op":"port_del","name":"nope"}"#,
        ];
        let mut seed = 0x005e_ed0f_c047_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..300 {
            let mut s = UnixStream::connect(sw.control_path()).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut input = Vec::new();
            for _ in 0..(next() % 4 + 1) {
                let mut line = seeds[(next() % seeds.len() as u64) as usize].to_vec();
                match next() % 4 {
                    // Random bytes.
                    0 => {
                        line = (0..next() % 300).map(|_| next() as u8).collect();
                    }
                    // Flipped, inserted and dropped bytes.
                    _ => {
                        for _ in 0..(next() % 6 + 1) {
                            let at = (next() % (line.len() as u64 + 1)) as usize;
                            match next() % 3 {
                                0 if at < line.len() => line[at] ^= 1 << (next() % 8),
                                1 => line.insert(at, next() as u8),
                                _ if at < line.len() => {
                                    line.remove(at);
                                }
                                _ => {}
                            }
                        }
                    }
                }
                line.retain(|b| *b != b'\n');
                line.push(b'\n');
                input.extend_from_slice(&line);
            }
            // A truncated last line now and then.
            if next() % 8 == 0 {
                input.truncate((next() % (input.len() as u64)) as usize);
            }
            s.write_all(&input).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut answers = String::new();
            let _ = s.read_to_string(&mut answers);
            for a in answers.lines() {
                assert!(
                    serde_json::from_str::<serde_json::Value>(a).is_ok(),
                    "round {round}: not JSON: {a}"
                );
            }
        }
        // Still up, still answering, p1 still there.
        let l = Client::connect(sw.control_path())
            .unwrap()
            .request(&Request::PortList)
            .unwrap();
        assert!(l.to_string().contains("\"p1\""), "{l}");
        assert!(p1.exists());
    });
}

/// Refusals over the socket carry the code of their kind: the port
/// commands' typed errors reach the reply's `code` (not all `invalid`).
#[test]
fn refusals_over_the_socket_carry_their_code() {
    let dir = Dir::new("ctl-codes");
    let sw = Switch::start(config(&dir)).unwrap();
    let mut s = UnixStream::connect(sw.control_path()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut ask = |req: serde_json::Value| {
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        let reply: serde_json::Value = serde_json::from_str(&line_of(&s)).unwrap();
        (reply["code"].as_str().map(String::from), reply)
    };
    let sock = dir.sock("a").display().to_string();
    let add = |name: &str, extra: serde_json::Value| {
        let mut port = serde_json::json!({"name": name, "kind": "vhost-user", "socket": sock});
        for (k, v) in extra.as_object().unwrap() {
            port[k] = v.clone();
        }
        serde_json::json!({"op": "port_add", "port": port})
    };
    let (code, reply) = ask(add("a", serde_json::json!({})));
    assert_eq!(
        (code, &reply["ok"]),
        (None, &serde_json::json!(true)),
        "{reply}"
    );
    for (req, want, says) in [
        (add("a", serde_json::json!({})), "exists", "port a exists"),
        (
            serde_json::json!({"op": "port_del", "name": "nope"}),
            "not_found",
            "no port nope",
        ),
        (
            serde_json::json!({"op": "port_set", "name": "nope", "lro": false}),
            "not_found",
            "no port nope",
        ),
        (
            serde_json::json!({"op": "port_set", "name": "a", "core": 0}),
            "invalid",
            "a core is for latency high",
        ),
        (
            add("b", serde_json::json!({"cross_connect": "nope"})),
            "invalid",
            "no port named nope",
        ),
    ] {
        let (code, reply) = ask(req.clone());
        assert_eq!(code.as_deref(), Some(want), "{req} -> {reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(says) && !error.contains('\n'), "{error}");
    }
    // The switch still answers.
    let (code, reply) = ask(serde_json::json!({"op": "port_list"}));
    assert_eq!(code, None, "{reply}");
    assert_eq!(reply["result"].as_array().map(Vec::len), Some(1), "{reply}");
}
