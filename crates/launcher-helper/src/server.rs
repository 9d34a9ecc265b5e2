//! The Unix socket: made mode 0600 in a 0700 directory, one task per connection, one request
//! per line, answers in order. A line over [`MAX_LINE`] is answered `BAD_REQUEST` and the
//! connection closed; an idle connection is closed after [`IDLE`].

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use countersign_launcher_proto::frame::{self, MAX_LINE};
use countersign_launcher_proto::{HelperCode, HelperError, Response};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use crate::helper::Helper;
use crate::peer::Peer;

/// An idle connection is closed after this long.
pub const IDLE: Duration = Duration::from_secs(300);

/// At most this many connections are served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// Binds the socket at `path`: its directory is created 0700 if missing, a stale socket left by
/// a helper that died is replaced, and the socket is made 0600.
///
/// # Errors
/// When another helper answers at `path`, or the socket cannot be made.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        crate::store::ensure_private_dir(dir)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("another launcher helper answers at {}", path.display());
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Reads one line of at most `cap` bytes: [`frame::read_line`]'s rule ([`frame::Framer`]) on
/// an async reader.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    cap: usize,
) -> Result<Option<Vec<u8>>, frame::LineError> {
    let mut framer = frame::Framer::new(cap);
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return framer.finish();
        }
        let (n, line) = framer.feed(available);
        r.consume(n);
        if let Some(line) = line? {
            return Ok(Some(line));
        }
    }
}

/// Serves connections on `listener` until `stop` resolves, and runs the helper's background
/// work every tick.
pub async fn serve(
    helper: Arc<Helper>,
    listener: UnixListener,
    stop: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut tick = tokio::time::interval(helper.config().tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => helper.tick(),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = permits.clone().acquire_owned().await else { break };
                    let h = helper.clone();
                    tokio::spawn(async move {
                        connection(h, stream).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn connection(helper: Arc<Helper>, stream: UnixStream) {
    let peer = Peer::from_socket(&stream, helper.procfs(), helper.uid());
    if let Err(e) = &peer {
        tracing::info!(error = %e.error, "caller not identified");
    }
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    loop {
        let line = match tokio::time::timeout(IDLE, read_line(&mut reader, MAX_LINE)).await {
            Err(_) | Ok(Ok(None)) | Ok(Err(frame::LineError::Io(_))) => return,
            Ok(Err(frame::LineError::TooLong(cap))) => {
                let e = HelperError::new(
                    HelperCode::BadRequest,
                    format!("the line exceeds {cap} bytes; closing the connection"),
                );
                let _ = write(&mut w, &Response::Error(e)).await;
                return;
            }
            Ok(Ok(Some(line))) => line,
        };
        let answer = helper.handle_line(&peer, &line).await;
        if write(&mut w, &answer).await.is_err() {
            return;
        }
    }
}

async fn write(w: &mut tokio::net::unix::OwnedWriteHalf, r: &Response) -> std::io::Result<()> {
    let line = frame::encode(r).map_err(std::io::Error::other)?;
    w.write_all(&line).await?;
    w.flush().await
}

/// Removes the socket file when dropped.
#[derive(Debug)]
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
