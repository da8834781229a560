//! The driver: what makes an engine sync by itself — a pass at start, after local writes
//! (debounced), on focus and when the network comes back; the poll timer; and one live channel
//! per relay ([`super::live`]), which turns the poll timer into a safety net while it is
//! healthy. Platform-neutral: the browser worker and the native CLI run the same driver with
//! their own [`Timer`], and stop it with [`Driver::stop`].
//!
//! Everything runs inside one future, [`Driver::run`]: three loops (requested passes, the poll
//! timer, the live channels) joined, so nothing is spawned and stopping ends them all.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

use futures_util::future::{join3, select, Either};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::io::{LocalFuture, Timer};
use super::live::{LiveStep, LIVE_SAFETY_POLL_MS, LIVE_TERMINAL_RETRY_MS};
use super::{Engine, SyncTrigger};

/// The default poll period (the spec's 5 s).
pub const DEFAULT_POLL_MS: u64 = 5_000;
/// Writes within this window share one pass.
pub const WRITE_DEBOUNCE_MS: u64 = 25;
/// Polls are this many times rarer while no tab of the app is visible.
pub const HIDDEN_POLL_FACTOR: u64 = 6;
/// Most passes one automatic sync runs in a row while relays have work left.
pub const MAX_PASSES: u32 = 10;
/// A poll tick that ends this much later than asked means the device slept (timers stop, the
/// wall clock does not): connections are presumed dead and a pass runs at once.
pub const SLEEP_GAP_MS: u64 = 30_000;
/// Waits that end quietly sooner than this are spaced out to it (a relay or proxy answering
/// 204 at once must not make the channel spin), and so are notices of a head already reached;
/// while such answers repeat, the spacing doubles, up to [`MAX_WAIT_SPACING_MS`].
pub const MIN_WAIT_SPACING_MS: u64 = 1_000;
/// The most a wait that keeps coming back at once is spaced out.
pub const MAX_WAIT_SPACING_MS: u64 = 60_000;

/// The spacing after the `n`-th wait in a row that came back at once (n ≥ 1).
pub fn wait_spacing_ms(n: u32) -> u64 {
    (MIN_WAIT_SPACING_MS << n.saturating_sub(1).min(16)).min(MAX_WAIT_SPACING_MS)
}
/// The pause after a local database failure in a live catch-up.
const LOCAL_FAILURE_PAUSE_MS: u64 = 5_000;

/// A broadcast "something changed": waiters compare generations.
#[derive(Default)]
struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    fn notify(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        for w in self.wakers.take() {
            w.wake();
        }
    }

    fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Resolves once the generation differs from `since`.
    fn changed(&self, since: u64) -> impl Future<Output = ()> + Unpin + '_ {
        std::future::poll_fn(move |cx| {
            if self.generation.get() != since {
                return Poll::Ready(());
            }
            let mut wakers = self.wakers.borrow_mut();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// How the driver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverOptions {
    /// The poll period while any relay has no healthy live channel (≥ 100 ms).
    pub interval_ms: u64,
    /// Keep a live channel open to every relay that offers one.
    pub live: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions { interval_ms: DEFAULT_POLL_MS, live: true }
    }
}

/// Runs after every automatic pass (the browser makes IndexedDB storage durable there).
pub type AfterPass = Box<dyn Fn() -> LocalFuture<'static, ()>>;

/// Drives one engine until stopped.
pub struct Driver {
    engine: Rc<Engine>,
    timer: Rc<dyn Timer>,
    options: DriverOptions,
    after_pass: Option<AfterPass>,
    visible: Cell<bool>,
    stopped: Cell<bool>,
    /// The pass asked for (a write, focus, online), run by the request loop.
    requested: Cell<Option<SyncTrigger>>,
    requests: Signal,
    /// Stop, reconnect (online, wake) or a change of relays: every wait and pause ends early.
    control: Signal,
    /// Reconnects so far (a control change that also resets the channels' backoff).
    reconnects: Cell<u64>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("options", &self.options).field("stopped", &self.stopped.get()).finish()
    }
}

