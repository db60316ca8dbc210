//! Why a worker, or the pool of workers, refused or failed a port command:
//! the error that crosses a worker's command channel. Its conversion into
//! a [`ControlError`] below is the one place the control socket's reply
//! codes are chosen for port commands.

use crate::control::ControlError;

/// A port command's failure, by kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// No port of that name.
    #[error("no port {0}")]
    NoPort(String),
    /// A port of that name is there already.
    #[error("port {0} exists")]
    Exists(String),
    /// The port, or the change, is refused as it is: a bad key or value, a
    /// combination that does not hold, a queue or core not there to give,
    /// a port whose device or socket cannot be opened as described.
    #[error("{0}")]
    Refused(String),
    /// The system failed the switch: a thread, an eventfd, an epoll.
    #[error("{0}")]
    System(String),
    /// The worker did not take the command or did not answer it.
    #[error("worker {0}")]
    Unreachable(String),
}

/// A refusal known only by its message (the data path's checks).
impl From<String> for WorkerError {
    fn from(m: String) -> Self {
        WorkerError::Refused(m)
    }
}

/// A refusal known only by its message.
impl From<&str> for WorkerError {
    fn from(m: &str) -> Self {
        WorkerError::Refused(m.to_string())
    }
}

impl From<WorkerError> for ControlError {
    fn from(e: WorkerError) -> Self {
        let m = e.to_string();
        match e {
            WorkerError::NoPort(_) => ControlError::NotFound(m),
            WorkerError::Exists(_) => ControlError::Exists(m),
            WorkerError::Refused(_) => ControlError::Invalid(m),
            WorkerError::System(_) | WorkerError::Unreachable(_) => ControlError::Io(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_code_and_message() {
        let cases = [
            (
                WorkerError::NoPort("vm1".into()),
                "not_found",
                "no port vm1",
            ),
            (
                WorkerError::Exists("vm1".into()),
                "exists",
                "port vm1 exists",
            ),
            (WorkerError::from("bad mtu"), "invalid", "bad mtu"),
            (WorkerError::System("no eventfd".into()), "io", "no eventfd"),
            (
                WorkerError::Unreachable("stopped".into()),
                "io",
                "worker stopped",
            ),
        ];
        for (e, code, message) in cases {
            let c = ControlError::from(e);
            assert_eq!((c.code(), c.message()), (code, message));
        }
    }
}
