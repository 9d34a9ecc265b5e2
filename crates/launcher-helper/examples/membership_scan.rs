//! What the helper pays to refresh its session membership from `/proc`: one snapshot of every
//! process and one refresh of the remembered sets, as it does every tick and before it answers
//! any caller "outside". Not a test: run it, in release, on the machine in question.
//!
//! ```sh
//! cargo run --release -p countersign-launcher-helper --example membership_scan -- 2000
//! ```

use std::time::Instant;

use countersign_launcher_helper::procfs::Procfs;
use countersign_launcher_helper::tracker::{Members, Owner};

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let procfs = Procfs::default();
    let me = procfs.stat(std::process::id() as i32).map(|s| s.id());
    let mut members = Members::default();
    // This process's parent as a session root: the benchmark's own process joins it.
    if let Ok(parent) = procfs.stat(nix::unistd::getppid().as_raw()) {
        members.insert(parent.id(), Owner::Session(parent.id()));
    }
    let processes = procfs.snapshot().len();
    let mut times = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = Instant::now();
        let snap = procfs.snapshot();
        members.refresh(&snap, |p| procfs.alive(p));
        times.push(t.elapsed());
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!(
        "{processes} processes, {} remembered, {rounds} rounds: median {:?}, p99 {:?} (self {})",
        members.len(),
        at(0.5),
        at(0.99),
        me.map(|m| m.pid).unwrap_or_default()
    );
}
