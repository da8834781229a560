//! Reading a decrypted payload.

use crate::test;
use simplysync::protocol::{parse_json, SyncPayload};

#[test]
fn a_payload_keeps_its_column_names_and_refuses_one_with_a_lone_surrogate() {
    let text = |key: &str| {
        format!(
            r#"{{"schemaVersion":1,"table":"todos","rowId":"r1","hlc":"001764504000000-000000-dev1","deleted":false,"row":{{"{key}":1,"b":2}}}}"#
        )
    };
    let p = SyncPayload::from_json(&parse_json(&text("é😀")).unwrap()).unwrap();
    let names: Vec<&str> = p.row.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["b", "é😀"]);
    let err = SyncPayload::from_json(&parse_json(&text("a\\ud800")).unwrap()).unwrap_err();
    assert!(err.to_string().contains("lone surrogate"), "{err}");
}
