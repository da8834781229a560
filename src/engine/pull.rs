//! Pull: pages of a relay's log after this device's cursor, each applied in one transaction
//! that also saves the page's cursor — one durable commit per page. The spec commits the cursor
//! after the page; committing both together keeps its guarantee (the cursor is never ahead of
//! the applied rows; a crash before the commit replays the page, harmlessly) at half the commits.
//!
//! A relay that misbehaves cannot hold the engine: a page's envelopes are parsed one by one
//! (a malformed one is quarantined `MALFORMED_ENVELOPE`, the rest apply); the loop ends with a
//! status error when the cursor repeats within a pass or goes backwards, or after more pages
//! than the relay's reported head could need; and a 404 is taken as "the relay lost this
//! owner" only when the body is the relay's JSON error, `/health` answers 200 and
//! `/v1/status` answers 404 too.

use std::collections::HashSet;
use std::rc::Rc;

use super::apply::{quarantine_reason, ApplyRun, Arrival, Outcome};
use super::events::{ChangeEvent, ChangeSource, Progress};
use super::io::{Openings, PageOpener};
use super::relay_api::{json_answer, PullAnswer, RelayApi, RelayFailure};
use super::sent_ahead::SentAhead;
use super::sync::{PassError, RelayPassReport, BATCH};
use super::Engine;
use crate::protocol::identity::sha256_base64url;
use crate::protocol::json_fields::FromJson;
use crate::protocol::json_parse::ListItem;
use crate::protocol::SyncEnvelope;
use crate::store::inbox::{self, HeldEvent, CLAIM_RUN, DEFERRED_CAP, QUARANTINE_CAP};
use crate::store::system;

/// Pages one pass takes from a relay at most (a million events at 1000 per page); the next
/// pass goes on from there (the report says `more`).
pub const MAX_PAGES_PER_PASS: u64 = 1000;
/// The most raw text kept of a malformed envelope in the quarantine.
const MAX_MALFORMED_KEPT: usize = 64 * 1024;

/// How a pull ended.
pub(crate) enum PullEnd {
    /// Caught up (or the relay has nothing for this owner yet).
    Done,
    /// The relay lost this owner's data: why.
    Wiped(String),
}

/// Pages a pull may take when the relay reports its head: twice what the first page implies,
/// plus slack. A relay serving more than that is looping or lying. (A pass also stops at
/// [`MAX_PAGES_PER_PASS`], and the next one continues.)
fn page_budget(head: u64, cursor: u64, first_page_len: usize) -> u64 {
    let per_page = first_page_len.max(1) as u64;
    let needed = head.saturating_sub(cursor).div_ceil(per_page);
    needed.saturating_mul(2).saturating_add(10)
}

/// The quarantine's record of `item`, received from `url`, which is not an envelope (`why`):
/// its text's start, filed under [`malformed_event_id`].
fn malformed(item: &ListItem<'_>, url: &str, why: &str) -> HeldEvent {
    HeldEvent {
        event_id: malformed_event_id(item),
        relay: url.to_owned(),
        detail: format!("not an envelope: {why}"),
        envelope_json: item.text.chars().take(MAX_MALFORMED_KEPT).collect(),
        reason: quarantine_reason::MALFORMED_ENVELOPE.into(),
        at: None,
    }
}

/// The event id to file a malformed envelope under: its `eventId` if that is a usable string,
/// else a digest of its text.
fn malformed_event_id(item: &ListItem<'_>) -> String {
    let members = item.members.as_deref().unwrap_or_default();
    let id = members.iter().rev().find(|(k, _)| k.as_wtf8() == b"eventId").and_then(|(_, v)| v.as_str());
    match id {
        Some(id) if !id.is_empty() && id.len() <= 256 => id.to_owned(),
        _ => format!("malformed:{}", &sha256_base64url(item.text.as_bytes())[..22]),
    }
}

fn cursor_failure(code: &str, message: String) -> PassError {
    RelayFailure::detected(200, code, message).into()
}

/// A pulled page's answer, with its envelopes' openings when a [`PageOpener`] fetched it.
type Fetched = (PullAnswer, Option<Openings>);

/// A pull request sent ahead, before the current page is applied; awaited when the loop gets
/// to it, dropped (aborted) otherwise. Sent through the engine's page opener if it has one:
/// the page is then fetched and decrypted on the opener's thread during the apply (dropped,
/// that work finishes there unread).
struct Ahead<'a> {
    after: String,
    limit: u32,
    request: SentAhead<'a, Result<Fetched, RelayFailure>>,
}

