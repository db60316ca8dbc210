//! vnio switch.
