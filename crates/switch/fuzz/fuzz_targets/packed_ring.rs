//! A packed ring written from arbitrary bytes and driven as the data path
//! drives it: pops, returns, give-backs, flushes and notifications, with
//! the driver rewriting descriptors and its event area in between.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vnio_switch::fuzzing::packed_ring(data));
