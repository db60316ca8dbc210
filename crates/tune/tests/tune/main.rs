//! Integration tests of `vnio-tune`: fake `/proc` and `/sys` trees for the
//! audit, garbage readings, apply and revert; the JSON schema; and, only
//! when run as root, the live machine (as root and as a plain user, and an
//! apply + revert of the runtime knobs that must leave the audit identical).

mod apply_fake;
mod audit_fake;
mod fake;
mod garbage;
mod live;
mod schema;
