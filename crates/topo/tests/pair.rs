//! The two-host pair carries real traffic and leaves nothing behind.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use vnio_topo::Pair;

#[test]
fn pair_carries_udp_and_tcp_and_leaves_nothing() {
    if common::skip_unless_root("pair_carries_udp_and_tcp_and_leaves_nothing") {
        return;
    }
    let journal = common::journal("pair");
    let pair = Pair::with_journal(&journal).expect("creating pair");
    let (a, b) = (pair.a(), pair.b());
    let names = [a.netns().name().to_owned(), b.netns().name().to_owned()];
    let ifnames = [a.ifname().to_owned(), b.ifname().to_owned()];
    assert!(ifnames
        .iter()
        .all(|n| n.len() <= 15 && n.starts_with("vnio")));
    assert_eq!(journal.entries().expect("journal").len(), 2);
    for name in &names {
        assert!(
            common::netns_files().contains(name),
            "{name} not in /run/netns"
        );
    }

    // UDP: a -> b, b echoes back.
    let server_addr = SocketAddr::from((b.addr(), 7001));
    let server = b
        .run(move || UdpSocket::bind(server_addr))
        .expect("enter b")
        .expect("bind b");
    let client = a
        .run(|| UdpSocket::bind("0.0.0.0:0"))
        .expect("enter a")
        .expect("bind a");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    client.send_to(b"hello", server_addr).expect("send");
    let mut buf = [0u8; 64];
    let (n, from) = server.recv_from(&mut buf).expect("server recv");
    assert_eq!(&buf[..n], b"hello");
    assert_eq!(from.ip(), a.addr());
    server.send_to(b"olleh", from).expect("echo");
    let (n, from) = client.recv_from(&mut buf).expect("client recv");
    assert_eq!(&buf[..n], b"olleh");
    assert_eq!(from, server_addr);

    // TCP: a server thread living in b, a client connecting from a.
    let listen_addr = SocketAddr::from((b.addr(), 7002));
    let listener = b
        .run(move || TcpListener::bind(listen_addr))
        .expect("enter b")
        .expect("listen");
    let echo = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("accept");
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).expect("read");
        stream.write_all(&buf).expect("write");
        peer
    });
    let mut stream = a
        .run(move || TcpStream::connect_timeout(&listen_addr, Duration::from_secs(5)))
        .expect("enter a")
        .expect("connect");
    stream.write_all(b"ping").expect("write");
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).expect("read");
    assert_eq!(&reply, b"ping");
    assert_eq!(echo.join().expect("echo thread").ip(), a.addr());

    // The namespace really is a different one: b's address is not local to
    // the root namespace, and a's interface is invisible there.
    assert!(UdpSocket::bind(server_addr).is_err());
    assert!(!common::root_links().iter().any(|l| ifnames.contains(l)));

    drop((client, server, stream));
    pair.delete().expect("deleting pair");
    for name in &names {
        assert!(
            !common::netns_files().contains(name),
            "{name} left in /run/netns"
        );
    }
    assert!(common::eventually(|| !common::root_links()
        .iter()
        .any(|l| ifnames.contains(l))));
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

#[test]
fn pair_runs_commands_and_sees_its_links() {
    if common::skip_unless_root("pair_runs_commands_and_sees_its_links") {
        return;
    }
    let journal = common::journal("pair-cmd");
    let pair = Pair::with_journal(&journal).expect("creating pair");
    let a = pair.a();

    // /proc/net is per network namespace: the child sees a's interfaces.
    let out = a
        .command("cat")
        .arg("/proc/net/dev")
        .output()
        .expect("spawn cat");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(a.ifname()), "{text}");
    assert!(!text.contains(pair.b().ifname()), "{text}");

    // Humans' tools see the same namespace (iproute2 convention), if present.
    match std::process::Command::new("ip")
        .args(["netns", "exec", a.netns().name(), "cat", "/proc/net/dev"])
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains(a.ifname()));
        }
        Err(e) => println!("iproute2 not installed, interop not checked: {e}"),
    }

    let mut handle = a.handle().expect("handle in a");
    let links = handle.links().expect("links in a");
    let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let lo = links.iter().find(|l| l.name == "lo").expect("lo");
    assert!(lo.up);
    let veth = links.iter().find(|l| l.name == a.ifname()).expect("veth");
    assert!(veth.up && veth.lower_up);
    assert_eq!(veth.kind.as_deref(), Some("veth"));
    let mut addrs = handle.addresses(a.ifname()).expect("addresses");
    // Besides ours, the kernel may have added an IPv6 link-local address.
    addrs.retain(|c| c.addr.is_ipv4());
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    assert_eq!(addrs[0].addr, std::net::IpAddr::V4(a.addr()));
    assert_eq!(addrs[0].prefix, vnio_topo::PAIR_PREFIX);

    handle.set_mtu(a.ifname(), 9000).expect("mtu");
    assert_eq!(
        handle.link(a.ifname()).expect("link").expect("exists").mtu,
        9000
    );
    handle.set_down(a.ifname()).expect("down");
    assert!(!handle.link(a.ifname()).expect("link").expect("exists").up);

    // Threads spawned in the namespace see the same interfaces.
    let ifname = a.ifname().to_owned();
    let seen = a
        .spawn(move || {
            std::fs::read_to_string("/proc/thread-self/net/dev").map(|t| t.contains(&ifname))
        })
        .expect("spawn")
        .join()
        .expect("join")
        .expect("read");
    assert!(seen);
    drop(handle);
    drop(pair);
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
