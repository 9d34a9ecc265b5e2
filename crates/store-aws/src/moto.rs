//! moto's server mode, a real AWS API emulator, as a child process for tests: started on a free
//! port, killed on drop, restartable on the same port. Behind the `moto` feature, so that the
//! store's own tests and the broker's end-to-end tests share one launcher.
//!
//! Without `moto_server` on `PATH`, [`moto_or_skip`] prints `skipped: moto_server not installed`
//! and answers `None`, unless `COUNTERSIGN_REQUIRE_MOTO=1` (CI), when it panics.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `moto_server` on `PATH`, if there.
pub fn moto_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("moto_server"))
        .find(|p| p.is_file())
}

/// The moto binary, or `None` after printing the skip line (a panic when moto is required).
#[allow(clippy::panic)]
pub fn moto_or_skip() -> Option<PathBuf> {
    let bin = moto_binary();
    if bin.is_none() {
        if std::env::var("COUNTERSIGN_REQUIRE_MOTO").as_deref() == Ok("1") {
            panic!("moto_server not installed and COUNTERSIGN_REQUIRE_MOTO=1");
        }
        println!("skipped: moto_server not installed");
    }
    bin
}

/// A running moto server; killed on drop.
#[derive(Debug)]
pub struct Moto {
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Moto {
    /// Starts moto on a free port, trying another port if the first is taken meanwhile.
    pub async fn start(bin: PathBuf) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            match spawn(&bin, port).await {
                Ok(child) => {
                    return Ok(Self {
                        bin,
                        port,
                        child: Some(child),
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(format!("moto_server would not start: {last}"))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the server: its port refuses connections from now on.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, with its state empty (moto keeps it in memory).
    pub async fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let mut last = String::new();
        for _ in 0..10 {
            match spawn(&self.bin, self.port).await {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "moto_server would not restart on port {}: {last}",
            self.port
        ))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> Result<u16, String> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local address: {e}"))
}

/// Spawns moto and waits until it accepts connections (or exits, or 30 s pass).
async fn spawn(bin: &PathBuf, port: u16) -> Result<Child, String> {
    let mut child = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("moto_server exited: {status}"));
        }
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(child);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("moto_server did not answer within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
