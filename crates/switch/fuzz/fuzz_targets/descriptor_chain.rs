//! Descriptor-chain validation on arbitrary descriptor tables.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vnio_switch::fuzzing::descriptor_chain(data));
