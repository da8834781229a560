//! `REGISTRATION=token`: a new owner registers only with a token the app's operator signed.
//!
//! The operator keeps an Ed25519 key pair; the relay knows the public halves
//! (`REGISTRATION_KEYS`, several for rotation). The app's server hands a signed token to its
//! signed-in users, and their engine sends it in `X-SimplySync-Registration` with writes; the
//! relay reads it only when the write would register a new owner. Format (PROTOCOL.md):
//! `base64url(payload) "." base64url(signature)`, the payload a JSON object
//! `{"exp": <unix seconds>, "ownerId"?: "<owner id>"}`, signed as those payload bytes. A token
//! naming an owner registers that owner only; one without registers any owner until it
//! expires. Ed25519 by `ring` (already the relay's TLS provider: no new crypto crate).

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use simplysync_protocol::base64url;

/// The header a registering write carries its token in.
pub const HEADER: &str = "x-simplysync-registration";

/// Longest token read (a payload of an owner id and an expiry is far shorter).
const MAX_TOKEN_BYTES: usize = 2048;

/// Why a registration token was not accepted (told to the client, 403 `registration_token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenProblem {
    /// No `X-SimplySync-Registration` header.
    Missing,
    /// Not `payload.signature` in base64url, or the payload is not the JSON object expected.
    Malformed,
    /// No key in `REGISTRATION_KEYS` signed it.
    BadSignature,
    /// Its `exp` has passed.
    Expired,
    /// It names another owner.
    OtherOwner,
}

impl std::fmt::Display for TokenProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenProblem::Missing => {
                "this relay registers new owners only with a token from the app (REGISTRATION=token): \
                 none was sent in X-SimplySync-Registration"
            }
            TokenProblem::Malformed => {
                "the registration token is not base64url(payload).base64url(signature) with a JSON payload {\"exp\": …}"
            }
            TokenProblem::BadSignature => {
                "the registration token is not signed by a key this relay trusts (REGISTRATION_KEYS)"
            }
            TokenProblem::Expired => "the registration token has expired: ask the app for a new one",
            TokenProblem::OtherOwner => "the registration token was issued for another owner",
        })
    }
}

/// The public keys whose tokens register owners.
#[derive(Debug, Clone)]
pub struct RegistrationKeys(Vec<[u8; 32]>);

#[derive(serde::Deserialize)]
struct Payload {
    exp: u64,
    #[serde(rename = "ownerId")]
    owner_id: Option<String>,
}

impl RegistrationKeys {
    /// Parses `REGISTRATION_KEYS`: base64url Ed25519 public keys (32 bytes), comma-separated.
    pub fn parse(value: &str) -> Result<RegistrationKeys, String> {
        let mut keys = Vec::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bytes = base64url::decode(part).map_err(|_| format!("{part:?} is not base64url"))?;
            let key: [u8; 32] = bytes
                .try_into()
                .map_err(|b: Vec<u8>| format!("{part:?} is {} bytes; an Ed25519 public key is 32", b.len()))?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("no key given: REGISTRATION=token needs the public key of the app's signing key".into());
        }
        Ok(RegistrationKeys(keys))
    }

    /// Accepts `token` for registering `owner_id` at `now_unix` (seconds), or says why not.
    pub fn check(&self, token: Option<&str>, owner_id: &str, now_unix: u64) -> Result<(), TokenProblem> {
        let token = token.map(str::trim).filter(|t| !t.is_empty()).ok_or(TokenProblem::Missing)?;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenProblem::Malformed);
        }
        let (payload_b64, sig_b64) = token.split_once('.').ok_or(TokenProblem::Malformed)?;
        let payload = base64url::decode(payload_b64).map_err(|_| TokenProblem::Malformed)?;
        let signature = base64url::decode(sig_b64).map_err(|_| TokenProblem::Malformed)?;
        let signed = self.0.iter().any(|k| UnparsedPublicKey::new(&ED25519, k).verify(&payload, &signature).is_ok());
        if !signed {
            return Err(TokenProblem::BadSignature);
        }
        let claims: Payload = serde_json::from_slice(&payload).map_err(|_| TokenProblem::Malformed)?;
        if claims.exp <= now_unix {
            return Err(TokenProblem::Expired);
        }
        match claims.owner_id {
            Some(o) if o != owner_id => Err(TokenProblem::OtherOwner),
            _ => Ok(()),
        }
    }
}

/// An operator's signing key, from its 32-byte seed (base64url), as `registration-token` reads it.
pub struct SigningKey(Ed25519KeyPair);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed.
        write!(f, "SigningKey({})", self.public_key())
    }
}

