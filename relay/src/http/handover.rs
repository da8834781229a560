//! A big push's envelopes checked on a second thread while the store inserts those already
//! checked, in the push's one transaction.
//!
//! One device's pushes are sequential, so a push's phases add up to its latency: validating
//! 1000 envelopes took ~2.9 ms and inserting them ~4.4 ms, one after the other (BENCHMARKS.md,
//! round twelve). Here the checker hands the store chunks of [`CHUNK`] prepared events, and
//! the store's transaction stays all-or-nothing: the checker ends the stream with an explicit
//! [`Handover::Done`]; a stream that ends any other way (an envelope failed, the checker
//! panicked) yields [`StoreError::Abandoned`] and the store rolls back. The checker's verdict
//! comes first: it finishes the batch even if the store gave up early, so a bad batch is a 400
//! (with the first bad index) whatever the store said — the order a serial push judged in.

use std::sync::mpsc::{sync_channel, Receiver};

use super::error::ApiError;
use crate::store::{NewEvent, PushOutcome, StoreError};

/// A push with fewer events is checked before its transaction (a thread would cost more
/// than the overlap saves).
pub const PIPELINE_FROM: usize = 256;

/// Events per hand-over.
const CHUNK: usize = 64;

enum Handover {
    Chunk(Vec<NewEvent>),
    /// Every event was checked and handed over.
    Done,
}

/// The store's side of the channel: the events in order, then `None` after `Done`, or one
/// `Err(Abandoned)` if the checker stopped without it.
struct Received {
    rx: Receiver<Handover>,
    chunk: std::vec::IntoIter<NewEvent>,
    ended: bool,
}

impl Iterator for Received {
    type Item = Result<NewEvent, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(ev) = self.chunk.next() {
                return Some(Ok(ev));
            }
            if self.ended {
                return None;
            }
            match self.rx.recv() {
                Ok(Handover::Chunk(c)) => self.chunk = c.into_iter(),
                Ok(Handover::Done) => self.ended = true,
                Err(_) => {
                    self.ended = true;
                    return Some(Err(StoreError::Abandoned));
                }
            }
        }
    }
}

/// Prepares `items` (index, item) on a scoped thread and feeds the results to `store` as they
/// come. The first failure of `prepare` is the answer, whatever `store` returned; otherwise
/// `store`'s outcome (its error mapped by `store_failure`).
pub fn check_while_storing<T: Send>(
    items: Vec<T>,
    prepare: impl Fn(usize, T) -> Result<NewEvent, ApiError> + Send,
    store: impl FnOnce(&mut dyn Iterator<Item = Result<NewEvent, StoreError>>) -> Result<PushOutcome, StoreError>,
    store_failure: impl FnOnce(StoreError) -> ApiError,
) -> Result<PushOutcome, ApiError> {
    // Room for every chunk: the checker never waits for the store.
    let (tx, rx) = sync_channel(items.len() / CHUNK + 2);
    std::thread::scope(|scope| {
        let checker = scope.spawn(move || -> Result<(), ApiError> {
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut listening = true;
            for (index, item) in items.into_iter().enumerate() {
                let ev = prepare(index, item)?;
                if listening {
                    chunk.push(ev);
                    if chunk.len() == CHUNK {
                        listening = tx.send(Handover::Chunk(std::mem::take(&mut chunk))).is_ok();
                    }
                }
            }
            if listening && !chunk.is_empty() {
                listening = tx.send(Handover::Chunk(chunk)).is_ok();
            }
            if listening {
                let _ = tx.send(Handover::Done);
            }
            Ok(())
        });
        let mut received = Received { rx, chunk: Vec::new().into_iter(), ended: false };
        let stored = store(&mut received);
        // The store has finished with the stream; a checker still sending learns it here.
        drop(received);
        let checked = checker.join().unwrap_or_else(|_| Err(ApiError::Internal("the push's checker panicked".into())));
        checked?;
        stored.map_err(store_failure)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: usize) -> NewEvent {
        NewEvent { event_id: format!("e{i}"), stream_id: None, json: format!("{{\"n\":{i}}}") }
    }

    fn bad(index: usize) -> ApiError {
        ApiError::InvalidEnvelope { index, reason: "bad".into() }
    }

    /// A store that takes every event it is given and reports how many it saw, or the error
    /// that stopped it (what a rollback would leave: nothing).
    fn count(events: &mut dyn Iterator<Item = Result<NewEvent, StoreError>>) -> Result<PushOutcome, StoreError> {
        let mut n = 0;
        for ev in events {
            ev?;
            n += 1;
        }
        Ok(PushOutcome { accepted: n, ..PushOutcome::default() })
    }

    fn passthrough(e: StoreError) -> ApiError {
        ApiError::from(e)
    }

    #[test]
    fn every_event_reaches_the_store_in_order() {
        let mut seen = Vec::new();
        let out = check_while_storing(
            (0..1000).collect(),
            |_, i| Ok(event(i)),
            |evs| {
                for ev in evs {
                    seen.push(ev?.event_id);
                }
                Ok(PushOutcome { accepted: seen.len() as u64, ..PushOutcome::default() })
            },
            passthrough,
        )
        .unwrap();
        assert_eq!(out.accepted, 1000);
        assert_eq!(seen, (0..1000).map(|i| format!("e{i}")).collect::<Vec<_>>());
    }

    #[test]
    fn a_bad_event_late_in_the_batch_abandons_it_and_is_the_answer() {
        let mut store_saw = None;
        let err = check_while_storing(
            (0..1000).collect(),
            |i, _| if i == 999 { Err(bad(i)) } else { Ok(event(i)) },
            |evs| {
                let r = count(evs);
                store_saw = Some(r.as_ref().map(|o| o.accepted).map_err(|e| e.to_string()));
                r
            },
            passthrough,
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::InvalidEnvelope { index: 999, .. }), "{err:?}");
        assert_eq!(store_saw, Some(Err(StoreError::Abandoned.to_string())), "the store was told to roll back");
    }

    #[test]
    fn a_checker_that_panics_abandons_the_batch() {
        let mut store_saw = None;
        let err = check_while_storing(
            (0..300).collect(),
            |i, _| if i == 200 { panic!("boom") } else { Ok(event(i)) },
            |evs| {
                let r = count(evs);
                store_saw = Some(r.is_err());
                r
            },
            passthrough,
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::Internal(_)), "{err:?}");
        assert_eq!(store_saw, Some(true));
    }

    #[test]
    fn a_bad_batch_is_the_answer_even_when_the_store_failed_first() {
        let err = check_while_storing(
            (0..1000).collect(),
            |i, _| if i == 900 { Err(bad(i)) } else { Ok(event(i)) },
            |_| Err(StoreError::DeadlinePassed),
            passthrough,
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::InvalidEnvelope { index: 900, .. }), "{err:?}");
    }

    #[test]
    fn a_good_batch_gets_the_stores_error() {
        let err = check_while_storing(
            (0..1000).collect(),
            |_, i| Ok(event(i)),
            |_| Err(StoreError::DeadlinePassed),
            passthrough,
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    }
}
