//! What can go wrong with the fleet, as a type: the database away, a statement that failed,
//! a local file, or a request that cannot be carried out as asked. Every message names the
//! thing and the fix; [`FleetError::is_unreachable`] tells "retry later" from "change
//! something".

/// A failure of the fleet crate.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No connection to the database could be had, or it closed (refused, timed out, pool
    /// exhausted, notification connection lost): retry later.
    #[error("{0}")]
    Unreachable(String),
    /// A statement failed, while doing what `doing` says.
    #[error("{doing}: {source}")]
    Statement {
        doing: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A local file could not be read or written.
    #[error("{doing}: {source}")]
    File {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// What was asked cannot be carried out as asked: a bad server spec or module, an
    /// unknown version, a database newer than this gateway, a member name taken.
    #[error("{0}")]
    Invalid(String),
    /// A value could not be written as JSON or TOML for the database (a bug: the values
    /// are the gateway's own).
    #[error("could not encode a value for the fleet database: {0}")]
    Encoding(String),
}

impl FleetError {
    /// Whether this is the database being away (retry later) rather than a bad request.
    pub fn is_unreachable(&self) -> bool {
        match self {
            FleetError::Unreachable(_) => true,
            FleetError::Statement { source, .. } => source.is_closed() || source.code().is_none(),
            FleetError::File { .. } | FleetError::Invalid(_) | FleetError::Encoding(_) => false,
        }
    }
}

impl From<tokio_postgres::Error> for FleetError {
    fn from(source: tokio_postgres::Error) -> FleetError {
        FleetError::Statement {
            doing: "a fleet database statement failed".to_owned(),
            source,
        }
    }
}

impl From<serde_json::Error> for FleetError {
    fn from(error: serde_json::Error) -> FleetError {
        FleetError::Encoding(error.to_string())
    }
}

impl From<toml::ser::Error> for FleetError {
    fn from(error: toml::ser::Error) -> FleetError {
        FleetError::Encoding(error.to_string())
    }
}

/// The fleet crate's results.
pub type Result<T, E = FleetError> = std::result::Result<T, E>;

/// What was being done when an error happened, added to it.
pub(crate) trait Doing<T> {
    fn doing(self, what: impl Into<String>) -> Result<T>;
    fn doing_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

/// How an error of a kind becomes a [`FleetError`] with what was being done.
pub(crate) trait WhileDoing {
    fn while_doing(self, what: String) -> FleetError;
}

impl WhileDoing for tokio_postgres::Error {
    fn while_doing(self, doing: String) -> FleetError {
        FleetError::Statement {
            doing,
            source: self,
        }
    }
}

impl WhileDoing for std::io::Error {
    fn while_doing(self, doing: String) -> FleetError {
        FleetError::File {
            doing,
            source: self,
        }
    }
}

impl WhileDoing for toml::de::Error {
    fn while_doing(self, doing: String) -> FleetError {
        FleetError::Invalid(format!("{doing}: {}", self.message()))
    }
}

impl WhileDoing for deadpool_postgres::BuildError {
    fn while_doing(self, doing: String) -> FleetError {
        FleetError::Invalid(format!("{doing}: {self}"))
    }
}

impl<T, E: WhileDoing> Doing<T> for std::result::Result<T, E> {
    fn doing(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|error| error.while_doing(what.into()))
    }
    fn doing_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|error| error.while_doing(what()))
    }
}

impl<T> Doing<T> for Option<T> {
    fn doing(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| FleetError::Invalid(what.into()))
    }
    fn doing_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| FleetError::Invalid(what()))
    }
}

/// Return `FleetError::Invalid` with this message.
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err($crate::error::FleetError::Invalid(format!($($arg)*)))
    };
}

/// Unless the condition holds, return `FleetError::Invalid` with this message.
macro_rules! ensure {
    ($condition:expr, $($arg:tt)*) => {
        if !$condition {
            $crate::error::invalid!($($arg)*);
        }
    };
}

pub(crate) use {ensure, invalid};
