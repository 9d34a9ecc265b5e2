//! # countersign-cli
//!
//! The `countersign` command: logins, sessions that run a command with granted secrets,
//! requests, grants, operator commands, a lease renewal worker, a hidden secret prompt, shell
//! completions and man pages. It holds no key: every signature comes from the launcher helper
//! (`countersign-launcher`) over its socket, with the typed protocol of
//! `countersign-launcher-proto`; calls to the broker are made here with the proofs it signs.
//!
//! Exit statuses follow the spec's "Command-line client exit codes" ([`exit`]).

pub mod args;
mod child;
pub mod ctx;
pub mod exit;
pub mod granted;
pub mod login;
pub mod mask;
pub mod mcp;
pub mod operator;
pub mod prompt;
pub mod relay;
pub mod run;
pub mod session;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use countersign_launcher_proto::paths;

use crate::args::{Cli, Command};
use crate::ctx::Ctx;
use crate::exit::Fail;

/// Runs the program with the process's arguments; answers its exit status.
#[must_use]
pub fn main() -> ExitCode {
    // clap exits 2 on a usage error (0 for --help and --version).
    let cli = Cli::parse();
    let json = cli.json;
    let code = match execute(cli) {
        Ok(code) => code,
        Err(f) => {
            report(&f, json);
            f.exit
        }
    };
    ExitCode::from(code)
}

fn report(f: &Fail, json: bool) {
    let mut err = std::io::stderr().lock();
    if json {
        let v = serde_json::json!({ "error": f.message, "code": f.code, "exit": f.exit });
        let _ = writeln!(err, "{v}");
    } else {
        let _ = writeln!(err, "countersign: {}", f.message);
    }
}

fn execute(cli: Cli) -> Result<u8, Fail> {
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "countersign", &mut std::io::stdout());
            return Ok(exit::SUCCESS);
        }
        Command::Man { dir } => return man(dir.as_deref()),
        _ => {}
    }
    let socket = cli
        .socket
        .clone()
        .or_else(|| paths::default_socket(paths::process_env))
        .ok_or_else(|| {
            Fail::usage(format!(
                "no launcher helper socket: set XDG_RUNTIME_DIR or {}, or give --socket",
                paths::SOCKET_ENV
            ))
        })?;
    let ctx = Ctx::new(socket, cli.json, !cli.non_interactive, cli.poll_interval);
    if let Command::Mcp(a) = cli.command {
        // Its own runtime (several threads: tool calls run side by side); stdout is MCP's.
        return mcp::main(ctx, a);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::failure(format!("runtime: {e}")))?;
    rt.block_on(dispatch(&ctx, cli.command))
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<u8, Fail> {
    match command {
        Command::Login(a) => login::login(ctx, a).await,
        Command::Logout => login::logout(ctx),
        Command::Run(a) => run::run(ctx, a).await,
        Command::Request(a) => session::request(ctx, a).await,
        Command::Status { request_id } => session::status(ctx, request_id).await,
        Command::Cancel { request_id } => session::cancel(ctx, &request_id).await,
        Command::Grants => session::grants(ctx).await,
        Command::Values { grant_id } => session::show_values(ctx, &grant_id).await,
        Command::Revoke { grant_id } => session::revoke(ctx, &grant_id).await,
        Command::Operator(op) => operator::operator(ctx, op).await,
        Command::Renew(a) => session::renew(ctx, a).await,
        Command::Completions { .. } | Command::Man { .. } | Command::Mcp(_) => Ok(exit::SUCCESS),
    }
}

/// Prints the man page, or writes one per command into `dir`.
fn man(dir: Option<&std::path::Path>) -> Result<u8, Fail> {
    let cmd = Cli::command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .and_then(|()| clap_mangen::generate_to(cmd, d))
                .map_err(|e| Fail::failure(format!("writing man pages to {}: {e}", d.display())))?;
        }
        None => {
            clap_mangen::Man::new(cmd)
                .render(&mut std::io::stdout())
                .map_err(|e| Fail::failure(format!("rendering the man page: {e}")))?;
        }
    }
    Ok(exit::SUCCESS)
}
