//! The servers' configuration files: the broker's and the console's `Config::load` read and
//! parse their TOML through [`read_toml`], and read the secrets it names through
//! [`read_secret`] (the console token through [`console_token`]), so that a file either
//! cannot use is named the same way.

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// A configuration file, or a secret's file it names, that could not be used. Its text names
/// the file; the cause (the IO error, or where the TOML is wrong and why) is its source, which
/// a caller's `{:#}` shows. A secret's value is never in it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read config {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parse config {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("read {what} file {}", path.display())]
    ReadSecret {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} in {} is shorter than 16 characters", path.display())]
    ShortSecret { what: &'static str, path: PathBuf },
}

/// Reads the TOML file at `path` into a `T`.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}

/// Reads the secret `what` (`"console token"`, …) from the file at `path`: its text, trimmed,
/// of at least 16 characters.
pub fn read_secret(path: &Path, what: &'static str) -> Result<Zeroizing<String>, ConfigError> {
    let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
        ConfigError::ReadSecret {
            what,
            path: path.into(),
            source,
        }
    })?);
    let t = text.trim();
    if t.len() < 16 {
        return Err(ConfigError::ShortSecret {
            what,
            path: path.into(),
        });
    }
    Ok(Zeroizing::new(t.to_owned()))
}

/// The console token the broker and the console share: `COUNTERSIGN_CONSOLE_TOKEN`, else the
/// token `file` ([`read_secret`]), else none.
pub fn console_token(file: Option<&Path>) -> Result<Option<Zeroizing<String>>, ConfigError> {
    if let Ok(v) = std::env::var("COUNTERSIGN_CONSOLE_TOKEN") {
        return Ok(Some(Zeroizing::new(v)));
    }
    file.map(|p| read_secret(p, "console token")).transpose()
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Listen {
        listen: String,
    }

    #[test]
    fn reads_a_file_and_names_one_it_cannot_use() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let good = dir.path().join("good.toml");
        std::fs::write(&good, "listen = \"127.0.0.1:8080\"\n")?;
        assert_eq!(read_toml::<Listen>(&good)?.listen, "127.0.0.1:8080");

        let missing = dir.path().join("missing.toml");
        let e = read_toml::<Listen>(&missing)
            .err()
            .ok_or("read a missing file")?;
        assert_eq!(e.to_string(), format!("read config {}", missing.display()));
        assert!(e.source().is_some_and(|s| s.is::<std::io::Error>()));

        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "listen = 8080\n")?;
        let e = read_toml::<Listen>(&bad).err().ok_or("parsed a bad file")?;
        assert_eq!(e.to_string(), format!("parse config {}", bad.display()));
        assert!(e.source().is_some_and(|s| s.is::<toml::de::Error>()));
        Ok(())
    }

    #[test]
    fn reads_a_secret_trimmed_and_refuses_a_short_one() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let good = dir.path().join("token");
        std::fs::write(&good, "  0123456789abcdef\n")?;
        assert_eq!(
            read_secret(&good, "console token")?.as_str(),
            "0123456789abcdef"
        );

        let short = dir.path().join("short");
        std::fs::write(&short, "0123456789abcde\n")?;
        let e = read_secret(&short, "shared token")
            .err()
            .ok_or("read a short secret")?;
        let want = format!(
            "the shared token in {} is shorter than 16 characters",
            short.display()
        );
        assert_eq!(e.to_string(), want);

        let missing = dir.path().join("missing");
        let e = read_secret(&missing, "console token")
            .err()
            .ok_or("read a missing file")?;
        assert_eq!(
            e.to_string(),
            format!("read console token file {}", missing.display())
        );
        Ok(())
    }
}
