//! `login` and `logout`. A person's machine login is started and kept by the helper (its key
//! and the poll handle never leave it); this command shows the code and the console address and
//! waits. A service's login sends its ServiceAccount token (a file the helper rereads at each
//! later login, or a token typed at the hidden prompt).

use std::path::Path;
use std::time::Instant;

use countersign_launcher_proto::messages::{LoginStarted, LoginState, TokenLogin};
use serde_json::json;

use crate::args::LoginArgs;
use crate::ctx::{Ctx, Progress};
use crate::exit::{self, Fail};
use crate::prompt;

/// Shows the confirmation code the approver types, and where.
fn show_code(ctx: &Ctx, started: &LoginStarted) {
    ctx.print(
        &json!({
            "event": "code",
            "code": started.code,
            "login": started.login,
            "host": started.host,
            "console_url": started.console_url,
        }),
        || {
            let place = match &started.console_url {
                Some(u) => format!("the approval console at {u}"),
                None => "the approval console".to_owned(),
            };
            format!(
                "To log {} in, {} approves it in {place} with this code:\n\n    {}\n",
                started.host, started.login, started.code
            )
        },
    );
}

pub async fn login(ctx: &Ctx, a: LoginArgs) -> Result<u8, Fail> {
    if let Some(service) = a.service {
        return service_login(ctx, &service, a.token_file.as_deref());
    }
    if !a.resume {
        let login = a.login.unwrap_or_default();
        let started = ctx.helper.login_start(&login, a.host.as_deref())?;
        show_code(ctx, &started);
        if a.no_wait {
            ctx.note("Not waiting (--no-wait). Wait later with: countersign login --resume");
            return Ok(exit::PENDING);
        }
    }
    let progress = Progress::start(ctx, "Waiting for the approval...".to_owned());
    let deadline = a.timeout.map(|t| Instant::now() + t);
    let result = loop {
        let p = match ctx.helper.login_poll() {
            Ok(p) => p,
            Err(e) => break Err(Fail::from(e)),
        };
        if p.state != LoginState::Pending {
            break Ok(p);
        }
        if deadline.is_some_and(|d| Instant::now() + ctx.poll > d) {
            progress.done();
            ctx.print(&json!({"event": "pending"}), || {
                "Still waiting; wait again with: countersign login --resume".to_owned()
            });
            return Ok(exit::PENDING);
        }
        tokio::time::sleep(ctx.poll).await;
    };
    progress.done();
    let p = result?;
    match p.state {
        LoginState::Issued => {
            ctx.print(
                &json!({"event": "issued", "credential": p.credential}),
                || match &p.credential {
                    Some(c) => format!(
                        "Logged in: launcher credential {}{}",
                        c.credential_id,
                        c.expires_at
                            .as_deref()
                            .map(|e| format!(", valid until {e}"))
                            .unwrap_or_default()
                    ),
                    None => "Logged in.".to_owned(),
                },
            );
            Ok(exit::SUCCESS)
        }
        LoginState::Denied => {
            ctx.print(&json!({"event": "denied"}), || {
                "The machine login was denied.".to_owned()
            });
            Ok(exit::DENIED)
        }
        LoginState::Expired | LoginState::Pending => Err(Fail::failure(
            "the machine login expired before anyone approved it; start again",
        )),
    }
}

/// Checks a token file as a usage matter: it must exist, be readable and hold a token.
fn check_token_file(path: &Path) -> Result<std::path::PathBuf, Fail> {
    let bad = |why: String| Fail::usage(format!("--token-file {}: {why}", path.display()));
    let text =
        zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?);
    let t = text.trim();
    if t.is_empty() {
        return Err(bad("the file is empty".into()));
    }
    if t.split('.').count() != 3 || t.chars().any(char::is_whitespace) {
        return Err(bad(
            "the file does not hold a ServiceAccount token (a JWT)".into()
        ));
    }
    std::path::absolute(path).map_err(|e| bad(e.to_string()))
}

fn service_login(ctx: &Ctx, service: &str, token_file: Option<&Path>) -> Result<u8, Fail> {
    let req = match token_file {
        Some(p) => TokenLogin {
            service: service.to_owned(),
            token_file: Some(check_token_file(p)?.display().to_string()),
            token: None,
        },
        None => {
            if !ctx.interactive {
                return Err(Fail::usage(
                    "--token-file is required with --non-interactive",
                ));
            }
            // Make sure someone is there to take it before asking for a secret.
            ctx.helper.status()?;
            let token = prompt::read_hidden(&format!("ServiceAccount token for {service}: "))?;
            TokenLogin {
                service: service.to_owned(),
                token_file: None,
                token: Some(countersign_launcher_proto::Secret::new(token.to_string())),
            }
        }
    };
    let c = ctx.helper.token_login(req)?;
    ctx.print(&c, || {
        format!(
            "Logged in as service {service}: launcher credential {}{}",
            c.credential_id,
            c.expires_at
                .as_deref()
                .map(|e| format!(", valid until {e} (the helper logs in again before then)"))
                .unwrap_or_default()
        )
    });
    Ok(exit::SUCCESS)
}

pub fn logout(ctx: &Ctx) -> Result<u8, Fail> {
    let out = ctx.helper.logout()?;
    ctx.print(&out, || match &out.credential_id {
        Some(id) => format!(
            "Forgot launcher credential {id}. It stays valid at the broker until it expires or is revoked in the approval console (revoke it before logging out with: countersign operator machines revoke {id})."
        ),
        None => "This helper held no launcher credential.".to_owned(),
    });
    Ok(exit::SUCCESS)
}
