//! vnio measure.
