//! Control-socket input: bounded request lines, the JSON request parser,
//! port spec validation and socket path confinement.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vnio_switch::fuzzing::control_requests(data));
