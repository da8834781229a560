use crate::test;
use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::envelope::CryptoError;
use simplysync::protocol::{decrypt_envelope, encrypt_payload, parse_json, EventMeta, Identity, SyncEnvelope};

fn alice() -> Identity {
    Identity::from_secret("sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap()
}

fn sealed() -> (Identity, SyncEnvelope) {
    let id = alice();
    let meta = EventMeta {
        event_id: "001764504000000-000000-dev1".into(),
        device_id: "dev1".into(),
        created_at: "2025-11-30T12:00:00.000Z".into(),
        stream_id: Some(id.stream_id("todos", "r1")),
    };
    let payload = parse_json(r#"{"table":"todos","row":{"title":"milk"}}"#).unwrap();
    let env = encrypt_payload(&id, &meta, &payload, &mut OsEntropy).unwrap();
    (id, env)
}

#[test]
fn a_sealed_payload_opens_to_the_same_value() {
    let (id, env) = sealed();
    let v = decrypt_envelope(&id, &env).unwrap();
    assert_eq!(v.get("row").and_then(|r| r.get("title")).and_then(|t| t.as_str()), Some("milk"));
}

#[test]
fn every_seal_uses_a_fresh_nonce() {
    let (_, a) = sealed();
    let (_, b) = sealed();
    assert_ne!(a.nonce, b.nonce);
    assert_ne!(a.ciphertext, b.ciphertext);
}

#[test]
fn a_foreign_owner_is_refused_before_decryption() {
    let (_, env) = sealed();
    let bob = Identity::from_secret("sf1_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE").unwrap();
    assert!(matches!(decrypt_envelope(&bob, &env), Err(CryptoError::ForeignOwner { .. })));
    // Even with the owner field rewritten to Bob's, the key is wrong: authentication fails.
    let mut rebound = env.clone();
    rebound.owner_id = bob.owner_id().to_owned();
    assert_eq!(decrypt_envelope(&bob, &rebound), Err(CryptoError::AuthenticationFailed));
}

#[test]
fn tampering_with_any_header_field_fails_authentication() {
    let (id, env) = sealed();
    let edits: [fn(&mut SyncEnvelope); 5] = [
        |e| e.event_id = "001764504000001-000000-dev1".into(),
        |e| e.device_id = "dev2".into(),
        |e| e.created_at = "2030-01-01T00:00:00.000Z".into(),
        |e| e.stream_id = Some("AAAAAAAAAAAAAAAAAAAAAA".into()),
        |e| e.stream_id = None,
    ];
    for edit in edits {
        let mut t = env.clone();
        edit(&mut t);
        assert_eq!(decrypt_envelope(&id, &t), Err(CryptoError::AuthenticationFailed));
    }
}

#[test]
fn flipping_any_ciphertext_byte_fails_authentication() {
    let (id, env) = sealed();
    let ct = simplysync::protocol::base64url::decode(&env.ciphertext).unwrap();
    for i in [0, ct.len() / 2, ct.len() - 1] {
        let mut bytes = ct.clone();
        bytes[i] ^= 0x01;
        let mut t = env.clone();
        t.ciphertext = simplysync::protocol::base64url::encode(&bytes);
        assert_eq!(decrypt_envelope(&id, &t), Err(CryptoError::AuthenticationFailed), "byte {i}");
    }
}

#[test]
fn malformed_fields_and_versions_are_errors_not_panics() {
    let (id, env) = sealed();
    let mut t = env.clone();
    t.nonce = "AAAA".into();
    assert!(matches!(decrypt_envelope(&id, &t), Err(CryptoError::MalformedField { field: "nonce", .. })));
    let mut t = env.clone();
    t.ciphertext = "AAAA".into();
    assert!(matches!(decrypt_envelope(&id, &t), Err(CryptoError::MalformedField { field: "ciphertext", .. })));
    let mut t = env.clone();
    t.ciphertext = "!!".into();
    assert!(matches!(decrypt_envelope(&id, &t), Err(CryptoError::MalformedField { .. })));
    let mut t = env;
    t.version = 2;
    assert_eq!(decrypt_envelope(&id, &t), Err(CryptoError::UnsupportedVersion(2)));
}

#[test]
fn the_envelope_serializes_with_spec_field_names_and_omits_a_missing_stream_id() {
    let (_, mut env) = sealed();
    let json = serde_json::to_value(&env).unwrap();
    for k in ["version", "ownerId", "eventId", "deviceId", "createdAt", "streamId", "nonce", "ciphertext"] {
        assert!(json.get(k).is_some(), "{k}");
    }
    env.stream_id = None;
    assert!(serde_json::to_value(&env).unwrap().get("streamId").is_none());
}

#[test]
fn a_header_field_counts_its_json_escapes_as_serde_json_writes_them() {
    use simplysync::protocol::envelope::json_text_len;
    for c in (0u8..0x80).map(char::from).chain(['é', '€', '😀', '\u{2028}']) {
        let s = format!("a{c}{c}b");
        assert_eq!(json_text_len(&s), serde_json::to_string(&s).unwrap().len(), "{s:?}");
        // Long enough to be scanned eight bytes at a time, the special byte at every offset.
        for at in 0..20 {
            let long = format!("{}{c}{}", "x".repeat(at), "y".repeat(20 - at));
            assert_eq!(json_text_len(&long), serde_json::to_string(&long).unwrap().len(), "{long:?}");
        }
    }
    assert_eq!(json_text_len(""), 2);
}

#[test]
fn the_stored_size_formula_matches_the_serialized_envelope_for_every_plaintext_length() {
    let id = alice();
    for (len, stream) in [(0usize, None), (1, Some("AAAAAAAAAAAAAAAAAAAAAA")), (2, None), (3, Some("x")), (1000, None)]
    {
        let meta = EventMeta {
            event_id: "001764504000000-000000-dev".into(),
            device_id: "dev".into(),
            created_at: "2025-11-30T12:00:00.000Z".into(),
            stream_id: stream.map(str::to_owned),
        };
        let plain = "x".repeat(len);
        let env =
            simplysync::protocol::envelope::encrypt_plaintext(&id, &meta, plain.as_bytes(), &mut OsEntropy).unwrap();
        let expected = simplysync::protocol::envelope::sealed_len(
            id.owner_id(),
            &meta.event_id,
            &meta.device_id,
            &meta.created_at,
            stream,
            len,
        );
        assert_eq!(serde_json::to_string(&env).unwrap().len(), expected, "plaintext of {len} bytes");
    }
}

#[test]
fn the_aad_is_the_canonical_json_of_the_header_for_any_version_and_field_text() {
    use simplysync::protocol::canonical::to_canonical_json;
    use simplysync::protocol::envelope::header_aad;
    use simplysync::protocol::Json;
    for version in [0u32, 1, 9, 10, 99, 12_345, u32::MAX] {
        for stream in [None, Some("s\"\\\u{1}é")] {
            let (owner, event, device, created) = ("o\n", "e\u{7f}😀", "d\"", "c\\");
            let mut fields = vec![
                ("version", Json::from(version)),
                ("ownerId", Json::from(owner)),
                ("eventId", Json::from(event)),
                ("deviceId", Json::from(device)),
                ("createdAt", Json::from(created)),
            ];
            if let Some(s) = stream {
                fields.push(("streamId", Json::from(s)));
            }
            assert_eq!(
                header_aad(version, owner, event, device, created, stream),
                to_canonical_json(&Json::object(fields)),
                "version {version}, stream {stream:?}"
            );
        }
    }
}
