//! vnio tune.
