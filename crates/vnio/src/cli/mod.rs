//! One module per part: each owns its clap arguments and its rendering.

pub mod cni;
pub mod endpoint;
pub mod lab;
pub mod measure;
pub mod switch;
pub mod tune;
pub mod vm;
pub mod vm_migrate;
pub mod vm_passthrough;
pub mod vm_run;
