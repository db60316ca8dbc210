//! Frame parsing on arbitrary bytes: virtio-net header, L2 header, checksum
//! completion, and the endpoint host's ARP/IPv4/ICMP/UDP receive path.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vnio_switch::fuzzing::wire_frame(data));
