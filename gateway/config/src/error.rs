//! `ConfigError`: what is wrong with a config file, where, and how to fix it.

use std::fmt;
use std::path::{Path, PathBuf};

/// A config file that cannot be used. Displays as
/// `{file}:{line}: {key}: {message}\n  fix: {fix}`, leaving out the parts that are absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted path to the offending key, such as `servers.github.url` or `mcpServers.x.args[1]`;
    /// empty when the fault is not at one key (a syntax error, an unreadable file).
    pub key: String,
    /// 1-based line in `file`, when the fault has one.
    pub line: Option<usize>,
    pub message: String,
    pub fix: String,
    /// Further errors found in the same file, so one run of `wardgate check` reports them
    /// all (boxed, so the error stays small enough to return by value; see `all`).
    also: Option<Box<More>>,
}

impl ConfigError {
    /// An error not yet tied to a file; `Config::parse` adds the file on the way out, so the
    /// layers below need not carry the path around.
    pub(crate) fn at(
        key: impl Into<String>,
        line: Option<usize>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: PathBuf::new(),
            key: key.into(),
            line,
            message: message.into(),
            fix: fix.into(),
            also: None,
        }
    }

    pub(crate) fn in_file(mut self, file: &Path) -> ConfigError {
        self.file = file.to_owned();
        if let Some(more) = &mut self.also {
            for error in &mut more.0 {
                error.file = file.to_owned();
            }
        }
        self
    }

    /// Every error, this one included, in the order found.
    pub fn all(&self) -> Vec<&ConfigError> {
        let more = self.also.iter().flat_map(|more| more.0.iter());
        std::iter::once(self).chain(more).collect()
    }
}

/// The rest of a file's errors, behind [`ConfigError`]'s first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct More(Vec<ConfigError>);

/// Errors gathered while reading on past the first, so a file with several mistakes is
/// fixed in one round.
#[derive(Default)]
pub(crate) struct Errors(Vec<ConfigError>);

impl Errors {
    /// The value, or `None` with its error kept.
    pub(crate) fn take<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(mut error) => {
                // An error that gathered others brings them along, flat.
                let more = error.also.take();
                self.0.push(error);
                self.0.extend(more.into_iter().flat_map(|more| more.0));
                None
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first error with the rest in its `also`, if there was any.
    pub(crate) fn finish(self) -> Result<(), ConfigError> {
        let mut errors = self.0.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                let more: Vec<ConfigError> = errors.collect();
                first.also = (!more.is_empty()).then(|| Box::new(More(more)));
                Err(first)
            }
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)?;
        if !self.fix.is_empty() {
            write!(f, "\n  fix: {}", self.fix)?;
        }
        for other in self.also.iter().flat_map(|more| more.0.iter()) {
            write!(f, "\n{other}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// `parent.key`, quoting keys that are not bare words so the path stays unambiguous
/// (`servers."my.server".url`).
pub(crate) fn child_key(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// Maps byte offsets to 1-based line numbers.
pub(crate) struct LineIndex {
    newlines: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> LineIndex {
        let newlines = text
            .bytes()
            .enumerate()
            .filter(|&(_, byte)| byte == b'\n')
            .map(|(offset, _)| offset)
            .collect();
        LineIndex { newlines }
    }

    pub(crate) fn line(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&newline| newline < offset) + 1
    }
}
