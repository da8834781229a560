//! Reading the relay's answers ([`super::wire`]) from parsed JSON, as the engine does: the same
//! members, defaults and refusals as the types' serde derives, which the relay writes them with
//! (tests hold the two to each other), without a derived deserializer per type in the package.

use super::envelope::SyncEnvelope;
use super::json::{Json, JsonObject, JsonString};
use super::json_fields::{FieldError, Fields, FromJson};
use super::wire::{
    AccountInfo, CloseResponse, CompactResponse, ErrorBody, HealthResponse, PushResponse, ServerInfo, StatusResponse,
    WaitResponse,
};

impl FromJson for SyncEnvelope {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(SyncEnvelope {
            version: f.u32("version")?,
            owner_id: f.string("ownerId")?,
            event_id: f.string("eventId")?,
            device_id: f.string("deviceId")?,
            created_at: f.string("createdAt")?,
            stream_id: f.opt_string("streamId")?,
            nonce: f.string("nonce")?,
            ciphertext: f.string("ciphertext")?,
        })
    }
}

impl SyncEnvelope {
    /// Reads an envelope from an object's members in text order (of a repeated key, the last
    /// counts), moving its strings out instead of copying them: the restore's path, which reads
    /// a page's envelopes without a tree each ([`parse_listing`](super::json_parse::parse_listing)).
    /// Gives exactly what [`FromJson`] gives for the same object: a member that is not as
    /// expected sends the object down that reader for its error. Members are moved out only
    /// when the envelope is read.
    pub fn from_members(members: &mut [(JsonString, Json)], path: &str) -> Result<SyncEnvelope, FieldError> {
        const KEYS: [&str; 8] =
            ["version", "ownerId", "eventId", "deviceId", "createdAt", "nonce", "ciphertext", "streamId"];
        let mut at = [usize::MAX; 8];
        for (i, (k, _)) in members.iter().enumerate() {
            if let Some(slot) = KEYS.iter().position(|key| k.as_wtf8() == key.as_bytes()) {
                at[slot] = i;
            }
        }
        let value = |slot: usize| members.get(at[slot]).map(|(_, v)| v);
        let version = match value(0) {
            Some(Json::Number(n)) => n.as_safe_integer().and_then(|v| u32::try_from(v).ok()),
            _ => None,
        };
        let strings = (1..7).all(|slot| value(slot).is_some_and(|v| v.as_str().is_some()));
        let stream = matches!(value(7), None | Some(Json::Null)) || value(7).is_some_and(|v| v.as_str().is_some());
        let (Some(version), true, true) = (version, strings, stream) else {
            return SyncEnvelope::from_json(&Json::Object(JsonObject::from_members(members.to_vec())), path);
        };
        let mut take = |slot: usize| match members.get_mut(at[slot]).map(|(_, v)| std::mem::replace(v, Json::Null)) {
            Some(Json::String(s)) => Some(s.into_string().unwrap_or_else(|s| s.to_string_lossy())),
            _ => None,
        };
        Ok(SyncEnvelope {
            version,
            owner_id: take(1).unwrap_or_default(),
            event_id: take(2).unwrap_or_default(),
            device_id: take(3).unwrap_or_default(),
            created_at: take(4).unwrap_or_default(),
            nonce: take(5).unwrap_or_default(),
            ciphertext: take(6).unwrap_or_default(),
            stream_id: take(7),
        })
    }
}

impl FromJson for PushResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(PushResponse {
            accepted: f.u64("accepted")?,
            duplicate: f.u64("duplicate")?,
            forged: f.u64_or_zero("forged")?,
        })
    }
}

impl FromJson for CompactResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(CompactResponse { deleted_events: f.u64("deletedEvents")?, reclaimed_bytes: f.u64("reclaimedBytes")? })
    }
}

impl FromJson for CloseResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(CloseResponse {
            closed: f.bool("closed")?,
            deleted_events: f.u64("deletedEvents")?,
            deleted_blobs: f.u64("deletedBlobs")?,
        })
    }
}

impl FromJson for ServerInfo {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(ServerInfo {
            version: f.string("version")?,
            server_time: f.string("serverTime")?,
            epoch: f.opt_string("epoch")?,
        })
    }
}