impl Driver {
    /// A driver for `engine`; nothing runs before [`Driver::run`].
    pub fn new(
        engine: Rc<Engine>,
        timer: Rc<dyn Timer>,
        options: DriverOptions,
        after_pass: Option<AfterPass>,
    ) -> Rc<Driver> {
        let options = DriverOptions { interval_ms: options.interval_ms.max(100), ..options };
        Rc::new(Driver {
            engine,
            timer,
            options,
            after_pass,
            visible: Cell::new(true),
            stopped: Cell::new(false),
            requested: Cell::new(None),
            requests: Signal::default(),
            control: Signal::default(),
            reconnects: Cell::new(0),
        })
    }

    /// Syncs until [`Driver::stop`]: a boot pass, then passes on request, on the poll timer and
    /// on live notices. Resolves once every loop has ended (a pass running at the stop ends
    /// first).
    pub async fn run(self: Rc<Self>) {
        self.request(SyncTrigger::Boot);
        join3(self.request_loop(), self.poll_loop(), self.live_loop_all()).await;
        for url in self.engine.relay_urls() {
            self.engine.live_off(&url);
        }
    }

    /// Stops every loop; waits and pauses end at once.
    pub fn stop(&self) {
        self.stopped.set(true);
        self.requests.notify();
        self.control.notify();
    }

    /// Whether [`Driver::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Asks for a pass (a write is debounced by [`WRITE_DEBOUNCE_MS`]); requests made while
    /// one waits share it. `Online` also reconnects every live channel at once.
    pub fn request(&self, trigger: SyncTrigger) {
        if self.stopped.get() {
            return;
        }
        let merged = match self.requested.get() {
            Some(waiting) if !waiting.respects_backoff() => waiting,
            _ => trigger,
        };
        self.requested.set(Some(merged));
        self.requests.notify();
        if trigger == SyncTrigger::Online {
            self.reconnect();
        }
    }

    /// Ends every open wait and reconnect delay: the live channels start over at once (the
    /// network changed, the device woke).
    pub fn reconnect(&self) {
        self.reconnects.set(self.reconnects.get() + 1);
        self.control.notify();
    }

    /// The relay set changed: channels start for new relays and end for removed ones.
    pub fn relays_changed(&self) {
        self.control.notify();
    }

    /// Whether any tab of the app is visible: hidden, polls are [`HIDDEN_POLL_FACTOR`] times
    /// rarer (live channels stay open: a long-poll costs the device nothing while idle).
    pub fn set_visible(&self, visible: bool) {
        self.visible.set(visible);
    }

    async fn after_pass(&self) {
        if let Some(f) = &self.after_pass {
            f().await;
        }
    }

    /// Sleeps `ms` unless stopped, or the control signal moved past `since` (before or
    /// during the sleep); true if it slept the whole time.
    async fn pause(&self, ms: u64, since: u64) -> bool {
        if self.stopped.get() {
            return false;
        }
        matches!(select(self.timer.sleep(ms), self.control.changed(since)).await, Either::Left(_))
    }

    /// Passes until no relay has work left, at most [`MAX_PASSES`].
    async fn auto_pass(&self, trigger: SyncTrigger) {
        for _ in 0..MAX_PASSES {
            if self.stopped.get() {
                return;
            }
            let out = self.engine.sync_queued(trigger).await;
            self.after_pass().await;
            if !matches!(out, Ok(Some(r)) if r.more()) {
                return;
            }
        }
    }

    async fn request_loop(&self) {
        loop {
            if self.stopped.get() {
                return;
            }
            let since = self.requests.generation();
            let Some(trigger) = self.requested.take() else {
                self.requests.changed(since).await;
                continue;
            };
            if trigger == SyncTrigger::Write {
                self.timer.sleep(WRITE_DEBOUNCE_MS).await;
                // What was asked during the debounce joins this pass.
                let later = self.requested.take();
                self.auto_pass(later.filter(|t| !t.respects_backoff()).unwrap_or(trigger)).await;
            } else {
                self.auto_pass(trigger).await;
            }
        }
    }

