//! `countersign`: the command-line client. Thin: everything is in the library.

fn main() -> std::process::ExitCode {
    countersign_cli::main()
}
