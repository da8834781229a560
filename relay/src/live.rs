//! Live notices: waiters on an owner's head seq (`GET /v1/events/wait`, a long-poll).
//!
//! A notice only says "this owner's log moved past your cursor"; devices still pull with the
//! normal endpoint. Pushes publish the owner's new head here (in-process), and with the
//! PostgreSQL backend every process also publishes what other processes committed (LISTEN /
//! NOTIFY). Bounded: at most `max_total` waiters in the process and `max_per_owner` per owner;
//! [`Live::close`] answers every waiter at shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Why a wait could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitRefused {
    /// The process holds its maximum of waiters.
    Full,
    /// This owner holds its maximum of waiters.
    OwnerFull,
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The owner's head moved past the cursor: the new head.
    Moved(u64),
    /// Nothing happened within the time asked for.
    TimedOut,
    /// The relay is shutting down.
    Closing,
}

struct Channel {
    head: watch::Sender<u64>,
    waiters: usize,
}

/// The waiters of one relay process.
pub struct Live {
    owners: Mutex<HashMap<String, Channel>>,
    total: Mutex<usize>,
    max_total: usize,
    max_per_owner: usize,
    closing: watch::Sender<bool>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").field("max_total", &self.max_total).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One registered waiter; unregisters when dropped.
pub struct Waiter {
    live: Arc<Live>,
    owner: String,
    head: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // Same lock order as `subscribe`: the total, then the owners.
        let mut total = lock(&self.live.total);
        let mut owners = lock(&self.live.owners);
        if let Some(c) = owners.get_mut(&self.owner) {
            c.waiters -= 1;
            if c.waiters == 0 {
                owners.remove(&self.owner);
            }
        }
        *total -= 1;
    }
}

impl Waiter {
    /// Waits until the owner's head passes `after` (as published), `timeout` passes, or the
    /// relay closes.
    pub async fn wait(mut self, after: u64, timeout: Duration) -> Woken {
        let moved = async {
            match self.head.wait_for(|h| *h > after).await {
                Ok(h) => Woken::Moved(*h),
                Err(_) => Woken::Closing,
            }
        };
        let closing = async {
            let _ = self.closing.wait_for(|c| *c).await;
            Woken::Closing
        };
        tokio::select! {
            w = moved => w,
            w = closing => w,
            () = tokio::time::sleep(timeout) => Woken::TimedOut,
        }
    }
}

impl Live {
    /// At most `max_total` waiters, `max_per_owner` for one owner.
    pub fn new(max_total: usize, max_per_owner: usize) -> Arc<Live> {
        Arc::new(Live {
            owners: Mutex::new(HashMap::new()),
            total: Mutex::new(0),
            max_total,
            max_per_owner,
            closing: watch::channel(false).0,
        })
    }

    /// Whether live notices are on (`LIVE_MAX_WAITERS` and `LIVE_MAX_WAITERS_PER_OWNER` above
    /// 0): off, `/health` does not advertise the wait endpoint and it answers 404.
    pub fn enabled(&self) -> bool {
        self.max_total > 0 && self.max_per_owner > 0
    }

    /// Registers a waiter for `owner` — before the caller reads the head from the database, so
    /// a push committed in between is not missed.
    pub fn subscribe(self: &Arc<Live>, owner: &str) -> Result<Waiter, WaitRefused> {
        let mut total = lock(&self.total);
        if *total >= self.max_total {
            return Err(WaitRefused::Full);
        }
        let mut owners = lock(&self.owners);
        let channel =
            owners.entry(owner.to_owned()).or_insert_with(|| Channel { head: watch::channel(0).0, waiters: 0 });
        if channel.waiters >= self.max_per_owner {
            return Err(WaitRefused::OwnerFull);
        }
        channel.waiters += 1;
        *total += 1;
        Ok(Waiter {
            live: self.clone(),
            owner: owner.to_owned(),
            head: channel.head.subscribe(),
            closing: self.closing.subscribe(),
        })
    }

    /// The owner's head is now `head` (a push committed): wakes its waiters past it.
    pub fn publish(&self, owner: &str, head: u64) {
        if let Some(c) = lock(&self.owners).get(owner) {
            c.head.send_if_modified(|h| {
                let moved = head > *h;
                if moved {
                    *h = head;
                }
                moved
            });
        }
    }

    /// Waiters in this process now.
    pub fn waiting(&self) -> usize {
        *lock(&self.total)
    }

    /// Answers every waiter (shutdown) and refuses no one afterwards: new waits end at once.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_publish_past_the_cursor_wakes_and_one_at_or_below_does_not() {
        let live = Live::new(10, 2);
        let w = live.subscribe("o").unwrap();
        let task = tokio::spawn(w.wait(5, Duration::from_secs(5)));
        tokio::task::yield_now().await;
        live.publish("o", 5);
        live.publish("other", 9);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!task.is_finished());
        assert_eq!(live.waiting(), 1);
        live.publish("o", 6);
        assert_eq!(task.await.unwrap(), Woken::Moved(6));
        assert_eq!(live.waiting(), 0, "a finished waiter unregisters");
    }

    #[tokio::test]
    async fn an_owner_s_places_come_back_and_its_remaining_waiters_still_hear_pushes() {
        let live = Live::new(10, 2);
        for _ in 0..5 {
            drop(live.subscribe("o").unwrap());
        }
        let (a, b) = (live.subscribe("o").unwrap(), live.subscribe("o").unwrap());
        drop(a);
        let task = tokio::spawn(b.wait(0, Duration::from_secs(5)));
        tokio::task::yield_now().await;
        live.publish("o", 1);
        assert_eq!(task.await.unwrap(), Woken::Moved(1), "one waiter leaving keeps the others' channel");
    }

    #[tokio::test]
    async fn limits_hold_and_closing_answers_everyone() {
        let live = Live::new(3, 2);
        let a = live.subscribe("o").unwrap();
        let _b = live.subscribe("o").unwrap();
        assert_eq!(live.subscribe("o").err(), Some(WaitRefused::OwnerFull));
        let _c = live.subscribe("p").unwrap();
        assert_eq!(live.subscribe("q").err(), Some(WaitRefused::Full));
        let task = tokio::spawn(a.wait(0, Duration::from_secs(30)));
        live.close();
        assert_eq!(task.await.unwrap(), Woken::Closing);
        assert_eq!(live.subscribe("r").unwrap().wait(0, Duration::from_secs(30)).await, Woken::Closing);
    }

    #[tokio::test]
    async fn nothing_happening_times_out() {
        let live = Live::new(1, 1);
        let w = live.subscribe("o").unwrap();
        assert_eq!(w.wait(0, Duration::from_millis(20)).await, Woken::TimedOut);
    }
}
