//! `AppError`: why the application could not start or serve, as one sentence that names the
//! thing and the fix, with its cause after a colon.

use std::fmt;

/// Why the gateway could not start or serve.
#[derive(Debug)]
pub struct AppError(String);

impl AppError {
    pub fn new(message: impl Into<String>) -> AppError {
        AppError(message.into())
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AppError {}

impl From<std::io::Error> for AppError {
    fn from(error: std::io::Error) -> AppError {
        AppError(error.to_string())
    }
}

/// What happened, in front of why: `what: cause`.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T, AppError>;
    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T, AppError>;
}

impl<T, E: fmt::Display> Context<T> for Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T, AppError> {
        self.map_err(|error| AppError(format!("{what}: {error}")))
    }

    fn with_context<D: fmt::Display>(self, what: impl FnOnce() -> D) -> Result<T, AppError> {
        self.map_err(|error| AppError(format!("{}: {error}", what())))
    }
}
