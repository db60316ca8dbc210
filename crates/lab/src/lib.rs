//! vnio lab.
