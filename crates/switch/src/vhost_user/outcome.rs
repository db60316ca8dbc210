//! What a request to the device yields: a reply, or why the port is reset.

use super::log::LogError;
use super::memory::MemoryError;
use super::queue::QueueError;

/// Why a request failed (the connection is reset).
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A vring index beyond the device's queues.
    #[error("queue index {0} out of range")]
    QueueIndex(u32),
    /// The driver acked features the device did not offer.
    #[error("features {0:#x} were not offered")]
    Features(u64),
    /// A queue size that is zero, not a power of two, or too large.
    #[error("queue size {0} invalid")]
    QueueSize(u32),
    /// The memory table could not be mapped.
    #[error("memory table rejected")]
    Memory(#[from] MemoryError),
    /// A ring address is not inside the front-end's memory.
    #[error("queue {0}: ring address not in the memory table")]
    RingAddress(usize),
    /// A kick or call descriptor that is not an eventfd (a pipe or a
    /// socket could block the worker in ways an eventfd cannot).
    #[error("queue {index}: the {what} descriptor is not an eventfd")]
    NotEventfd {
        /// Queue index.
        index: usize,
        /// "kick" or "call".
        what: &'static str,
    },
    /// A request whose protocol feature the front-end did not negotiate.
    #[error("{request} without {feature} negotiated")]
    NotNegotiated {
        /// The request.
        request: &'static str,
        /// The protocol feature it needs.
        feature: &'static str,
    },
    /// The dirty log (SET_LOG_BASE) is unusable.
    #[error("dirty log rejected")]
    Log(#[from] LogError),
    /// A queue could not start.
    #[error("queue {index} cannot start")]
    Queue {
        /// Queue index.
        index: usize,
        /// Why.
        #[source]
        source: QueueError,
    },
}

/// What to answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing (or a REPLY_ACK when asked).
    Ack,
    /// A u64 payload.
    U64(u64),
    /// A vring state payload.
    VringState(u32, u32),
    /// The request is not implemented: a failure REPLY_ACK when asked.
    Nack,
}
