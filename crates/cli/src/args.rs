//! The command line (clap derive). Completions and man pages are generated from these same
//! definitions (`countersign completions`, `countersign man`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use countersign_launcher_proto::paths::SOCKET_ENV;

const AFTER_HELP: &str = "\
Exit status:
  0    success
  1    failure
  2    usage error (invalid flag, argument, token file or required environment value)
  75   a request (or machine login) is still waiting for a person
  76   a lease renewal reached a terminal refusal (do not restart the worker)
  77   the request (or machine login) was denied
  126  run: the command exists but could not be executed
  127  run: the command was not found
  129, 130, 131, 143  the secret prompt got SIGHUP, SIGINT, SIGQUIT, SIGTERM

Environment:
  COUNTERSIGN_HELPER_SOCKET     the launcher helper's socket (as --socket)
  XDG_RUNTIME_DIR               the default socket is $XDG_RUNTIME_DIR/countersign/launcher.sock
  COUNTERSIGN_NON_INTERACTIVE   as --non-interactive
  COUNTERSIGN_AGENT_TOKEN       mcp: the console agent token (or --agent-token-file)";

/// Countersign: secrets for agent sessions, released only on a policy's yes or a person's
/// countersignature.
///
/// Every command talks to the launcher helper (`countersign-launcher`) on this machine, which
/// holds the machine's login and the sessions' keys; this program never holds a key. A
/// session is a process tree: `countersign run` makes one around a command, and commands run
/// inside it (`request`, `status`, `grants`, ...) act for that session. Operator commands act
/// for this machine's login and are refused inside a session.
#[derive(Parser, Debug)]
#[command(name = "countersign", version, after_long_help = AFTER_HELP)]
pub struct Cli {
    /// The launcher helper's socket [default: $XDG_RUNTIME_DIR/countersign/launcher.sock].
    #[arg(long, global = true, env = SOCKET_ENV, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print results as JSON (one object per line) for scripts and agents.
    #[arg(long, global = true)]
    pub json: bool,
    /// Never prompt and show no progress animation; anything that would need a prompt is a
    /// usage error (exit 2).
    #[arg(long, global = true, env = "COUNTERSIGN_NON_INTERACTIVE")]
    pub non_interactive: bool,
    /// How often to ask whether a person has decided, in seconds.
    #[arg(long, global = true, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds)]
    pub poll_interval: Duration,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Log this machine in: a person approves the shown code in the approval console. With
    /// --service, log a service in with its ServiceAccount token instead.
    Login(LoginArgs),
    /// Forget this machine's launcher credential (the helper deletes its stored key).
    Logout,
    /// Run COMMAND in a new session, with the granted secrets in its environment.
    ///
    /// Registers a session around this process, requests the --secret names (if any) with the
    /// reason, waits for a person when the policy asks for one, then runs COMMAND with each
    /// secret in the environment variable of its name. The session ends when COMMAND exits;
    /// its exit status is this command's.
    ///
    /// An issued secret (a credential made for this grant alone, destroyed when it ends) also
    /// gives its parts, each in its own variable: PGHOST, PGPORT, PGDATABASE, PGUSER and
    /// PGPASSWORD for PostgreSQL (its value is a postgres:// URL), AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY for AWS (its value is credential_process JSON). When two secrets
    /// give the same variable, the first in the grant's order wins and a warning on standard
    /// error names both; a secret's own name wins over a part. Every part is masked like a
    /// value.
    Run(RunArgs),
    /// Request secrets for the session this command runs in.
    Request(RequestArgs),
    /// Show the helper, this machine's login and the current session; with REQUEST_ID, that
    /// request's state (exit 0 granted, 75 pending, 77 denied, 1 expired or cancelled).
    Status {
        /// A request of the current session.
        #[arg(value_parser = parse_uuid)]
        request_id: Option<String>,
    },
    /// Cancel a pending request of the current session.
    Cancel {
        #[arg(value_parser = parse_uuid)]
        request_id: String,
    },
    /// List the current session's live grants.
    Grants,
    /// Print a grant's values as NAME=value lines, an issued secret's parts included as `run`
    /// sets them (the broker's JSON answer with --json).
    Values {
        #[arg(value_parser = parse_uuid)]
        grant_id: String,
    },
    /// Revoke one of the current session's grants.
    Revoke {
        #[arg(value_parser = parse_uuid)]
        grant_id: String,
    },
    /// Operator commands for this machine's login (refused inside a session).
    #[command(subcommand)]
    Operator(Operator),
    /// Keep the current session's lease renewed: a worker for a supervisor. Exits 76 on a
    /// terminal refusal (the session is over; do not restart it).
    Renew(RenewArgs),
    /// Serve the Model Context Protocol on standard input and output: tools through which a
    /// model uses secrets without ever seeing them.
    ///
    /// Registers a session around this process (the launcher helper holds its key; this
    /// process never does), then serves MCP over stdio until its standard input closes or it
    /// gets SIGTERM, SIGINT or SIGHUP: then it ends the session (its grants and pending requests
    /// end with it) and exits 0. If it dies another way, the helper ends the session within a
    /// second. Started inside a session already (countersign run -- countersign mcp), it serves
    /// that session and leaves it to its owner. Tools: run_with_secrets, request_status,
    /// cancel_request, list_grants; with a console agent token also ask_person, get_answer,
    /// read_messages and reply. No tool result, error or log line carries a secret's value:
    /// command output is masked, and a value too short to mask withholds the output. Logs go to
    /// standard error. See docs/agents.md.
    Mcp(McpArgs),
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page, or write one per command into --dir.
    Man {
        /// Write countersign.1 and countersign-<command>.1 here.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct LoginArgs {
    /// The person who approves this machine's login (their console login, an e-mail).
    #[arg(long, value_name = "EMAIL", required_unless_present_any = ["service", "resume"], conflicts_with_all = ["service", "resume"])]
    pub login: Option<String>,
    /// This machine's name as the approver sees it [default: the helper's host name].
    #[arg(long, value_name = "NAME", conflicts_with = "service")]
    pub host: Option<String>,
    /// Log in as this service with its ServiceAccount token (no person approves).
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
    /// The ServiceAccount token file; without it the token is asked for (hidden input), or
    /// with --non-interactive this is a usage error.
    #[arg(long, value_name = "PATH", requires = "service")]
    pub token_file: Option<PathBuf>,
    /// Show the code and exit 75 without waiting; wait later with --resume.
    #[arg(long, conflicts_with = "service")]
    pub no_wait: bool,
    /// Wait for the machine login already in progress.
    #[arg(long, conflicts_with = "service")]
    pub resume: bool,
    /// Give up waiting after this many seconds (exit 75).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,
}

/// What to ask for, shared by `run` and `request`.
#[derive(Args, Debug)]
pub struct Ask {
    /// A secret to request, by its agent name (GITHUB_TOKEN); repeat for more.
    #[arg(long = "secret", short = 's', value_name = "NAME", value_parser = parse_secret_name)]
    pub secrets: Vec<String>,
    /// How long the grant should last, in seconds [default: until the session ends].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub lifetime: Option<u64>,
    /// Do not wait for a person: exit 75 if the request needs one.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up waiting after this many seconds (exit 75).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// The notification session told if the request expires undecided.
    #[arg(long, value_name = "ID")]
    pub session_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub ask: Ask,
    /// Why the secrets are needed, shown to the approver [default: "countersign run: COMMAND..."].
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Do not mask the values in COMMAND's output: it gets this terminal or these pipes as they
    /// are, and whatever it prints (a value included) reaches the screen, logs and transcripts.
    /// By default every granted value, and its base64, percent and JSON encodings, is replaced
    /// by `<concealed by countersign>` in its standard output and error.
    #[arg(long)]
    pub no_mask: bool,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct McpArgs {
    /// This session's id on the approval console (the actor of its asks and replies, the id of
    /// its session link), also the notification session the broker tells when a pending
    /// request expires [default: mcp-<random>].
    #[arg(long, value_name = "ID", value_parser = parse_session_id)]
    pub session_id: Option<String>,
    /// A short name for the session, part of its runtime id (as the approver sees it).
    #[arg(long, value_name = "NAME", default_value = "mcp")]
    pub label: String,
    /// How long run_with_secrets waits for a person before it answers that the request is
    /// still waiting (a call may ask for another wait, up to an hour).
    #[arg(long, value_name = "SECONDS", default_value = "25", value_parser = parse_seconds)]
    pub wait: Duration,
    /// The approval console, for ask_person, get_answer, read_messages and reply [default: the
    /// console URL the launcher helper was started with].
    #[arg(long, value_name = "URL", env = "COUNTERSIGN_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// A file holding this session's console agent token (a personal agent token minted in the
    /// console, or the console's shared agent token). The token itself is never taken from the
    /// command line; COUNTERSIGN_AGENT_TOKEN may hold it instead. Without a token the console
    /// tools are not offered.
    #[arg(long, value_name = "PATH", env = "COUNTERSIGN_AGENT_TOKEN_FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// The session's title on the console [default: "countersign mcp (<label>)"].
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// A role the session advertises on the console link (messages to the role reach it);
    /// repeat for more.
    #[arg(long = "role", value_name = "ROLE")]
    pub roles: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RequestArgs {
    #[command(flatten)]
    pub ask: Ask,
    /// Why the secrets are needed, shown to the approver.
    #[arg(long, value_name = "TEXT", required = true)]
    pub reason: String,
    /// Once granted, print the values (NAME=value lines, an issued secret's parts included as
    /// `run` sets them; or in the JSON answer, with its `parts`).
    #[arg(long)]
    pub print_values: bool,
}

#[derive(Subcommand, Debug)]
pub enum Operator {
    /// This operator's machines' logins.
    #[command(subcommand)]
    Machines(OperatorAction),
    /// Live grants of this operator's sessions, and those the operator approved.
    #[command(subcommand)]
    Grants(OperatorAction),
}

#[derive(Subcommand, Debug)]
pub enum OperatorAction {
    /// List them.
    List,
    /// Revoke one by id (a machine login's end takes every session it enrolled with it).
    Revoke {
        #[arg(value_parser = parse_uuid)]
        id: String,
    },
}

#[derive(Args, Debug)]
pub struct RenewArgs {
    /// Renew once and exit (0 renewed, 76 terminal refusal, 1 try again later).
    #[arg(long)]
    pub once: bool,
    /// The longest wait between renewals, in seconds (a renewal also comes at half the lease).
    #[arg(long, value_name = "SECONDS", default_value = "300", value_parser = parse_seconds)]
    pub interval: Duration,
}

/// Seconds as a positive decimal (`1`, `0.25`).
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1e9) {
        return Err("must be a positive number of seconds".into());
    }
    Ok(Duration::from_secs_f64(v))
}

/// An agent secret name: `^[A-Z][A-Z0-9_]{0,127}$`.
pub(crate) fn parse_secret_name(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if ok {
        Ok(s.to_owned())
    } else {
        Err("a secret name is upper case letters, digits and _, starting with a letter".into())
    }
}

/// A session id, by the rule the broker, the console and the launcher helper use
/// (`countersign_common::ids`, console protocol §4.1): 1 to 128 characters, no whitespace,
/// control character, or one of `/?#<>"'`[]\|`.
pub fn parse_session_id(s: &str) -> Result<String, String> {
    if countersign_common::ids::is_session_id(s) {
        Ok(s.to_owned())
    } else {
        Err("a session id is 1 to 128 characters without whitespace, control characters or any of / ? # < > \" ' ` [ ] \\ |".into())
    }
}

/// A UUID by the shared rule (hyphenated, any case), written lowercase.
fn parse_uuid(s: &str) -> Result<String, String> {
    countersign_common::ids::uuid_text(s).ok_or_else(|| "ids are UUIDs".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_mcp() {
        let cli = Cli::try_parse_from([
            "countersign",
            "mcp",
            "--session-id",
            "agent-7",
            "--wait",
            "2.5",
            "--role",
            "reviewer",
            "--role",
            "ci.bot",
        ]);
        let Ok(Cli {
            command: Command::Mcp(a),
            ..
        }) = cli
        else {
            panic!("{cli:?}");
        };
        assert_eq!(a.session_id.as_deref(), Some("agent-7"));
        assert_eq!(a.wait, Duration::from_millis(2500));
        assert_eq!(a.roles, ["reviewer", "ci.bot"]);
        assert_eq!(a.label, "mcp");
        for bad in ["a b", "a/b", "", "x?y", "<s>"] {
            let e = Cli::try_parse_from(["countersign", "mcp", "--session-id", bad]);
            assert_eq!(e.err().map(|e| e.exit_code()), Some(2), "{bad:?}");
        }
        // The agent token is never a flag.
        let e = Cli::try_parse_from(["countersign", "mcp", "--agent-token", "t"]);
        assert_eq!(e.err().map(|e| e.exit_code()), Some(2));
    }

    #[test]
    fn parses_run() {
        let cli = Cli::try_parse_from([
            "countersign",
            "run",
            "--secret",
            "A_B",
            "-s",
            "C",
            "--no-wait",
            "--",
            "env",
            "-i",
        ]);
        let Ok(Cli {
            command: Command::Run(r),
            ..
        }) = cli
        else {
            panic!("{cli:?}");
        };
        assert_eq!(r.ask.secrets, vec!["A_B", "C"]);
        assert!(r.ask.no_wait);
        assert_eq!(r.command, vec![OsString::from("env"), OsString::from("-i")]);
        for bad in [
            vec!["countersign", "run", "--secret", "lower", "--", "env"],
            vec!["countersign", "run", "--secret", "A"],
            vec!["countersign", "cancel", "not-a-uuid"],
            vec!["countersign", "login"],
            vec!["countersign", "login", "--login", "a@b", "--service", "s"],
            vec!["countersign", "--poll-interval", "0", "grants"],
        ] {
            let e = Cli::try_parse_from(&bad);
            assert_eq!(e.err().map(|e| e.exit_code()), Some(2), "{bad:?}");
        }
    }
}
