//! Where the helper's socket and state live by default.
//!
//! - Socket: `$XDG_RUNTIME_DIR/countersign/launcher.sock` (the per-user runtime directory,
//!   mode 0700, removed at logout). Without `XDG_RUNTIME_DIR` there is no default: name one
//!   with `--socket` or `COUNTERSIGN_HELPER_SOCKET`.
//! - State (the launcher credential): `$XDG_STATE_HOME/countersign`, else
//!   `$HOME/.local/state/countersign`.

use std::path::PathBuf;

/// The environment variable naming the helper's socket (both the helper and the CLI read it).
pub const SOCKET_ENV: &str = "COUNTERSIGN_HELPER_SOCKET";

/// The socket's file name inside its directory.
pub const SOCKET_FILE: &str = "launcher.sock";

/// The default socket path from an environment lookup, or `None` without `XDG_RUNTIME_DIR`.
pub fn default_socket(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let dir = env("XDG_RUNTIME_DIR").filter(|d| !d.is_empty())?;
    Some(PathBuf::from(dir).join("countersign").join(SOCKET_FILE))
}

/// The default state directory from an environment lookup, or `None` without
/// `XDG_STATE_HOME` and `HOME`.
pub fn default_state_dir(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(d) = env("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("countersign"));
    }
    let home = env("HOME").filter(|d| !d.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("countersign"),
    )
}

/// Reads the process environment (for the functions above).
#[must_use]
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            default_socket(env(&[("XDG_RUNTIME_DIR", "/run/user/1000")])),
            Some(PathBuf::from("/run/user/1000/countersign/launcher.sock"))
        );
        assert_eq!(default_socket(env(&[("XDG_RUNTIME_DIR", "")])), None);
        assert_eq!(
            default_state_dir(env(&[("HOME", "/home/ada")])),
            Some(PathBuf::from("/home/ada/.local/state/countersign"))
        );
        assert_eq!(
            default_state_dir(env(&[("HOME", "/home/ada"), ("XDG_STATE_HOME", "/s")])),
            Some(PathBuf::from("/s/countersign"))
        );
        assert_eq!(default_state_dir(env(&[])), None);
    }
}
