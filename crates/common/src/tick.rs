//! What a time-driven loop waits on between its passes.
//!
//! A loop's decisions read the injected [`Clock`](crate::Clock) (is a retry due, has the policy
//! aged out); its pace comes from a [`Ticker`]. A pass starts when the ticker's period elapses
//! on the runtime's clock, or when someone asks for one with [`Ticker::turn`], whichever comes
//! first. `turn` answers once a whole pass that started after the call has ended, so a test
//! moves the injected clock, turns the loop and reads what the pass did, where it used to sleep
//! a second and a half and hope.
//!
//! Every ended pass counts in `countersign_loop_passes_total{loop="…"}`, and every started one
//! in `countersign_loop_passes_started_total{loop="…"}`, which lets a test that drives a server
//! in another process wait for passes on `/metrics` instead of a fixed time: a whole pass after
//! now has ended once the ended passes outnumber the passes started now.
//!
//! ```
//! # async fn demo() {
//! use countersign_common::tick::Ticker;
//! let ticker = Ticker::every("demo", std::time::Duration::from_secs(60));
//! let mut ticks = ticker.ticks();
//! tokio::spawn(async move {
//!     loop {
//!         let _pass = ticks.next().await;
//!         // one pass of work; the pass ends when `_pass` drops
//!     }
//! });
//! ticker.turn().await; // a pass ran to its end, without waiting a minute
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

/// A loop's pace: shared by the loop (through [`Ticks`]) and whoever turns it.
#[derive(Debug, Clone)]
pub struct Ticker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: &'static str,
    period: Duration,
    passes: watch::Sender<Passes>,
}

/// Counts, moved only under the watch's lock.
#[derive(Debug, Clone, Copy)]
struct Passes {
    /// Passes asked for by [`Ticker::turn`].
    asked: u64,
    started: u64,
    ended: u64,
    /// No loop runs on the ticker (none started, or its [`Ticks`] dropped): no pass will
    /// start.
    stopped: bool,
}

impl Default for Passes {
    fn default() -> Self {
        Self {
            asked: 0,
            started: 0,
            ended: 0,
            stopped: true,
        }
    }
}

impl Ticker {
    /// A ticker whose loop runs a pass every `period` (the first at once), named `name` in
    /// logs and metrics.
    pub fn every(name: &'static str, period: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                name,
                period,
                passes: watch::Sender::new(Passes::default()),
            }),
        }
    }

    pub fn name(&self) -> &'static str {
        self.inner.name
    }

    pub fn period(&self) -> Duration {
        self.inner.period
    }

    /// The loop's side. One loop per ticker: a second `Ticks` would share the turns.
    pub fn ticks(&self) -> Ticks {
        // Listed at zero from the loop's start (the recorder is installed by then).
        metrics::describe_counter!(
            "countersign_loop_passes_total",
            "passes of the servers' time-driven loops, by loop"
        );
        metrics::describe_counter!(
            "countersign_loop_passes_started_total",
            "passes of the servers' time-driven loops started, by loop"
        );
        metrics::counter!("countersign_loop_passes_total", "loop" => self.inner.name).increment(0);
        metrics::counter!("countersign_loop_passes_started_total", "loop" => self.inner.name)
            .increment(0);
        let mut interval = tokio::time::interval(self.inner.period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut answered = 0;
        self.inner.passes.send_modify(|p| {
            p.stopped = false;
            answered = p.asked;
        });
        Ticks {
            ticker: self.clone(),
            interval,
            answered,
        }
    }

    /// Asks for a pass now and waits until a pass that started after this call has ended (at
    /// once if no loop runs on the ticker: none was started, or it stopped).
    pub async fn turn(&self) {
        let mut started = 0;
        self.inner.passes.send_modify(|p| {
            p.asked += 1;
            started = p.started;
        });
        let mut rx = self.inner.passes.subscribe();
        // The sender lives in `self`, so the channel stays open while we wait.
        let _ = rx.wait_for(|p| p.stopped || p.ended > started).await;
    }

    /// Passes ended so far.
    pub fn passes(&self) -> u64 {
        self.inner.passes.borrow().ended
    }
}