    async fn poll_loop(&self) {
        let mut last_poll = self.engine.now();
        loop {
            let factor = if self.visible.get() { 1 } else { HIDDEN_POLL_FACTOR };
            let tick = self.options.interval_ms.saturating_mul(factor);
            let before = self.engine.now();
            let slept = self.pause(tick, self.control.generation()).await;
            if self.stopped.get() {
                return;
            }
            if !slept {
                continue;
            }
            let now = self.engine.now();
            if now.saturating_sub(before) > tick.saturating_add(SLEEP_GAP_MS) {
                self.reconnect();
                self.auto_pass(SyncTrigger::Online).await;
                last_poll = self.engine.now();
                continue;
            }
            let recent = now.saturating_sub(self.engine.last_pass_at().max(last_poll)) < LIVE_SAFETY_POLL_MS;
            if self.engine.live_healthy() && recent {
                continue;
            }
            self.auto_pass(SyncTrigger::Poll).await;
            last_poll = self.engine.now();
        }
    }

    /// One live channel per relay: started for each relay in use; a channel that ended (the
    /// relay offers none, or is closed) starts again after a reconnect, a relay change, or
    /// [`LIVE_TERMINAL_RETRY_MS`] (a relay may have gained live notices since).
    async fn live_loop_all(&self) {
        if !self.options.live {
            return;
        }
        let mut running: FuturesUnordered<LocalFuture<'_, String>> = FuturesUnordered::new();
        let (mut active, mut ended): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        loop {
            if !self.stopped.get() {
                for url in self.engine.relay_urls() {
                    if !active.contains(&url) && !ended.contains(&url) {
                        active.push(url.clone());
                        running.push(Box::pin(self.live_loop(url)));
                    }
                }
            }
            let since = self.control.generation();
            if running.is_empty() && self.stopped.get() {
                return;
            }
            let any_ended = !ended.is_empty();
            let look_again = Box::pin(async move {
                if any_ended {
                    select(self.control.changed(since), self.timer.sleep(LIVE_TERMINAL_RETRY_MS)).await;
                } else {
                    self.control.changed(since).await;
                }
            });
            let ended_one = if running.is_empty() {
                look_again.await;
                None
            } else {
                match select(running.next(), look_again).await {
                    Either::Left((url, _)) => url,
                    Either::Right(_) => None,
                }
            };
            match ended_one {
                Some(url) => {
                    active.retain(|u| *u != url);
                    ended.push(url);
                }
                None => {
                    for url in ended.drain(..) {
                        self.engine.live_reset(&url);
                    }
                }
            }
        }
    }

    /// The live channel of one relay, until it is stopped, removed, closed or unsupported.
    async fn live_loop(&self, url: String) -> String {
        let mut reconnects = self.reconnects.get();
        // Waits in a row that came back at once and told nothing new.
        let mut empty_answers = 0u32;
        loop {
            if self.stopped.get() || !self.engine.relay_urls().contains(&url) {
                self.engine.live_off(&url);
                return url;
            }
            if self.reconnects.get() != reconnects {
                reconnects = self.reconnects.get();
                self.engine.live_reset(&url);
            }
            let since = self.control.generation();
            let started = self.engine.wall.precise_ms();
            let step = match select(Box::pin(self.engine.live_turn(&url)), self.control.changed(since)).await {
                Either::Left((step, _)) => step,
                Either::Right(_) => continue,
            };
            let took = (self.engine.wall.precise_ms() - started).max(0.0) as u64;
            // A wait that came back at once and told nothing new is spaced out, longer while
            // such answers repeat; any other answer ends the run.
            let mut spaced = |told_nothing: bool| {
                if told_nothing && took < MIN_WAIT_SPACING_MS {
                    empty_answers = empty_answers.saturating_add(1);
                    wait_spacing_ms(empty_answers).saturating_sub(took)
                } else {
                    empty_answers = 0;
                    0
                }
            };
            let delay = match step {
                LiveStep::Notice { head, epoch } => {
                    let go_on = || !self.stopped.get();
                    let next = self.engine.live_catch_up(&url, head, epoch.as_deref(), &go_on).await;
                    self.after_pass().await;
                    match next {
                        Ok(LiveStep::Retry { after_ms }) => after_ms,
                        Ok(LiveStep::Stale) => spaced(true),
                        Ok(_) => spaced(false),
                        Err(_) => LOCAL_FAILURE_PAUSE_MS,
                    }
                }
                LiveStep::Quiet | LiveStep::Stale => spaced(true),
                LiveStep::Retry { after_ms } => after_ms,
                LiveStep::Unsupported => return url,
                LiveStep::Stop => {
                    self.engine.live_off(&url);
                    return url;
                }
            };
            if delay > 0 {
                self.pause(delay, since).await;
            }
        }
    }
}
