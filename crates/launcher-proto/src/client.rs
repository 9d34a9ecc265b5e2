//! A blocking client of the helper: one connection per call, one request line, one answer line.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::frame::{self, MAX_LINE};
use crate::messages::{
    CredentialInfo, HelperError, LoggedOut, LoginProgress, LoginStarted, Register, Request,
    Response, SessionInfo, SignProof, SignRequest, SignedProof, SignedRequest, StatusInfo,
    TokenLogin, Unregistered,
};

/// How long a call may wait for its answer (a registration waits for the broker).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No helper answers at the socket.
    #[error(
        "no launcher helper answers at {path}: {source} (start one with `countersign-launcher --broker URL`)"
    )]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("launcher helper connection: {0}")]
    Io(#[from] std::io::Error),
    /// The answer was not what the protocol allows.
    #[error("launcher helper answered out of protocol: {0}")]
    Protocol(String),
    /// The helper refused.
    #[error("{0}")]
    Refused(HelperError),
}

impl ClientError {
    /// The helper's refusal, if that is what this is.
    #[must_use]
    pub fn refusal(&self) -> Option<&HelperError> {
        match self {
            ClientError::Refused(e) => Some(e),
            _ => None,
        }
    }
}

/// A client of the helper at one socket path.
#[derive(Debug, Clone)]
pub struct Client {
    path: PathBuf,
    timeout: Duration,
}

macro_rules! expect {
    ($resp:expr, $variant:ident) => {
        match $resp {
            Response::$variant(v) => Ok(v),
            Response::Error(e) => Err(ClientError::Refused(e)),
            other => Err(ClientError::Protocol(format!(
                "expected `{}`, got `{}`",
                stringify!($variant),
                other.kind()
            ))),
        }
    };
}

impl Client {
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one raw line (a newline is added) and reads the raw answer line. For tests and
    /// tools that speak the protocol by hand.
    ///
    /// # Errors
    /// If the helper cannot be reached or the connection fails.
    pub fn raw(&self, line: &[u8]) -> Result<Vec<u8>, ClientError> {
        let mut stream = self.connect()?;
        let mut out = line.to_vec();
        out.push(b'\n');
        stream.write_all(&out)?;
        stream.flush()?;
        let mut r = BufReader::new(stream);
        frame::read_line(&mut r, MAX_LINE)
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .ok_or_else(|| ClientError::Protocol("the helper closed without answering".into()))
    }

    fn connect(&self) -> Result<UnixStream, ClientError> {
        let stream =
            UnixStream::connect(&self.path).map_err(|source| ClientError::Unreachable {
                path: self.path.clone(),
                source,
            })?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        Ok(stream)
    }

    /// Sends `req` and reads the answer (a refusal is `Ok(Response::Error(_))`).
    ///
    /// # Errors
    /// If the helper cannot be reached, the connection fails, or the answer is not a
    /// [`Response`].
    pub fn call(&self, req: &Request) -> Result<Response, ClientError> {
        let line = serde_json::to_vec(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let answer = self.raw(&line)?;
        serde_json::from_slice(&answer).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// `status`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn status(&self) -> Result<StatusInfo, ClientError> {
        expect!(self.call(&Request::Status)?, Status).map(|b| *b)
    }

    /// `login_start`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn login_start(
        &self,
        login: &str,
        host: Option<&str>,
    ) -> Result<LoginStarted, ClientError> {
        let req = Request::LoginStart(crate::messages::LoginStart {
            login: login.to_owned(),
            host: host.map(str::to_owned),
        });
        expect!(self.call(&req)?, LoginStarted)
    }

    /// `login_poll`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn login_poll(&self) -> Result<LoginProgress, ClientError> {
        expect!(self.call(&Request::LoginPoll)?, Login)
    }

    /// `token_login`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn token_login(&self, req: TokenLogin) -> Result<CredentialInfo, ClientError> {
        expect!(self.call(&Request::TokenLogin(req))?, Credential)
    }

    /// `logout`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn logout(&self) -> Result<LoggedOut, ClientError> {
        expect!(self.call(&Request::Logout)?, LoggedOut)
    }

    /// `register`: the calling process becomes a session's root.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn register(&self, req: Register) -> Result<SessionInfo, ClientError> {
        expect!(self.call(&Request::Register(req))?, Registered)
    }

    /// `unregister`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn unregister(&self) -> Result<Unregistered, ClientError> {
        expect!(self.call(&Request::Unregister)?, Unregistered)
    }

    /// `sign_proof`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn sign_proof(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<SignedProof, ClientError> {
        let req = Request::SignProof(proof_request(method, path, body));
        expect!(self.call(&req)?, Proof)
    }

    /// `sign_launcher_proof`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn sign_launcher_proof(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<SignedProof, ClientError> {
        let req = Request::SignLauncherProof(proof_request(method, path, body));
        expect!(self.call(&req)?, Proof)
    }

    /// `sign_request`.
    ///
    /// # Errors
    /// As [`Client::call`], and the helper's refusal.
    pub fn sign_request(&self, req: SignRequest) -> Result<SignedRequest, ClientError> {
        expect!(self.call(&Request::SignRequest(req))?, SignedRequest)
    }
}

fn proof_request(method: &str, path: &str, body: Option<&[u8]>) -> SignProof {
    SignProof {
        method: method.to_owned(),
        path: path.to_owned(),
        bh: body
            .filter(|b| !b.is_empty())
            .map(countersign_proto::claims::body_hash),
    }
}
