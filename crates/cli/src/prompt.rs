//! The secret prompt: reads one line without echoing it. While it is up, SIGHUP, SIGINT,
//! SIGQUIT and SIGTERM end the program with 129, 130, 131 and 143 (128 + the signal), after
//! putting the terminal back as it was.
//!
//! On a terminal the line is read from standard input with echo turned off (termios); when
//! standard input is not a terminal (a pipe), it is read as it comes. The handlers stay for
//! the rest of the program, so a later signal also exits with 128 + its number.

use std::io::{BufRead, IsTerminal, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, PoisonError};

use nix::sys::termios::{self, LocalFlags, SetArg, Termios};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use zeroize::Zeroizing;

use crate::exit::{self, Fail};

/// The signals that end the prompt.
pub const SIGNALS: [i32; 4] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM];

type Saved = Arc<Mutex<Option<Termios>>>;

fn restore(saved: &Saved) {
    let guard = saved.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(t) = guard.as_ref() {
        let stdin = std::io::stdin();
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, t);
    }
}

/// Exits with 128 + the signal on any of [`SIGNALS`], restoring the terminal first.
fn exit_on_signals(saved: Saved) -> Result<(), Fail> {
    let mut signals = signal_hook::iterator::Signals::new(SIGNALS)
        .map_err(|e| Fail::failure(format!("installing signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("prompt-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                restore(&saved);
                eprintln!();
                std::process::exit(i32::from(exit::for_signal(sig)));
            }
        })
        .map_err(|e| Fail::failure(format!("starting the signal thread: {e}")))?;
    Ok(())
}

/// Shows `label` on stderr and reads one line without echo. The line ending is dropped;
/// surrounding whitespace is trimmed.
///
/// # Errors
/// Exit 2 when nothing is entered (end of input or an empty line); 1 when the terminal cannot
/// be set up.
pub fn read_hidden(label: &str) -> Result<Zeroizing<String>, Fail> {
    let saved: Saved = Arc::new(Mutex::new(None));
    exit_on_signals(saved.clone())?;
    let stdin = std::io::stdin();
    let tty = stdin.is_terminal();
    if tty {
        let orig = termios::tcgetattr(stdin.as_fd())
            .map_err(|e| Fail::failure(format!("reading terminal settings: {e}")))?;
        let mut quiet = orig.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        quiet.local_flags.insert(LocalFlags::ECHONL);
        *saved.lock().unwrap_or_else(PoisonError::into_inner) = Some(orig);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSAFLUSH, &quiet)
            .map_err(|e| Fail::failure(format!("turning off echo: {e}")))?;
    }
    {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{label}");
        let _ = err.flush();
    }
    let mut line = Zeroizing::new(String::new());
    let read = stdin.lock().read_line(&mut line);
    if tty {
        restore(&saved);
        *saved.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
    read.map_err(|e| Fail::failure(format!("reading the prompt: {e}")))?;
    let value = Zeroizing::new(line.trim().to_owned());
    if value.is_empty() {
        return Err(Fail::usage("nothing was entered at the prompt"));
    }
    Ok(value)
}
