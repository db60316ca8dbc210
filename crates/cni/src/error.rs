//! The CNI spec's error result: `{"cniVersion","code","msg","details"}`
//! printed on stdout with a non-zero exit. Codes 1-99 are the spec's;
//! 100 and up are this plugin's.

use serde::Serialize;

/// Incompatible CNI version.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Unsupported field in the network configuration.
pub const UNSUPPORTED_FIELD: u32 = 2;
/// Invalid or missing CNI_* environment variables.
pub const INVALID_ENV: u32 = 4;
/// I/O failure.
pub const IO_FAILURE: u32 = 5;
/// The network configuration (or a result) does not decode.
pub const DECODE: u32 = 6;
/// Invalid network configuration.
pub const INVALID_CONFIG: u32 = 7;
/// Try again later (the switch is busy or not answering).
pub const TRY_AGAIN: u32 = 11;
/// STATUS: the plugin cannot serve ADDs now.
pub const NOT_AVAILABLE: u32 = 50;
/// The switch refused a request.
pub const SWITCH_REFUSED: u32 = 100;
/// CHECK: the attachment is not what its ADD made.
pub const CHECK_FAILED: u32 = 101;
/// The delegated IPAM plugin failed (its own error is passed through when it has one).
pub const IPAM_FAILED: u32 = 102;

/// An error result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, thiserror::Error)]
#[error("{msg}{}", if details.is_empty() { String::new() } else { format!(": {details}") })]
pub struct CniError {
    /// The spec's code.
    pub code: u32,
    /// What failed, in one line.
    pub msg: String,
    /// Why, when there is more to say.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    /// An error with `code`.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// With details.
    pub fn details(mut self, d: impl Into<String>) -> Self {
        self.details = d.into();
        self
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: impl Into<String>, e: &dyn std::error::Error) -> Self {
        Self::new(IO_FAILURE, what).details(vnio_switch::error_chain(e))
    }
}
