//! Slow request bodies, and the bytes of answers. A request body that arrives slower than
//! `MIN_BYTES_PER_SEC` (averaged from when it is first asked for, after `MIN_BYTES_GRACE_MS`) gets 408: without
//! this a client that trickles a body holds a place in the in-flight budget for the whole
//! `REQUEST_TIMEOUT_MS`. (A client that reads its answers too slowly is disconnected by the
//! connection itself, net.rs; a transfer that stops altogether, by `IDLE_TIMEOUT_MS`.)
//!
//! An answer's bytes stay counted in the in-flight byte budget until the answer has been
//! handed to the connection whole or dropped ([`Held`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why a transfer was cut off.
#[derive(Debug)]
pub struct TooSlow {
    pub moved: u64,
    pub elapsed: Duration,
    pub min_bytes_per_sec: u64,
}

impl std::fmt::Display for TooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes moved in {:.1} s: slower than MIN_BYTES_PER_SEC ({} bytes/s)",
            self.moved,
            self.elapsed.as_secs_f64(),
            self.min_bytes_per_sec
        )
    }
}

impl std::error::Error for TooSlow {}

/// The pace a transfer must keep.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes per second, averaged from the start (0: no minimum).
    pub min_bytes_per_sec: u64,
    pub grace: Duration,
}

impl Pace {
    /// When a transfer that started at `start` and moved `moved` bytes must have moved its next.
    pub(crate) fn due(&self, start: Instant, moved: u64) -> Option<Instant> {
        (self.min_bytes_per_sec > 0)
            .then(|| start + self.grace + Duration::from_secs_f64(moved as f64 / self.min_bytes_per_sec as f64))
    }
}

/// A request body held to a [`Pace`] as it arrives.
pub struct Paced<B> {
    inner: B,
    pace: Pace,
    /// When the handler first asked for the body (its own work before that does not count).
    start: Option<Instant>,
    moved: u64,
    /// Fires when the next bytes are overdue.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> std::fmt::Debug for Paced<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paced").field("moved", &self.moved).finish_non_exhaustive()
    }
}

impl<B> Paced<B> {
    /// A request body that must arrive at `pace`.
    pub fn request(inner: B, pace: Pace) -> Paced<B> {
        Paced { inner, pace, start: None, moved: 0, timer: None }
    }

    fn too_slow(&self) -> TooSlow {
        let elapsed = self.start.map_or(Duration::ZERO, |s| s.elapsed());
        TooSlow { moved: self.moved, elapsed, min_bytes_per_sec: self.pace.min_bytes_per_sec }
    }
}

impl<B> Body for Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let start = *this.start.get_or_insert_with(Instant::now);
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.moved += data.len() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some(due) = this.pace.due(start, this.moved) else { return Poll::Pending };
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                if timer.deadline() != due {
                    timer.as_mut().reset(due);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(this.too_slow())))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer holding its share of the in-flight byte budget until it is handed over whole or
/// dropped. It is handed over [`SLICE`] bytes at a time, so the connection holds a few slices
/// (hyper queues at most 16) while the rest stays here, counted.
pub struct Held<B, G> {
    inner: B,
    /// The rest of a frame still to hand over.
    rest: Option<Bytes>,
    /// What the answer holds (budget permits, its client's share) until it is gone.
    _guard: G,
}

/// An answer is handed to the connection this many bytes at a time.
const SLICE: usize = 64 * 1024;

impl<B, G> std::fmt::Debug for Held<B, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("rest", &self.rest.as_ref().map(Bytes::len)).finish_non_exhaustive()
    }
}

impl<B, G> Held<B, G> {
    pub fn new(inner: B, guard: G) -> Held<B, G> {
        Held { inner, rest: None, _guard: guard }
    }
}

impl<B: Body<Data = Bytes> + Unpin, G: Unpin> Body for Held<B, G> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut data = match self.rest.take() {
            Some(rest) => rest,
            None => match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                other => return other,
            },
        };
        if data.len() > SLICE {
            self.rest = Some(data.split_off(SLICE));
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        if let Some(rest) = &self.rest {
            let n = rest.len() as u64;
            hint.set_lower(hint.lower() + n);
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper + n);
            }
        }
        hint
    }
}

/// Whether `e` (a body's error, as a handler sees it) is a transfer cut off for its pace.
pub fn is_too_slow(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if err.is::<TooSlow>() {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn pace(min: u64) -> Pace {
        Pace { min_bytes_per_sec: min, grace: Duration::from_millis(200) }
    }

    #[tokio::test]
    async fn an_answer_is_handed_over_in_slices_whole_and_its_hold_is_let_go_at_the_end() {
        let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(10));
        let hold = budget.clone().try_acquire_many_owned(10).unwrap();
        let big = Bytes::from((0..3 * SLICE + 10).map(|i| i as u8).collect::<Vec<u8>>());
        let mut body = Held::new(http_body_util::Full::new(big.clone()), hold);
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= SLICE);
            assert_eq!(budget.available_permits(), 0, "held while parts remain");
            got.extend_from_slice(&data);
        }
        assert_eq!(got, big);
        drop(body);
        assert_eq!(budget.available_permits(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_body_that_stalls_past_its_due_time_fails_as_too_slow() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(1);
        let stream = http_body_util::StreamBody::new(tokio_stream_from(rx));
        let mut body = Paced::request(stream, pace(100));
        tokio::time::advance(Duration::from_secs(5)).await; // before the body is asked for: not counted
        tx.send(Ok(Frame::data(Bytes::from_static(&[0u8; 50])))).await.unwrap();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap().len(), 50);
        // 50 bytes at 100 bytes/s: the next bytes are due at 0.2 s + 0.5 s.
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(is_too_slow(err.as_ref()), "{err}");
        assert!(Instant::now().duration_since(body.start.unwrap()) >= Duration::from_millis(700));
        drop(tx);
    }

    /// A stream over a channel (no tokio-stream dependency for one test).
    fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
