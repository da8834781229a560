//! A request sent ahead: started now and awaited later, so its network time overlaps the
//! engine's work in between (a pulled page's apply, an earlier push's answer).

use std::future::{poll_fn, Future};
use std::task::Poll;

use super::io::LocalFuture;

/// A request that was started (polled once: a browser's `fetch` is then on its way) and is
/// awaited with [`SentAhead::finish`]; dropping it aborts it.
pub(crate) struct SentAhead<'a, T> {
    request: LocalFuture<'a, T>,
    answered: Option<T>,
}

impl<'a, T> SentAhead<'a, T> {
    /// Starts `request`.
    pub(crate) async fn start(request: impl Future<Output = T> + 'a) -> SentAhead<'a, T> {
        let mut request: LocalFuture<'a, T> = Box::pin(request);
        let answered = match poll_fn(|cx| Poll::Ready(request.as_mut().poll(cx))).await {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => None,
        };
        SentAhead { request, answered }
    }

    /// The request's answer.
    pub(crate) async fn finish(self) -> T {
        match self.answered {
            Some(answer) => answer,
            None => self.request.await,
        }
    }
}
