//! The local migration's pure parts: port names and the destination's
//! command line.

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn port_names_count_up_from_the_base() {
    assert_eq!(next_port_name("vm1", &[]), "vm1-m1");
    assert_eq!(next_port_name("vm1", &s(&["vm1", "vm1-m1"])), "vm1-m2");
    assert_eq!(next_port_name("vm1-m2", &s(&["vm1-m2"])), "vm1-m1");
    assert_eq!(next_port_name("a-mx", &[]), "a-mx-m1");
}

#[test]
fn the_destination_is_the_source_moved_into_incoming() {
    let src = s(&[
        "qemu-system-x86_64",
        "-chardev",
        "socket,id=console,path=/r/vm/b/console.sock,server=on,wait=off,logfile=/r/vm/b/serial.log",
        "-chardev",
        "socket,id=nic0c,path=/sw/p2.sock",
        "-netdev",
        "vhost-user,id=nic0,chardev=nic0c",
        "-qmp",
        "unix:/r/vm/b/qmp.sock,server=on,wait=off",
        "-pidfile",
        "/r/vm/b/qemu.pid",
        "-S",
    ]);
    let d = destination_argv(
        &src,
        Path::new("/r/vm/b"),
        Path::new("/r/vm/b/incoming"),
        &[(
            PathBuf::from("/sw/p2.sock"),
            PathBuf::from("/sw/p2-m1.sock"),
        )],
    );
    assert_eq!(
        d[2],
        "socket,id=console,path=/r/vm/b/incoming/console.sock,server=on,wait=off,logfile=/r/vm/b/incoming/serial.log"
    );
    assert_eq!(d[4], "socket,id=nic0c,path=/sw/p2-m1.sock");
    assert_eq!(d[8], "unix:/r/vm/b/incoming/qmp.sock,server=on,wait=off");
    assert_eq!(d[10], "/r/vm/b/incoming/qemu.pid");
    assert!(!d.contains(&"-S".to_string()));
    assert_eq!(&d[d.len() - 2..], &s(&["-incoming", "defer"])[..]);
}
