//! The loop that turns many callers' statements into few: callers queue what they ask, and one
//! task takes everything queued (up to a batch) and hands it to a flush, while up to
//! `in_flight` flushes run at once. Used by the single-use values (`once.rs`) and by
//! PostgreSQL's proof-verified reads (`reads.rs`).
//!
//! While every slot's flush is running, asks queue for the next batch, so under load a batch
//! grows to the number of callers waiting and costs one statement, and a caller alone waits for
//! one statement as before. The task ends when the last sender is dropped (its queue closes).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

/// Starts the loop on the current Tokio runtime; the queue it returns takes the asks.
pub(crate) fn start<P, F, Fut>(max: usize, in_flight: usize, flush: F) -> mpsc::UnboundedSender<P>
where
    P: Send + 'static,
    F: Fn(Vec<P>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (queue, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(rx, max, in_flight, flush));
    queue
}

async fn run<P, F, Fut>(mut rx: mpsc::UnboundedReceiver<P>, max: usize, in_flight: usize, flush: F)
where
    P: Send + 'static,
    F: Fn(Vec<P>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(in_flight));
    loop {
        // A slot first: while every slot's batch is being written, asks queue for the next.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = Vec::with_capacity(max.min(64));
        if rx.recv_many(&mut batch, max).await == 0 {
            return;
        }
        let flushed = flush(batch);
        tokio::spawn(async move {
            flushed.await;
            drop(slot);
        });
    }
}