impl<'a> Ahead<'a> {
    async fn start(api: &'a RelayApi<'a>, opener: Option<Rc<dyn PageOpener>>, after: String, limit: u32) -> Ahead<'a> {
        let cursor = after.clone();
        let request = SentAhead::start(async move {
            if let Some(opener) = opener {
                if let Some(fetched) = api.pull_opened(opener.as_ref(), &cursor, limit).await? {
                    return Ok(fetched);
                }
            }
            Ok((api.pull(&cursor, limit).await?, None))
        })
        .await;
        Ahead { after, limit, request }
    }

    async fn finish(self) -> Result<Fetched, RelayFailure> {
        self.request.finish().await
    }
}

impl Engine {
    pub(crate) async fn pull_from(&self, url: &str, report: &mut RelayPassReport) -> Result<PullEnd, PassError> {
        let identity = self.identity();
        let api = self.api(url, &identity);
        let opener = self.opener.borrow().clone();
        let cursor_key = format!("cursor:{url}");
        let epoch_key = format!("epoch:{url}");
        let mut cursor = self.meta(&cursor_key)?.unwrap_or_default();
        let stored_epoch = self.meta(&epoch_key)?;
        let mut visited: HashSet<String> = HashSet::from([cursor.clone()]);
        // Pages the relay's own head allows (None: it reports no head).
        let mut budget: Option<u64> = None;
        let mut page_limit = BATCH;
        let mut progress = Progress {
            relay: url.to_owned(),
            pages: 0,
            events_received: 0,
            events_applied: 0,
            bytes: 0,
            head_seq: None,
            cursor: cursor.clone(),
            done: false,
        };
        let clock = self.wall.clone();
        // The next page's request, sent before the current page is applied (in the browser its
        // network time then overlaps the apply; a native current-thread runtime only sends it
        // once the apply yields); used only if the loop asks for exactly that page.
        let mut ahead: Option<Ahead<'_>> = None;
        loop {
            let t0 = clock.precise_ms();
            // (A request sent ahead for another page is dropped, so aborted, right here.)
            let fetched = match ahead.take().filter(|a| a.after == cursor && a.limit == page_limit) {
                Some(a) => match a.finish().await {
                    // No answer to the request sent ahead: its deadline ran during the apply
                    // too, so it gets one fresh try before the pull counts as failed.
                    Err(RelayFailure::Network(_)) => api.pull(&cursor, page_limit).await.map(|a| (a, None)),
                    answer => answer,
                },
                None => api.pull(&cursor, page_limit).await.map(|a| (a, None)),
            };
            let (answer, openings) = match fetched {
                // A page too large to read (large events, a relay without a byte cap): ask
                // for fewer events.
                Err(f) if f.code() == Some("response_too_large") && page_limit > 1 => {
                    page_limit /= 2;
                    continue;
                }
                other => other?,
            };
            let t1 = clock.precise_ms();
            report.timings.http_ms += t1 - t0;
            let resp = match answer {
                PullAnswer::NotFound(resp) => return self.unknown_owner(&api, &cursor, &resp).await,
                PullAnswer::Page(resp) => resp,
            };
            let mut page = PullAnswer::parse(&resp)?;
            report.timings.parse_ms += clock.precise_ms() - t1;
            // Openings of another page's length are not this page's: the engine opens it all.
            let openings = openings.filter(|o| o.len() == page.events.len());
            if let (Some(stored), Some(epoch)) = (&stored_epoch, &page.epoch) {
                if stored != epoch {
                    return Ok(PullEnd::Wiped(format!("the relay's database changed (epoch {stored} → {epoch})")));
                }
            }
            let numeric = cursor.parse::<u64>().ok();
            if let (Some(head), Some(c)) = (page.head_seq, numeric) {
                if head < c {
                    return Ok(PullEnd::Wiped(format!(
                        "the relay's head seq {head} is behind this device's cursor {c}"
                    )));
                }
            }
            if progress.pages == 0 {
                if let Some(head) = page.head_seq {
                    budget = Some(page_budget(head, numeric.unwrap_or(0), page.events.len()));
                }
            }
            let held = inbox::deferred_count(&self.db.borrow(), url)?;
            if held >= DEFERRED_CAP {
                return Err(cursor_failure(
                    "deferred_full",
                    format!(
                        "{held} events from this relay wait for a newer app version or their time; pulling \
                         waits too (the relay keeps the rest) until fewer are held"
                    ),
                ));
            }
            // A cursor that does not move forward is never saved; the page is still applied
            // (replaying it is harmless) and the pull stops with the reason.
            let next = page.next_cursor.clone();
            let cursor_error = match (numeric, next.parse::<u64>()) {
                (Some(c), Ok(n)) if n < c => Some(cursor_failure(
                    "relay_cursor_backwards",
                    format!("the relay's cursor went backwards ({c} → {n}); the pull stopped"),
                )),
                _ if !page.events.is_empty() && visited.contains(&next) => Some(cursor_failure(
                    "relay_cursor_loop",
                    format!("the relay's cursor {next:?} came back within one pass; the pull stopped"),
                )),
                _ => None,
            };
            let at_head = match (page.head_seq, next.parse::<u64>()) {
                (Some(h), Ok(c)) => c >= h,
                _ => false,
            };
            let last = page.events.is_empty() || next == cursor || at_head;
            let pages_after_this = progress.pages + 1;
            if cursor_error.is_none()
                && !last
                && pages_after_this < MAX_PAGES_PER_PASS
                && budget.is_none_or(|b| pages_after_this < b)
            {
                ahead = Some(Ahead::start(&api, opener.clone(), next.clone(), page_limit).await);
            }
            let now = self.now();
            let t_apply = clock.precise_ms();
            self.decrypt_ms.set(0.0);
            self.classified.set(0);
            self.opened_used.set(0);
            let (changes, stats) = self.write(|tx| {
                let (mut changes, mut stats) = (Vec::new(), [0u64; 4]);
                let mut run = ApplyRun::new(tx)?;
                let mut envelopes = Vec::with_capacity(CLAIM_RUN);
                for (c, chunk) in page.events.chunks_mut(CLAIM_RUN).enumerate() {
                    envelopes.extend(chunk.iter_mut().map(|item| match &mut item.members {
                        Ok(members) => SyncEnvelope::from_members(members, "envelope"),
                        Err(value) => SyncEnvelope::from_json(value, "envelope"),
                    }));
                    // The chunk's envelopes claimed in one statement, as far as it goes.
                    let ids: Vec<&str> = envelopes.iter().flatten().map(|e| e.event_id.as_str()).collect();
                    let mut claimed = run.claim_run(&ids)?;
                    for (k, (item, read)) in chunk.iter().zip(envelopes.drain(..)).enumerate() {
                        let opened = openings.as_ref().and_then(|o| o[c * CLAIM_RUN + k].as_deref());
                        let outcome = match read {
                            Ok(env) => {
                                let arrival = Arrival::Pulled { opened, claimed: claimed > 0 };
                                claimed = claimed.saturating_sub(1);
                                self.process(&mut run, &identity, url, &env, arrival, now)?
                            }
                            Err(e) => {
                                inbox::quarantine(tx, &malformed(item, url, &e.to_string()), now)?;
                                Outcome::Quarantined
                            }
                        };
                        match outcome {
                            Outcome::Applied(c) => changes.push(c),
                            Outcome::Deferred => stats[1] += 1,
                            Outcome::Quarantined => stats[2] += 1,
                            Outcome::OwnEcho => stats[3] += 1,
                            Outcome::Stale | Outcome::Duplicate | Outcome::Staged => {}
                        }
                    }
                }
                changes.extend(self.finish_run(&mut run)?);
                stats[0] = changes.len() as u64;
                if stats[2] > 0 {
                    let dropped = inbox::cap_quarantine(tx, url, QUARANTINE_CAP)?;
                    if dropped > 0 {
                        let key = format!("quarantine_dropped:{url}");
                        let before: u64 = system::meta_get(tx, &key)?.and_then(|n| n.parse().ok()).unwrap_or(0);
                        system::meta_set(tx, &key, &(before + dropped).to_string())?;
                    }
                }
                self.persist_clock(tx)?;
                // The cursor commits with the page it follows (one durable commit per page): it
                // is never ahead of what was applied, and a crash before the commit replays it.
                if cursor_error.is_none() {
                    system::meta_set(tx, &cursor_key, &next)?;
                    if let Some(e) = &page.epoch {
                        system::meta_set(tx, &epoch_key, e)?;
                    }
                }
                Ok((changes, stats))
            })?;
            let decrypt = super::apply::sampled_checks_ms(self.decrypt_ms.get(), self.classified.get());
            report.timings.decrypt_ms += decrypt;
            // (The checks' time is sampled: on a short page it may exceed the page's whole.)
            report.timings.apply_ms += (clock.precise_ms() - t_apply - decrypt).max(0.0);
            report.timings.opened_ahead += self.opened_used.get();
            report.received += page.events.len() as u64;
            report.applied += stats[0];
            report.deferred += stats[1];
            report.quarantined += stats[2];
            report.own_echoes += stats[3];
            self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Remote, changes));
            if let Some(e) = cursor_error {
                return Err(e);
            }
            progress.pages += 1;
            progress.events_received += page.events.len() as u64;
            progress.events_applied += stats[0];
            progress.bytes += resp.body.len() as u64;
            progress.head_seq = page.head_seq;
            progress.cursor = next.clone();
            self.listeners.emit_progress(&progress);
            // Relays clamp `limit` (MAX_EVENTS_PER_PULL), so a short page does not mean the end:
            // continue until an empty page, a cursor that stops moving, or the reported head.
            if last {
                // Caught up with the relay's snapshot: its head may lie past the last event
                // that still exists (the newest were compacted away); live waits start there.
                if let Some(head) = page.head_seq {
                    self.with_relay(url, |r| r.live.pulled_head = Some(head));
                }
                break;
            }
            if budget.is_some_and(|b| progress.pages >= b) {
                return Err(cursor_failure(
                    "pull_incomplete",
                    format!(
                        "the relay served {} pages, more than its head {:?} needs; stopped (the next pass \
                         continues from the last page applied)",
                        progress.pages, page.head_seq
                    ),
                ));
            }
            if progress.pages >= MAX_PAGES_PER_PASS || self.now() >= report.deadline_ms {
                // Enough for one pass: the cursor is saved, the next pass goes on from it.
                report.more = true;
                break;
            }
            visited.insert(next.clone());
            cursor = next;
        }
        progress.done = true;
        self.listeners.emit_progress(&progress);
        Ok(PullEnd::Done)
    }

    /// A pull answered 404. With no cursor yet it means "nothing pushed for this owner" (the
    /// spec), whatever its body; with one, the relay lost the owner — but only if the answer is
    /// a relay's JSON (any object: the spec fixes no error body, and a proxy's 404 is a page) and
    /// the relay confirms it (`/health` answering as a relay, `/v1/status` a JSON 404 too).
    /// Anything else is a failure in the status, never a re-upload.
    async fn unknown_owner(
        &self,
        api: &RelayApi<'_>,
        cursor: &str,
        resp: &super::io::HttpResponse,
    ) -> Result<PullEnd, PassError> {
        if cursor.is_empty() {
            return Ok(PullEnd::Done);
        }
        if !json_answer(resp) {
            return Err(RelayFailure::detected(
                404,
                "foreign_404",
                "the pull answered 404 with no JSON object (a proxy's page, or a wrong base path?); nothing \
                 was re-uploaded"
                    .into(),
            )
            .into());
        }
        let healthy = api.health().await?;
        let status = api.status_raw().await?;
        if healthy && status.status == 404 && json_answer(&status) {
            return Ok(PullEnd::Wiped(
                "the relay no longer knows this owner (404 after pulling, confirmed by /health and /v1/status)".into(),
            ));
        }
        Err(RelayFailure::detected(
            404,
            "unconfirmed_404",
            format!(
                "the pull answered 404 but /health {} and /v1/status answered {}; not treated as lost data",
                if healthy { "is fine" } else { "failed" },
                status.status
            ),
        )
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_budget_follows_the_reported_head() {
        assert_eq!(page_budget(5000, 0, 1000), 20);
        assert_eq!(page_budget(5000, 4500, 1000), 12);
        assert_eq!(page_budget(10, 0, 0), 30);
        assert_eq!(page_budget(0, 0, 0), 10);
        assert_eq!(page_budget(u64::MAX, 0, 1), u64::MAX, "saturates; the per-pass cap bounds it");
    }

    #[test]
    fn a_malformed_envelope_is_filed_under_its_event_id_or_a_digest() {
        let malformed_event_id = |text: &str| {
            let page = format!(r#"{{"events": [{text}]}}"#);
            let (_, items) = crate::protocol::json_parse::parse_listing(page.as_bytes(), "events").unwrap();
            let item = &items.unwrap()[0];
            assert_eq!(item.text, text, "the item's text as it came");
            super::malformed_event_id(item)
        };
        assert_eq!(malformed_event_id(r#"{"eventId":"e1","version":"x"}"#), "e1");
        assert_eq!(malformed_event_id(r#"{"eventId":"e1", "eventId": "e2"}"#), "e2", "the last of a repeated key");
        assert_eq!(malformed_event_id(r#"{ "eventId" : "e\u0031" }"#), "e1", "escapes decoded");
        let a = malformed_event_id(r#"{"eventId":5}"#);
        assert!(a.starts_with("malformed:") && a.len() == "malformed:".len() + 22, "{a}");
        assert_ne!(a, malformed_event_id(r#"{"eventId":6}"#));
        assert!(malformed_event_id("[1,2]").starts_with("malformed:"));
        // An id must be usable: not empty, at most 256 bytes.
        assert!(malformed_event_id(r#"{"eventId":""}"#).starts_with("malformed:"));
        let long = "e".repeat(257);
        assert!(malformed_event_id(&format!(r#"{{"eventId":"{long}"}}"#)).starts_with("malformed:"));
        let fits = "e".repeat(256);
        assert_eq!(malformed_event_id(&format!(r#"{{"eventId":"{fits}"}}"#)), fits);
    }
}
