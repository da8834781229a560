use std::cmp::Ordering;

use crate::test;
use simplysync::protocol::hlc::{HLC_MAX_COUNTER, HLC_MAX_FUTURE_DRIFT_MS};
use simplysync::protocol::{compare_hlc, Hlc, HlcClock, HlcError};

const T0: u64 = 1_764_504_000_000;

#[test]
fn the_string_form_is_fixed_width_and_round_trips() {
    let h = Hlc { ms: T0, counter: 42, device_id: "devA".into() };
    assert_eq!(h.to_string(), "001764504000000-000042-devA");
    assert_eq!(Hlc::parse(&h.to_string()).unwrap(), h);
}

#[test]
fn the_string_form_pads_like_the_format_macro_and_never_truncates_a_larger_field() {
    let values = [0u64, 1, 9, 10, 99_999, 999_999, 1_000_000, T0, 999_999_999_999_999, 1_000_000_000_000_000, u64::MAX];
    for ms in values {
        for counter in [0u32, 7, 10, 99_999, HLC_MAX_COUNTER, 1_000_000, u32::MAX] {
            let h = Hlc { ms, counter, device_id: "d-_9".into() };
            assert_eq!(h.to_string(), format!("{ms:015}-{counter:06}-d-_9"));
            assert_eq!(h.to_text(), h.to_string());
        }
    }
}

#[test]
fn lexicographic_order_of_the_string_equals_hlc_order() {
    let mut hs = Vec::new();
    for ms in [0, 9, 10, T0, T0 + 1, 999_999_999_999_999] {
        for counter in [0, 1, 9, 10, HLC_MAX_COUNTER] {
            for dev in ["A", "B", "a", "a-", "a_", "z9", "zz"] {
                hs.push(Hlc { ms, counter, device_id: dev.into() });
            }
        }
    }
    for a in &hs {
        for b in &hs {
            assert_eq!(a.to_string().cmp(&b.to_string()), compare_hlc(a, b), "{a} vs {b}");
        }
    }
}

#[test]
fn malformed_hlc_strings_are_errors() {
    for bad in [
        "",
        "1-2-3",
        "00176450400000-000042-devA",
        "001764504000000-00004-devA",
        "001764504000000-000042-",
        "001764504000000-000042-dev A",
        "0017645040000x0-000042-devA",
    ] {
        assert!(matches!(Hlc::parse(bad), Err(HlcError::Malformed { .. })), "{bad:?}");
    }
}

#[test]
fn a_clock_never_goes_backwards_even_when_wall_time_does() {
    let mut c = HlcClock::new("devA").unwrap();
    let a = c.now(T0);
    let b = c.now(T0 - 10_000);
    let d = c.now(T0);
    assert!(a < b && b < d);
    assert_eq!(b.ms, T0);
    assert_eq!(b.counter, 1);
}

#[test]
fn a_counter_overflow_moves_to_the_next_millisecond() {
    let last = Hlc { ms: T0, counter: HLC_MAX_COUNTER, device_id: "devA".into() };
    let mut c = HlcClock::resume("devA", Some(&last)).unwrap();
    let next = c.now(T0);
    assert_eq!((next.ms, next.counter), (T0 + 1, 0));
    assert!(next > last);
}

#[test]
fn now_text_issues_what_now_issues_in_its_string_form() {
    let start = Hlc { ms: T0, counter: HLC_MAX_COUNTER - 1, device_id: "devA".into() };
    let (mut a, mut b) =
        (HlcClock::resume("devA", Some(&start)).unwrap(), HlcClock::resume("devA", Some(&start)).unwrap());
    for wall in [T0 - 5, T0, T0, T0 + 10, T0 + 10, T0 + 3] {
        assert_eq!(a.now_text(wall), b.now(wall).to_text());
    }
    assert_eq!(a.last(), b.last());
}

#[test]
fn observing_a_remote_time_makes_later_local_events_sort_after_it() {
    let mut c = HlcClock::new("devA").unwrap();
    let remote = Hlc { ms: T0 + 60_000, counter: 5, device_id: "devB".into() };
    c.observe(&remote, T0).unwrap();
    let mine = c.now(T0);
    assert_eq!(compare_hlc(&mine, &remote), Ordering::Greater);
    assert_eq!((mine.ms, mine.counter), (T0 + 60_000, 6));
}

#[test]
fn a_remote_time_beyond_five_minutes_is_refused_and_not_absorbed() {
    let mut c = HlcClock::new("devA").unwrap();
    let at_bound = Hlc { ms: T0 + HLC_MAX_FUTURE_DRIFT_MS, counter: 0, device_id: "devB".into() };
    assert!(c.observe(&at_bound, T0).is_ok());
    let mut c = HlcClock::new("devA").unwrap();
    let beyond = Hlc { ms: T0 + HLC_MAX_FUTURE_DRIFT_MS + 1, counter: 0, device_id: "devB".into() };
    assert!(
        matches!(c.observe(&beyond, T0), Err(HlcError::TooFarInFuture { ahead_ms, .. }) if ahead_ms == HLC_MAX_FUTURE_DRIFT_MS + 1)
    );
    assert_eq!(c.now(T0).ms, T0);
}

#[test]
fn invalid_device_ids_are_refused() {
    for bad in ["", "has space", "é", &"x".repeat(65)] {
        assert!(HlcClock::new(bad).is_err(), "{bad:?}");
    }
}