impl FromJson for AccountInfo {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(AccountInfo {
            owner_id: f.string("ownerId")?,
            quota_bytes: f.u64("quotaBytes")?,
            used_bytes: f.u64("usedBytes")?,
            used_pct: f.f64("usedPct")?,
            head_seq: f.u64("headSeq")?,
            streams: f.u64("streams")?,
            events: f.u64("events")?,
            created_at: f.string("createdAt")?,
        })
    }
}

impl FromJson for StatusResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(StatusResponse { server: f.read("server")?, account: f.read("account")? })
    }
}

impl FromJson for HealthResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(HealthResponse {
            ok: f.bool("ok")?,
            service: f.string("service")?,
            version: f.string("version")?,
            server_time: f.string("serverTime")?,
            epoch: f.opt_string("epoch")?,
            wait: f.opt_string("wait")?,
        })
    }
}

impl FromJson for WaitResponse {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(WaitResponse { head_seq: f.u64("headSeq")?, epoch: f.opt_string("epoch")? })
    }
}

impl FromJson for ErrorBody {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(ErrorBody { error: f.string("error")?, message: f.string("message")? })
    }
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde::Serialize;

    use super::*;
    use crate::json_fields::read_json;

    /// What the relay writes (serde) reads back the same, and each required member's absence is
    /// refused by both readers.
    fn round_trips<T: Serialize + DeserializeOwned + FromJson + PartialEq + std::fmt::Debug>(value: T) {
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(read_json::<T>(text.as_bytes(), "answer").unwrap(), value, "{text}");
        let serde_json::Value::Object(members) = serde_json::to_value(&value).unwrap() else { panic!("an object") };
        for key in members.keys() {
            let mut less = members.clone();
            less.remove(key);
            let text = serde_json::Value::Object(less).to_string();
            let by_serde = serde_json::from_str::<T>(&text).is_ok();
            let ours = read_json::<T>(text.as_bytes(), "answer");
            assert_eq!(ours.is_ok(), by_serde, "without {key}: {ours:?}");
            if let Err(e) = ours {
                assert!(e.0.contains(&format!("`{key}`")), "{e}");
            }
        }
    }

    fn server() -> ServerInfo {
        ServerInfo { version: "1.2.3".into(), server_time: "2026-12-05T00:00:00.000Z".into(), epoch: Some("e1".into()) }
    }

    fn account() -> AccountInfo {
        AccountInfo {
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            quota_bytes: 1 << 30,
            used_bytes: 12_345,
            used_pct: 0.01,
            head_seq: 42,
            streams: 3,
            events: 40,
            created_at: "2026-12-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn an_envelope_reads_back_what_serde_writes_with_and_without_a_stream() {
        let e = SyncEnvelope {
            version: 1,
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            event_id: "000001764504000001-000000-devA".into(),
            device_id: "dev \"A\" ✓".into(),
            created_at: "2026-12-01T00:00:00.000Z".into(),
            stream_id: Some("BBBBBBBBBBBBBBBBBBBBBB".into()),
            nonce: "AAAAAAAAAAAAAAAA".into(),
            ciphertext: "CCCCCCCCCCCCCCCCCCCCCC".into(),
        };
        round_trips(e.clone());
        round_trips(SyncEnvelope { stream_id: None, ..e });
        let err = read_json::<SyncEnvelope>(br#"{"version": "one"}"#, "envelope").unwrap_err();
        assert_eq!(err.0, "envelope.version: expected a whole number of at least 0, got a string");
    }

    #[test]
    fn every_relay_answer_reads_back_what_the_relay_writes() {
        round_trips(PushResponse { accepted: 3, duplicate: 2, forged: 1 });
        round_trips(PushResponse { accepted: 3, duplicate: 0, forged: 0 });
        round_trips(CompactResponse { deleted_events: 5, reclaimed_bytes: 900 });
        round_trips(CloseResponse { closed: true, deleted_events: 7, deleted_blobs: 1 });
        round_trips(server());
        round_trips(ServerInfo { epoch: None, ..server() });
        round_trips(account());
        round_trips(StatusResponse { server: server(), account: account() });
        let health = HealthResponse {
            ok: true,
            service: "simplysync-relay".into(),
            version: "1".into(),
            server_time: "t".into(),
            epoch: Some("e".into()),
            wait: Some("/v1/events/wait".into()),
        };
        round_trips(health.clone());
        round_trips(HealthResponse { epoch: None, wait: None, ..health });
        round_trips(WaitResponse { head_seq: 9, epoch: Some("e".into()) });
        round_trips(WaitResponse { head_seq: 9, epoch: None });
        round_trips(ErrorBody { error: "quota_exceeded".into(), message: "full".into() });
    }

    #[test]
    fn a_nested_member_of_the_wrong_shape_is_named_by_its_path() {
        let text = r#"{"server": {"version": "1", "serverTime": "t"}, "account": {"ownerId": 5}}"#;
        let err = read_json::<StatusResponse>(text.as_bytes(), "status").unwrap_err();
        assert_eq!(err.0, "status.account.ownerId: expected a string, got a number");
        let err = read_json::<StatusResponse>(br#"{"server": 1}"#, "status").unwrap_err();
        assert_eq!(err.0, "status.server: expected an object, got a number");
    }

    /// Reads `envelope` both ways: from a listing's members (the restore) and as a tree.
    fn both_ways(envelope: &str) -> (Result<SyncEnvelope, FieldError>, Result<SyncEnvelope, FieldError>) {
        let page = format!(r#"{{"events": [{envelope}], "nextCursor": "1"}}"#);
        let (_, items) = crate::json_parse::parse_listing(page.as_bytes(), "events").unwrap();
        let mut item = items.unwrap().pop().unwrap();
        assert_eq!(item.text, envelope);
        let by_members = match &mut item.members {
            Ok(members) => SyncEnvelope::from_members(members, "envelope"),
            Err(value) => SyncEnvelope::from_json(value, "envelope"),
        };
        (by_members, read_json::<SyncEnvelope>(envelope.as_bytes(), "envelope"))
    }

    #[test]
    fn an_envelope_read_from_members_is_what_the_tree_reader_reads_or_refuses() {
        let good = r#"{"version":1,"ownerId":"o","eventId":"e","deviceId":"d\u00e9","createdAt":"t","streamId":"s","nonce":"n","ciphertext":"c"}"#;
        let cases = [
            good.to_owned(),
            good.replace(r#""streamId":"s","#, ""),
            good.replace(r#""streamId":"s""#, r#""streamId":null"#),
            good.replace(r#""version":1"#, r#""version":1,"extra":{"a":[1]}"#),
            good.replace(r#""ownerId":"o""#, r#""ownerId":"first","ownerId":"o""#),
            good.replace(r#""version":1"#, r#""version":"1""#),
            good.replace(r#""version":1"#, r#""version":1.5"#),
            good.replace(r#""version":1"#, r#""version":-1"#),
            good.replace(r#""version":1"#, r#""version":4294967296"#),
            good.replace(r#""version":1,"#, ""),
            good.replace(r#""nonce":"n""#, r#""nonce":null"#),
            good.replace(r#""nonce":"n","#, ""),
            good.replace(r#""ciphertext":"c""#, r#""ciphertext":7"#),
            good.replace(r#""eventId":"e""#, r#""eventId":"\ud800""#),
            good.replace(r#""streamId":"s""#, r#""streamId":5"#),
            good.replace(r#""ownerId":"o""#, r#""ownerId":"o","ownerId":5"#),
            "{}".into(),
            "[1]".into(),
            "\"text\"".into(),
            "null".into(),
        ];
        let mut read = 0;
        for text in &cases {
            let (by_members, by_tree) = both_ways(text);
            assert_eq!(by_members, by_tree, "{text}");
            read += usize::from(by_members.is_ok());
        }
        assert_eq!(read, 5, "the first five are envelopes");
        assert_eq!(both_ways(good).0.unwrap().device_id, "dé");
        assert_eq!(both_ways(&cases[4]).0.unwrap().owner_id, "o", "the last of a repeated key");
        assert_eq!(both_ways(&cases[2]).0.unwrap().stream_id, None);
    }
}
