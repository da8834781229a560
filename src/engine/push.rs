//! Push: sealed outbox events a relay has not acknowledged go out oldest first, at most
//! [`BATCH`] events and [`MAX_PUSH_BYTES`] per request, and are recorded as acknowledged only
//! when the relay's answer accounts for every one of them.
//!
//! A backlog goes out with two pushes in flight: once the relay accepted a push in this pass,
//! the next batch is sent while the previous one is answered, so the relay parses and checks
//! one push while it commits the other, and a device far from its relay waits one round trip
//! per two batches. Each push is still acknowledged on its own answer, in order. The pass's
//! first push goes alone (it may register the owner, and it finds the relay's limits).
//!
//! A relay with smaller limits answers 413: the batch is halved; a single event it still
//! refuses is *set aside* for that relay (kept in the outbox, with the reason in the status)
//! and the push goes on with the next one. After a 413 the pushes go one at a time again until
//! one is accepted. `413 quota_exceeded`, and an answer whose counts do not add up, end the
//! push (the pass still pulls); a push sent ahead is then dropped unacknowledged, and its
//! events go again in a later pass (the relay counts them as duplicates if it stored them).
//! A push sent ahead that fails itself is sent again alone before its failure counts, and the
//! rest of the pass sends one push at a time.

use super::relay_api::{RelayApi, RelayFailure};
use super::sent_ahead::SentAhead;
use super::sync::{PassError, RelayPassReport, BATCH, MAX_PUSH_BYTES};
use super::Engine;
use crate::protocol::wire::PushResponse;
use crate::store::outbox::{self, Outgoing};
use crate::store::set_aside::{self, Kind};
use crate::store::system;

/// Why a push is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// The next batch, once the previous push was answered.
    Next,
    /// The next batch, before the previous push was answered.
    Ahead,
    /// A failed push sent ahead, again and alone.
    Again,
}

/// Which events a push takes: at most `limit`, those after event id `after` (the outbox's order).
#[derive(Debug, Clone, Copy)]
struct Take<'t> {
    after: &'t str,
    limit: u32,
}

/// A push on its way: its batch and the relay's answer to come.
struct Push<'a> {
    request: SentAhead<'a, (Vec<Outgoing>, Result<PushResponse, RelayFailure>)>,
    /// Event id of its last event (the next batch starts after it).
    last_id: String,
    /// Sent while an earlier push was unanswered.
    ahead: bool,
}

impl Engine {
    /// Uploads missing blob chunks, then pushes unacknowledged events.
    pub(crate) async fn push_phase(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        self.upload_blob_chunks(url, report).await?;
        self.push_events(url, report).await
    }

