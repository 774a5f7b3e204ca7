//! Token files (a client's `token_file`, `--admin-token-file`): the first line of a file only
//! its owner may read.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read the token file {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the token file {} can be read by other users (mode {mode:03o})", path.display())]
    ReadableByOthers { path: PathBuf, mode: u32 },
    #[error("the token file {} is empty", path.display())]
    Empty { path: PathBuf },
}

impl TokenFileError {
    /// What the operator does about it.
    pub fn fix(&self) -> String {
        match self {
            TokenFileError::Unreadable { .. } => "check the path and its permissions".into(),
            TokenFileError::ReadableByOthers { path, .. } => {
                format!(
                    "run chmod 600 {} (and change the token if others may have read it)",
                    path.display()
                )
            }
            TokenFileError::Empty { .. } => "write the token on its first line".into(),
        }
    }
}

/// The token on the first line of `path` (trimmed), refused when the file is readable or
/// writable by its group or by others: a token anyone on the machine can read is no secret.
pub fn read_token_file(path: &Path) -> Result<String, TokenFileError> {
    let unreadable = |source| TokenFileError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let mode = std::fs::metadata(path)
        .map_err(unreadable)?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::ReadableByOthers {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(TokenFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn the_first_line_of_a_private_file_is_the_token() {
        let (_dir, path) = token_file("  the-token \nsecond line\n", 0o600);
        assert_eq!(read_token_file(&path).unwrap(), "the-token");
        let (_dir, path) = token_file("the-token\n", 0o400);
        assert_eq!(read_token_file(&path).unwrap(), "the-token");
    }

    #[test]
    fn a_file_others_may_read_is_refused_naming_the_file_and_the_fix() {
        for mode in [0o644, 0o640, 0o604, 0o620] {
            let (_dir, path) = token_file("the-token\n", mode);
            let error = read_token_file(&path).unwrap_err();
            let text = format!("{error}; {}", error.fix());
            assert!(
                matches!(error, TokenFileError::ReadableByOthers { .. }),
                "{mode:o}: {text}"
            );
            assert!(
                text.contains(&format!("chmod 600 {}", path.display())),
                "{text}"
            );
            assert!(!text.contains("the-token"), "{text}");
        }
    }

    #[test]
    fn an_empty_or_missing_file_is_an_error() {
        let (_dir, path) = token_file("\n", 0o600);
        assert!(matches!(
            read_token_file(&path),
            Err(TokenFileError::Empty { .. })
        ));
        assert!(matches!(
            read_token_file(Path::new("/nonexistent/token")),
            Err(TokenFileError::Unreadable { .. })
        ));
    }
}
