//! Per-client-address token buckets: new owner registrations and failed authentications.
//! Each address gets `per_minute` tokens a minute, up to a burst of 3×; an address that has
//! none left is answered 429 with `Retry-After`. The table is bounded: full, it forgets the
//! addresses whose buckets refilled (they hold no state worth keeping), then the oldest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses tracked at most.
const MAX_ADDRESSES: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One kind of limit over all client addresses.
#[derive(Debug)]
pub struct RateLimit {
    per_minute: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl RateLimit {
    /// `per_minute` tokens a minute per address, a burst of 3×.
    pub fn new(per_minute: u32) -> RateLimit {
        let per_minute = f64::from(per_minute.max(1));
        RateLimit { per_minute, burst: per_minute * 3.0, buckets: Mutex::new(HashMap::new()) }
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let minutes = now.saturating_duration_since(b.at).as_secs_f64() / 60.0;
        b.tokens = (b.tokens + minutes * self.per_minute).min(self.burst);
        b.at = now;
    }

    /// `None` if `addr` has a token left now; else how long until it has one.
    pub fn check(&self, addr: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = map.get_mut(&addr)?;
        self.refill(b, now);
        (b.tokens < 1.0).then(|| Duration::from_secs_f64(((1.0 - b.tokens) / self.per_minute * 60.0).max(1.0)))
    }

    /// Uses a token of `addr` (it may go negative: a burst of failures costs its time).
    pub fn spend(&self, addr: IpAddr) {
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            let burst = self.burst;
            let per_minute = self.per_minute;
            map.retain(|_, b| {
                let minutes = now.saturating_duration_since(b.at).as_secs_f64() / 60.0;
                b.tokens + minutes * per_minute < burst
            });
            if map.len() >= MAX_ADDRESSES {
                if let Some(oldest) = map.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| *k) {
                    map.remove(&oldest);
                }
            }
        }
        let b = map.entry(addr).or_insert(Bucket { tokens: self.burst, at: now });
        self.refill(b, now);
        b.tokens = (b.tokens - 1.0).max(-self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_burst_then_waits_while_others_are_unaffected() {
        let limit = RateLimit::new(2); // burst 6
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..6 {
            assert_eq!(limit.check(a), None);
            limit.spend(a);
        }
        let wait = limit.check(a).expect("out of tokens");
        assert!(wait >= Duration::from_secs(1) && wait <= Duration::from_secs(30), "{wait:?}");
        assert_eq!(limit.check(b), None, "another address is not limited");
    }
}
