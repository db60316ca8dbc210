//! One module per part: each owns its clap arguments and its rendering.

pub mod switch;
pub mod tune;
