//! Push: sealed outbox events a relay has not acknowledged go out oldest first, at most
//! [`BATCH`] events and [`MAX_PUSH_BYTES`] per request, and are recorded as acknowledged only
//! when the relay's answer accounts for every one of them.
//!
//! A relay with smaller limits answers 413: the batch is halved; a single event it still
//! refuses is *set aside* for that relay (kept in the outbox, with the reason in the status)
//! and the push goes on with the next one. `413 quota_exceeded`, and an answer whose counts do
//! not add up, end the push (the pass still pulls).

use super::relay_api::RelayFailure;
use super::sync::{PassError, RelayPassReport, BATCH, MAX_PUSH_BYTES};
use super::Engine;
use crate::store::set_aside::{self, Kind};
use crate::store::{outbox, system};

impl Engine {
    /// Uploads missing blob chunks, then pushes unacknowledged events.
    pub(crate) async fn push_phase(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        self.upload_blob_chunks(url, report).await?;
        self.push_events(url, report).await
    }

    async fn push_events(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        let identity = self.identity();
        let api = self.api(url, &identity);
        let (mut limit, mut after, mut requests) = (BATCH, 0i64, 0u32);
        loop {
            let batch = outbox::unacked_batch(&self.db.borrow(), url, after, limit, MAX_PUSH_BYTES)?;
            if batch.is_empty() {
                return Ok(());
            }
            if requests > 0 && self.now() >= report.deadline_ms {
                // This relay's time in the pass is up: the rest goes in the next pass.
                report.more = true;
                return Ok(());
            }
            requests += 1;
            let envelopes: Vec<String> = batch.iter().map(|o| o.envelope.clone()).collect();
            match api.push(&envelopes).await {
                Ok(resp) => {
                    let sent = batch.len() as u64;
                    if resp.accepted.checked_add(resp.duplicate) != Some(sent) {
                        return Err(RelayFailure::detected(
                            200,
                            "push_mismatch",
                            format!(
                                "pushed {sent} events but the relay counted {} accepted + {} duplicate; \
                                 none of them is marked delivered (they are pushed again later)",
                                resp.accepted, resp.duplicate
                            ),
                        )
                        .into());
                    }
                    after = batch.last().map_or(after, |o| o.seq);
                    let ids: Vec<String> = batch.into_iter().map(|o| o.event_id).collect();
                    let now = self.now();
                    self.write(|tx| {
                        outbox::record_acks(tx, url, &ids, now)?;
                        system::meta_set(tx, &format!("push:{url}"), &now.to_string())?;
                        Ok(())
                    })?;
                    report.pushed += sent;
                    if resp.forged > 0 {
                        report.forged += resp.forged;
                        self.with_relay(url, |r| r.forged += resp.forged);
                    }
                }
                // A relay with a smaller MAX_EVENTS_PER_PUSH or request limit: halve and retry.
                Err(f) if f.is_too_large() && batch.len() > 1 => limit = (batch.len() as u32 / 2).max(1),
                // It refuses this one event on its own: set it aside for this relay, go on.
                Err(f) if f.is_too_large() => {
                    let item = &batch[0];
                    let reason = format!("event {} refused by the relay: {}", item.event_id, f.message());
                    let now = self.now();
                    self.write(|tx| Ok(set_aside::set_aside(tx, url, Kind::Event, &item.event_id, &reason, now)?))?;
                    report.set_aside += 1;
                    after = item.seq;
                }
                Err(f) => return Err(f.into()),
            }
        }
    }
}
