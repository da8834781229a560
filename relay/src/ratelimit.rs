//! Per-client-address token buckets: new owner registrations and failed authentications (each
//! address gets `per_minute` tokens a minute, up to a burst of 3×), and the bytes an address
//! writes (`CLIENT_BYTES_PER_HOUR`, an hour's worth at once: one token per byte). An address
//! that has none left is answered 429 with `Retry-After`. The table is bounded: full, it forgets the
//! addresses whose buckets refilled (they hold no state worth keeping), then the oldest.
//!
//! An IPv6 client is keyed by its /64: one subscriber gets a whole /64 and can pick any of its
//! 2^64 addresses, so a per-address bucket would not limit it at all. (An IPv4-mapped address
//! counts as its IPv4 address.) A registration takes its token when it starts
//! ([`RateLimit::reserve`]), so concurrent attempts from one client cannot all pass the check.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bucket key of a client address: IPv4 as is, IPv6 by its /64.
pub fn client_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Addresses tracked at most.
const MAX_ADDRESSES: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Tokens held by reservations in progress.
    pending: u32,
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

    /// A byte budget: `per_hour` bytes an hour, all of them at once if unspent.
    pub fn bytes_per_hour(per_hour: u64) -> RateLimit {
        let per_hour = (per_hour.max(1)) as f64;
        RateLimit { per_minute: per_hour / 60.0, burst: per_hour, buckets: Mutex::new(HashMap::new()) }
    }

    /// `None` if `addr` has a token left now; else how long until it has one.
    pub fn check(&self, addr: IpAddr) -> Option<Duration> {
        let addr = client_key(addr);
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = map.get_mut(&addr)?;
        self.refill(b, now);
        (b.tokens < 1.0).then(|| Duration::from_secs_f64(((1.0 - b.tokens) / self.per_minute * 60.0).max(1.0)))
    }

    /// Uses a token of `addr` (it may go negative: a burst of failures costs its time).
    pub fn spend(&self, addr: IpAddr) {
        self.spend_n(addr, 1);
    }

    /// Uses `n` tokens of `addr` (a byte budget: the bytes of a body that was let in while the
    /// budget had any left; it may go negative by that much, at most one burst).
    pub fn spend_n(&self, addr: IpAddr, n: u64) {
        self.with_bucket(client_key(addr), |b| b.tokens = (b.tokens - n as f64).max(-self.burst));
    }

    /// Runs `f` on `key`'s bucket, refilled to now (made, room made for it, if new).
    fn with_bucket<T>(&self, key: IpAddr, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        self.make_room(&mut map, key, now);
        let b = map.entry(key).or_insert(Bucket { tokens: self.burst, at: now, pending: 0 });
        self.refill(b, now);
        f(b)
    }

    /// Takes a token of `addr` for an attempt whose outcome is not known yet, in one step with
    /// the check: None if it has none to spare (counting other attempts in progress). The
    /// token is spent if the attempt [`Reservation::commit`]s, returned if it is dropped.
    pub fn reserve(self: &Arc<Self>, addr: IpAddr) -> Option<Reservation> {
        let addr = client_key(addr);
        let spare = self.with_bucket(addr, |b| {
            let spare = b.tokens - f64::from(b.pending) >= 1.0;
            b.pending += u32::from(spare);
            spare
        });
        spare.then(|| Reservation { limit: self.clone(), addr, spent: false })
    }

    /// Makes room for `addr` in a full table.
    fn make_room(&self, map: &mut HashMap<IpAddr, Bucket>, addr: IpAddr, now: Instant) {
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            let burst = self.burst;
            let per_minute = self.per_minute;
            map.retain(|_, b| {
                let minutes = now.saturating_duration_since(b.at).as_secs_f64() / 60.0;
                b.pending > 0 || b.tokens + minutes * per_minute < burst
            });
            if map.len() >= MAX_ADDRESSES {
                // Never a bucket with a reservation in progress (its settling would count
                // against a newcomer's).
                if let Some(oldest) =
                    map.iter().filter(|(_, b)| b.pending == 0).min_by_key(|(_, b)| b.at).map(|(k, _)| *k)
                {
                    map.remove(&oldest);
                }
            }
        }
    }

    /// Ends a reservation: its token spent, or handed back.
    fn settle(&self, addr: IpAddr, spend: bool) {
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = map.entry(addr).or_insert(Bucket { tokens: self.burst, at: now, pending: 1 });
        b.pending = b.pending.saturating_sub(1);
        if spend {
            self.refill(b, now);
            b.tokens = (b.tokens - 1.0).max(-self.burst);
        }
    }
}

/// A token taken by [`RateLimit::reserve`]: spent by [`Reservation::commit`], returned when
/// dropped uncommitted.
#[derive(Debug)]
pub struct Reservation {
    limit: Arc<RateLimit>,
    addr: IpAddr,
    spent: bool,
}

impl Reservation {
    /// The attempt happened: the token is spent.
    pub fn commit(mut self) {
        self.spent = true;
        self.limit.settle(self.addr, true);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.spent {
            self.limit.settle(self.addr, false);
        }
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

    #[test]
    fn an_ipv6_client_is_limited_by_its_64_and_a_mapped_ipv4_address_by_that_address() {
        let limit = RateLimit::new(1); // burst 3
        for n in 0..3u16 {
            let addr: IpAddr = format!("2001:db8:1:2:{n:x}::{n:x}").parse().unwrap();
            limit.spend(addr);
        }
        assert!(limit.check("2001:db8:1:2:ffff::1".parse().unwrap()).is_some(), "the whole /64 shares one bucket");
        assert_eq!(limit.check("2001:db8:1:3::1".parse().unwrap()), None, "the next /64 is another client");
        for _ in 0..3 {
            limit.spend("::ffff:10.1.2.3".parse().unwrap());
        }
        assert!(limit.check("10.1.2.3".parse().unwrap()).is_some());
    }

    #[test]
    fn a_byte_budget_lets_an_hours_worth_through_at_once_then_refuses_until_it_refills() {
        let limit = RateLimit::bytes_per_hour(3600 * 1000); // 1000 bytes a second
        let a: IpAddr = "10.0.0.5".parse().unwrap();
        limit.spend_n(a, 3600 * 1000 - 1);
        assert_eq!(limit.check(a), None, "a byte is left");
        limit.spend_n(a, 8 * 1000); // the body that was let in with a byte left
        let wait = limit.check(a).expect("spent");
        assert!(wait >= Duration::from_millis(7900) && wait <= Duration::from_secs(9), "{wait:?}");
        assert_eq!(limit.check("10.0.0.6".parse().unwrap()), None, "another address has its own budget");
    }

    #[test]
    fn reservations_take_their_token_when_they_start_and_return_it_when_they_do_not_happen() {
        let limit = Arc::new(RateLimit::new(1)); // burst 3
        let a: IpAddr = "10.0.0.9".parse().unwrap();
        let held: Vec<Reservation> = (0..3).map(|_| limit.reserve(a).expect("a token")).collect();
        assert!(limit.reserve(a).is_none(), "three attempts in progress hold all three tokens");
        drop(held);
        let again: Vec<Reservation> = (0..3).map(|_| limit.reserve(a).expect("returned")).collect();
        for r in again {
            r.commit();
        }
        assert!(limit.reserve(a).is_none() && limit.check(a).is_some(), "spent");
    }
}
