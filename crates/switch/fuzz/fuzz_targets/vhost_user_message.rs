//! vhost-user message parsing and the device state machine on arbitrary bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vnio_switch::fuzzing::vhost_user_messages(data));
