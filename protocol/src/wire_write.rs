//! Writing the protocol's records as JSON text, as the engine does: envelopes (stored and
//! pushed), blob manifests, the compaction request, and a relay's account figures (answered to
//! the app). The text is what the types' serde derives write — the relay reads them with serde —
//! which the tests below hold them to, byte for byte.

use super::blob::{BlobChunkRef, BlobManifest};
use super::envelope::SyncEnvelope;
use super::json_write::{ObjectWriter, ToJson};
use super::wire::{AccountInfo, CompactRequest};

impl ToJson for SyncEnvelope {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("version", &self.version)
            .member("ownerId", &self.owner_id)
            .member("eventId", &self.event_id)
            .member("deviceId", &self.device_id)
            .member("createdAt", &self.created_at)
            .member_if_some("streamId", &self.stream_id)
            .member("nonce", &self.nonce)
            .member("ciphertext", &self.ciphertext)
            .end();
    }

    /// Written at about its length: grown from empty, a sealed envelope's text was copied ~7
    /// times (every seal and every echo writes one).
    fn to_json_text(&self) -> String {
        let fields = [&self.owner_id, &self.event_id, &self.device_id, &self.created_at, &self.nonce, &self.ciphertext];
        let len = fields.iter().map(|f| f.len()).sum::<usize>() + self.stream_id.as_ref().map_or(0, String::len);
        let mut out = String::with_capacity(len + 128);
        self.write_json(&mut out);
        out
    }
}

impl ToJson for BlobChunkRef {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("hash", &self.hash)
            .member("size", &self.size)
            .member("plaintextSize", &self.plaintext_size)
            .end();
    }
}

impl ToJson for BlobManifest {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("version", &self.version)
            .member("ownerId", &self.owner_id)
            .member("blobId", &self.blob_id)
            .member("mimeType", &self.mime_type)
            .member("byteSize", &self.byte_size)
            .member("chunkSize", &self.chunk_size)
            .member("chunks", &self.chunks)
            .member("sha256", &self.sha256)
            .member("createdAt", &self.created_at)
            .end();
    }
}

impl ToJson for CompactRequest {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out).member("ownerId", &self.owner_id).member("streamIds", &self.stream_ids).end();
    }
}

impl ToJson for AccountInfo {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("ownerId", &self.owner_id)
            .member("quotaBytes", &self.quota_bytes)
            .member("usedBytes", &self.used_bytes)
            .member("usedPct", &self.used_pct)
            .member("headSeq", &self.head_seq)
            .member("streams", &self.streams)
            .member("events", &self.events)
            .member("createdAt", &self.created_at)
            .end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_as_serde<T: ToJson + serde::Serialize>(value: &T) {
        assert_eq!(value.to_json_text(), serde_json::to_string(value).unwrap());
    }

    fn envelope(stream_id: Option<&str>) -> SyncEnvelope {
        SyncEnvelope {
            version: 1,
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            event_id: "0001764900000000-0000-dev\"1".into(),
            device_id: "device\\1".into(),
            created_at: "2026-12-05T00:00:00.000Z".into(),
            stream_id: stream_id.map(str::to_owned),
            nonce: "AAAAAAAAAAAAAAAA".into(),
            ciphertext: "Y2lwaGVy\u{1}".into(),
        }
    }

    #[test]
    fn an_envelope_is_the_text_serde_writes_with_and_without_a_stream() {
        same_as_serde(&envelope(Some("BBBBBBBBBBBBBBBBBBBBBB")));
        same_as_serde(&envelope(None));
        assert!(!envelope(None).to_json_text().contains("streamId"));
    }

    #[test]
    fn a_manifest_and_its_chunks_are_the_text_serde_writes() {
        let chunk = |n: u64| BlobChunkRef { hash: format!("h{n}"), size: n + 28, plaintext_size: n };
        for chunks in [vec![], vec![chunk(1)], vec![chunk(1), chunk(u64::MAX - 28)]] {
            same_as_serde(&BlobManifest {
                version: 1,
                owner_id: "o".into(),
                blob_id: "b".into(),
                mime_type: "text/plain; charset=\"utf-8\"".into(),
                byte_size: 3,
                chunk_size: 65536,
                chunks,
                sha256: "s".into(),
                created_at: "2026-12-05T00:00:00.000Z".into(),
            });
        }
    }

    #[test]
    fn a_compaction_request_is_the_text_serde_writes() {
        same_as_serde(&CompactRequest { owner_id: "o".into(), stream_ids: vec![] });
        same_as_serde(&CompactRequest { owner_id: "o".into(), stream_ids: vec!["a".into(), "b".into()] });
    }

    #[test]
    fn account_figures_read_back_as_serde_wrote_them() {
        let mut account = AccountInfo {
            owner_id: "o".into(),
            quota_bytes: 1 << 40,
            used_bytes: 12345,
            used_pct: 12.34,
            head_seq: 9,
            streams: 2,
            events: 3,
            created_at: "2026-12-05T00:00:00.000Z".into(),
        };
        same_as_serde(&account);
        // A whole percentage: serde writes `0.0`, JavaScript (and this writer) `0`; the same number.
        account.used_pct = 0.0;
        assert_eq!(serde_json::from_str::<AccountInfo>(&account.to_json_text()).unwrap(), account);
        assert!(account.to_json_text().contains("\"usedPct\":0,"));
    }
}
