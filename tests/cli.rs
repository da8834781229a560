//! The native CLI, run as a real process.
#![cfg(not(target_arch = "wasm32"))]

use std::process::{Command, Output};

const TWELVE: &str = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simplysync"));
    cmd.args(args).env_remove("SIMPLYSYNC_SECRET");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn identity_prints_owner_id_and_relay_auth_matching_the_locked_vector() {
    let v = json(&cli(&["identity", TWELVE], &[]));
    assert_eq!(v["kind"], "mnemonic");
    assert_eq!(v["ownerId"], "H_5GlsTavOYfSYpJ2u1BhQ");
    assert_eq!(v["relayAuth"], "IdkSjw08AiMRZbOt7GwFBQ");
    assert!(v.get("dataKey").is_none(), "keys only with --show-keys");
}

#[test]
fn show_keys_adds_the_data_and_stream_keys_in_hex() {
    let v = json(&cli(&["identity", "--show-keys", TWELVE], &[]));
    assert_eq!(v["dataKey"].as_str().unwrap().len(), 64);
    assert_eq!(v["streamKey"].as_str().unwrap().len(), 64);
}

#[test]
fn the_secret_can_come_from_the_environment() {
    let v = json(&cli(&["identity"], &[("SIMPLYSYNC_SECRET", TWELVE)]));
    assert_eq!(v["ownerId"], "H_5GlsTavOYfSYpJ2u1BhQ");
}

#[test]
fn a_bad_secret_exits_2_and_names_the_problem() {
    let out = cli(&["identity", &TWELVE.replace("about", "abut")], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("word 12") && err.contains("abut"), "{err}");
}

#[test]
fn new_key_and_new_phrase_mint_secrets_that_derive() {
    let key = String::from_utf8(cli(&["new-key"], &[]).stdout).unwrap();
    assert!(key.trim().starts_with("sf1_"));
    assert_eq!(json(&cli(&["identity", key.trim()], &[]))["kind"], "sf1");
    let phrase = String::from_utf8(cli(&["new-phrase"], &[]).stdout).unwrap();
    assert_eq!(phrase.split_whitespace().count(), 12);
    assert_eq!(json(&cli(&["identity", phrase.trim()], &[]))["kind"], "mnemonic");
}