    /// Sends the next batch after event id `after`; `None` when there is none, or when the
    /// relay's time in this pass is up (then, for a push that is not sent ahead, the report
    /// says `more`). A failed push sent ahead is sent again even then: it was already started.
    async fn send_push<'a>(
        &self,
        api: &'a RelayApi<'a>,
        url: &str,
        take: Take<'_>,
        kind: Sending,
        sent: &mut u32,
        report: &mut RelayPassReport,
    ) -> Result<Option<Push<'a>>, PassError> {
        let batch = outbox::unacked_batch(&self.db.borrow(), url, take.after, take.limit, MAX_PUSH_BYTES)?;
        let Some(last_id) = batch.last().map(|o| o.event_id.clone()) else { return Ok(None) };
        if kind != Sending::Again && *sent > 0 && self.now() >= report.deadline_ms {
            // This relay's time in the pass is up: the rest goes in the next pass (said once
            // the pushes in flight were answered).
            if kind == Sending::Next {
                report.more = true;
            }
            return Ok(None);
        }
        *sent += 1;
        let request = SentAhead::start(async move {
            let answer = api.push(batch.iter().map(|o| o.envelope.as_str())).await;
            (batch, answer)
        })
        .await;
        Ok(Some(Push { request, last_id, ahead: kind == Sending::Ahead }))
    }

    async fn push_events(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        let identity = self.identity();
        let api = self.api(url, &identity);
        // `after`: the last event id the relay answered for (or that was set aside).
        let (mut limit, mut after, mut sent) = (BATCH, String::new(), 0u32);
        let mut next: Option<Push<'_>> = None;
        // Whether the relay accepted a push since this pass began or since its last 413.
        let mut accepting = false;
        // Set when a push sent ahead failed: the rest of the pass goes one push at a time, so
        // a relay that cannot take two at once (at its limit of requests in flight, or slower
        // than the request's deadline for two) is not sent every other push twice.
        let mut one_at_a_time = false;
        // The next push resends a failed push sent ahead (it goes even past the pass's time).
        let mut again = false;
        loop {
            let current = match next.take() {
                Some(push) => push,
                None => {
                    let kind = if std::mem::take(&mut again) { Sending::Again } else { Sending::Next };
                    match self.send_push(&api, url, Take { after: &after, limit }, kind, &mut sent, report).await? {
                        Some(push) => push,
                        None => return Ok(()),
                    }
                }
            };
            if accepting && !one_at_a_time {
                // The next batch goes now, while this one is answered.
                next = self
                    .send_push(&api, url, Take { after: &current.last_id, limit }, Sending::Ahead, &mut sent, report)
                    .await?;
            }
            let ahead = current.ahead;
            let (batch, answer) = current.request.finish().await;
            match answer {
                Ok(resp) => {
                    let count = batch.len() as u64;
                    if resp.accepted.checked_add(resp.duplicate) != Some(count) {
                        return Err(RelayFailure::detected(
                            200,
                            "push_mismatch",
                            format!(
                                "pushed {count} events but the relay counted {} accepted + {} duplicate; \
                                 none of them is marked delivered (they are pushed again later)",
                                resp.accepted, resp.duplicate
                            ),
                        )
                        .into());
                    }
                    if let Some(last) = batch.last() {
                        after.clone_from(&last.event_id);
                    }
                    let ids: Vec<String> = batch.into_iter().map(|o| o.event_id).collect();
                    let now = self.now();
                    self.write(|tx| {
                        outbox::record_acks(tx, url, &ids, now)?;
                        system::meta_set(tx, &format!("push:{url}"), &now.to_string())?;
                        Ok(())
                    })?;
                    report.pushed += count;
                    if resp.forged > 0 {
                        report.forged += resp.forged;
                        self.with_relay(url, |r| r.forged += resp.forged);
                    }
                    accepting = true;
                    continue;
                }
                // A relay with a smaller MAX_EVENTS_PER_PUSH or request limit: halve and retry.
                Err(f) if f.is_too_large() && batch.len() > 1 => limit = (batch.len() as u32 / 2).max(1),
                // One event within the limits this engine writes to (`maxEventBytes`, the
                // relays' limit): the relay refuses it for room, whatever its body says — unless
                // its last account (`/v1/status`) shows room for it: then something between (a
                // proxy) or the relay takes smaller events than `maxEventBytes`, and the event
                // is set aside below, not the whole outbox held up.
                Err(f)
                    if f.is_too_large()
                        && batch[0].envelope.len() <= self.options.max_event_bytes
                        && !self.room_for(url, batch[0].envelope.len()) =>
                {
                    return Err(RelayFailure::detected(
                        413,
                        "quota_exceeded",
                        format!(
                            "the relay refused event {} alone, within this engine's maxEventBytes ({}): it \
                             is out of room ({})",
                            batch[0].event_id,
                            self.options.max_event_bytes,
                            f.message()
                        ),
                    )
                    .into());
                }
                // It refuses this one event on its own, larger than this engine's limit says
                // relays take (a relay with a smaller MAX_EVENT_BYTES than `maxEventBytes`): set
                // it aside for this relay, go on.
                Err(f) if f.is_too_large() => {
                    let item = &batch[0];
                    let reason = format!("event {} refused by the relay: {}", item.event_id, f.message());
                    let now = self.now();
                    self.write(|tx| Ok(set_aside::set_aside(tx, url, Kind::Event, &item.event_id, &reason, now)?))?;
                    report.set_aside += 1;
                    after.clone_from(&item.event_id);
                }
                // A push sent ahead that failed otherwise — no answer (its deadline may have run
                // while the relay worked on the one before), or refused (a relay at its limit of
                // requests in flight answers 503) — is sent again, alone, before the push counts
                // as failed.
                Err(_) if ahead => {
                    one_at_a_time = true;
                    again = true;
                }
                Err(f) => return Err(f.into()),
            }
            // The push was not accepted: what was sent after it is dropped (aborted, or
            // answered unread — its events are sent again) and the next goes alone.
            next = None;
            accepting = false;
        }
    }
}

impl Engine {
    /// Whether relay `url`'s last known account has room for `bytes` more (false when unknown).
    fn room_for(&self, url: &str, bytes: usize) -> bool {
        self.with_relay(url, |r| {
            r.account.as_ref().is_some_and(|a| a.used_bytes.saturating_add(bytes as u64) <= a.quota_bytes)
        })
        .unwrap_or(false)
    }
}