impl SigningKey {
    /// The key whose seed is `seed` (base64url of 32 bytes).
    pub fn from_seed(seed: &str) -> Result<SigningKey, String> {
        let bytes = base64url::decode(seed.trim()).map_err(|_| "the signing key is not base64url".to_owned())?;
        Ed25519KeyPair::from_seed_unchecked(&bytes)
            .map(SigningKey)
            .map_err(|_| format!("the signing key is {} bytes; an Ed25519 seed is 32", bytes.len()))
    }

    /// A new random key; returns it with its seed (base64url: keep it secret).
    pub fn generate() -> Result<(SigningKey, String), String> {
        use simplysync_protocol::entropy::{random_bytes, OsEntropy};
        let seed = random_bytes::<32>(&mut OsEntropy).map_err(|e| e.to_string())?;
        let encoded = base64url::encode(&seed);
        Ok((SigningKey::from_seed(&encoded)?, encoded))
    }

    /// The public key, base64url: what goes in `REGISTRATION_KEYS`.
    pub fn public_key(&self) -> String {
        base64url::encode(self.0.public_key().as_ref())
    }

    /// A token valid until `exp` (unix seconds), for `owner_id` only if given.
    pub fn token(&self, exp: u64, owner_id: Option<&str>) -> String {
        let payload = match owner_id {
            Some(o) => serde_json::json!({ "exp": exp, "ownerId": o }),
            None => serde_json::json!({ "exp": exp }),
        }
        .to_string();
        let signature = self.0.sign(payload.as_bytes());
        format!("{}.{}", base64url::encode(payload.as_bytes()), base64url::encode(signature.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "AAAAAAAAAAAAAAAAAAAAAA";

    fn pair() -> (SigningKey, RegistrationKeys) {
        let (key, _) = SigningKey::generate().unwrap();
        let keys = RegistrationKeys::parse(&key.public_key()).unwrap();
        (key, keys)
    }

    #[test]
    fn a_token_signed_by_a_trusted_key_registers_until_it_expires() {
        let (key, keys) = pair();
        assert_eq!(keys.check(Some(&key.token(1000, None)), OWNER, 999), Ok(()));
        assert_eq!(keys.check(Some(&key.token(1000, None)), OWNER, 1000), Err(TokenProblem::Expired));
    }

    #[test]
    fn a_token_naming_an_owner_registers_that_owner_only() {
        let (key, keys) = pair();
        let token = key.token(1000, Some(OWNER));
        assert_eq!(keys.check(Some(&token), OWNER, 1), Ok(()));
        assert_eq!(keys.check(Some(&token), "BBBBBBBBBBBBBBBBBBBBBB", 1), Err(TokenProblem::OtherOwner));
    }

    #[test]
    fn a_token_of_another_key_or_altered_or_missing_is_refused_with_its_reason() {
        let (key, keys) = pair();
        let (stranger, _) = pair();
        assert_eq!(keys.check(Some(&stranger.token(1000, None)), OWNER, 1), Err(TokenProblem::BadSignature));
        let token = key.token(1000, None);
        let (_, sig) = token.split_once('.').unwrap();
        let forged = format!("{}.{sig}", base64url::encode(br#"{"exp":99999999999}"#));
        assert_eq!(
            keys.check(Some(&forged), OWNER, 1),
            Err(TokenProblem::BadSignature),
            "a payload changed after signing"
        );
        assert_eq!(keys.check(None, OWNER, 1), Err(TokenProblem::Missing));
        assert_eq!(keys.check(Some("no-dot"), OWNER, 1), Err(TokenProblem::Malformed));
        assert_eq!(keys.check(Some(&"a".repeat(3000)), OWNER, 1), Err(TokenProblem::Malformed));
    }

    #[test]
    fn any_of_several_keys_may_sign_while_keys_rotate() {
        let (old, _) = pair();
        let (new, _) = pair();
        let keys = RegistrationKeys::parse(&format!("{}, {}", old.public_key(), new.public_key())).unwrap();
        assert_eq!(keys.check(Some(&old.token(10, None)), OWNER, 1), Ok(()));
        assert_eq!(keys.check(Some(&new.token(10, None)), OWNER, 1), Ok(()));
    }

    #[test]
    fn registration_keys_that_are_not_32_byte_base64url_are_refused_naming_the_key() {
        assert!(RegistrationKeys::parse("").unwrap_err().contains("no key"));
        assert!(RegistrationKeys::parse("abc").unwrap_err().contains("\"abc\""));
        assert!(RegistrationKeys::parse("!!").unwrap_err().contains("base64url"));
    }
}