/// The loop's end of a [`Ticker`]: [`Ticks::next`] waits for the next pass.
#[derive(Debug)]
pub struct Ticks {
    ticker: Ticker,
    interval: Interval,
    /// The turns asked for up to the last pass's start: all answered by it.
    answered: u64,
}

impl Ticks {
    /// Waits for the period or a turn, and starts a pass; the pass ends when the answer drops.
    pub async fn next(&mut self) -> Pass {
        let mut rx = self.ticker.inner.passes.subscribe();
        let answered = self.answered;
        tokio::select! {
            _ = self.interval.tick() => {}
            _ = rx.wait_for(|p| p.asked > answered) => {}
        }
        let mut asked = 0;
        self.ticker.inner.passes.send_modify(|p| {
            asked = p.asked;
            p.started += 1;
        });
        metrics::counter!("countersign_loop_passes_started_total", "loop" => self.ticker.inner.name)
            .increment(1);
        self.answered = asked;
        Pass {
            ticker: self.ticker.clone(),
        }
    }
}

impl Drop for Ticks {
    fn drop(&mut self) {
        self.ticker.inner.passes.send_modify(|p| p.stopped = true);
    }
}

/// One pass of a loop, under way until dropped.
#[derive(Debug)]
#[must_use = "a pass ends when this drops: bind it for the pass's work (`let _pass = …`)"]
pub struct Pass {
    ticker: Ticker,
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.ticker.inner.passes.send_modify(|p| p.ended += 1);
        metrics::counter!("countersign_loop_passes_total", "loop" => self.ticker.inner.name)
            .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A loop that counts its passes, and waits `work` in each.
    fn spawn_loop(
        ticker: &Ticker,
        work: Duration,
    ) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
        let done = Arc::new(AtomicU64::new(0));
        let mut ticks = ticker.ticks();
        let d = done.clone();
        let task = tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                tokio::time::sleep(work).await;
                d.fetch_add(1, Ordering::SeqCst);
            }
        });
        (done, task)
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_answers_after_a_whole_pass_that_began_after_it() {
        let ticker = Ticker::every("t", Duration::from_secs(3600));
        let (done, task) = spawn_loop(&ticker, Duration::from_millis(10));
        // The first pass starts at once (the interval's first tick), and may or may not
        // answer the first turn; let it settle (a second of paused time).
        ticker.turn().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after_first = done.load(Ordering::SeqCst);
        assert!(after_first >= 1);
        assert_eq!(ticker.passes(), after_first);
        // Now the loop is idle, an hour from its next period: a turn is one pass.
        ticker.turn().await;
        assert_eq!(done.load(Ordering::SeqCst), after_first + 1);
        assert_eq!(ticker.passes(), after_first + 1);
        // No turn, no period elapsed: no pass.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(done.load(Ordering::SeqCst), after_first + 1);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_period_still_paces_the_loop() {
        let ticker = Ticker::every("t", Duration::from_secs(1));
        let (done, task) = spawn_loop(&ticker, Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(done.load(Ordering::SeqCst), 4, "at 0, 1, 2 and 3 s");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_asked_during_a_pass_is_not_answered_by_it() {
        let ticker = Ticker::every("t", Duration::from_secs(3600));
        let (done, task) = spawn_loop(&ticker, Duration::from_secs(5));
        // The first pass is under way (5 s of work).
        tokio::task::yield_now().await;
        let turned = {
            let t = ticker.clone();
            tokio::spawn(async move { t.turn().await })
        };
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert!(
            !turned.is_finished(),
            "the pass under way began before the turn"
        );
        turned.await.expect("turn");
        assert_eq!(done.load(Ordering::SeqCst), 2);
        task.abort();
    }

    #[tokio::test]
    async fn a_turn_on_a_stopped_loop_answers() {
        let ticker = Ticker::every("t", Duration::from_secs(3600));
        tokio::time::timeout(Duration::from_secs(5), ticker.turn())
            .await
            .expect("a turn on a loop never started answers");
        let (_, task) = spawn_loop(&ticker, Duration::ZERO);
        ticker.turn().await;
        task.abort();
        let _ = task.await;
        tokio::time::timeout(Duration::from_secs(5), ticker.turn())
            .await
            .expect("a turn on a stopped loop answers");
    }
}
