//! The opener worker, both halves: [`PageOpener`] is what runs in it (a second wasm instance
//! in a worker of its own, holding the same keys, unsealed through the same key custody), and
//! [`JsPageOpener`] is how the engine's worker hands it the pulls it sends ahead. A page is
//! then fetched and decrypted there while the engine applies the page before
//! (engine/opened.rs; js/opener.js fetches, js/opener-worker.js drives this).
//!
//! What crosses between the workers: the pull's URL and bearer token (as `fetch` already has
//! them), the relay's answer and the page's plaintexts — the app's rows, which the engine's
//! worker posts to the page anyway. Never the secret or a key.

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::io::js_message;
use crate::engine::io::{
    HttpRequest, HttpResponse, LocalFuture, OpenedPull, Openings, PageOpener as OpensPages, TransportError,
};
use crate::engine::PageToOpen;
use crate::protocol::{Identity, Secret};

/// The opener worker's keys.
#[wasm_bindgen]
#[derive(Debug)]
pub struct PageOpener {
    identity: Identity,
}

#[wasm_bindgen]
impl PageOpener {
    /// The keys of `secret`, the engine's secret as key custody unsealed it (UTF-8; the
    /// caller overwrites its copy). Fails as the engine's own open does on a secret it cannot
    /// read.
    #[wasm_bindgen(constructor)]
    pub fn new(secret: &[u8]) -> Result<PageOpener, JsValue> {
        let lost = |why: &str| super::errors::js_error("SECRET_LOST", why);
        let secret = std::str::from_utf8(secret).map_err(|_| lost("the unsealed secret is not text"))?;
        let secret = Secret::parse(secret).map_err(|e| lost(&e.to_string()))?;
        Ok(PageOpener { identity: secret.identity() })
    }

    /// For a pull sent to `url` that answered `body`: the URL of the pull the engine sends
    /// next, if it will send one (the opener fetches it while it opens this page).
    #[wasm_bindgen(js_name = nextUrl)]
    pub fn next_url(&self, url: &str, body: &[u8]) -> Option<String> {
        PageToOpen::read(body)?.next_url(url)
    }

    /// The page `body`'s envelopes opened with these keys, packed (see [`pack`]); `undefined`
    /// when it is not a page of `owner_id`'s.
    pub fn open(&self, owner_id: &str, body: &[u8]) -> Option<Vec<u8>> {
        PageToOpen::read(body)?.open(&self.identity, owner_id).map(|o| pack(&o))
    }
}

/// `ends[i]` of an envelope that was not opened.
const NOT_OPENED: u32 = u32::MAX;

/// Openings as bytes: their count `n`, then each one's end in the plaintexts (or
/// [`NOT_OPENED`]), as little-endian u32s, then the plaintexts one after another.
fn pack(openings: &Openings) -> Vec<u8> {
    let n = openings.len();
    let mut out = Vec::with_capacity(4 + 4 * n + openings.iter().flatten().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let mut end = 0u32;
    for o in openings {
        let e = o.as_ref().map_or(NOT_OPENED, |p| {
            end += p.len() as u32;
            end
        });
        out.extend_from_slice(&e.to_le_bytes());
    }
    openings.iter().flatten().for_each(|p| out.extend_from_slice(p));
    out
}

/// [`pack`] undone; `None` if the bytes do not hold what they say (then nothing is used).
fn unpack(bytes: &[u8]) -> Option<Openings> {
    let word = |i: usize| Some(u32::from_le_bytes(bytes.get(4 * i..4 * i + 4)?.try_into().ok()?));
    let n = word(0)? as usize;
    let plain = bytes.get(4 + 4 * n..)?;
    let mut start = 0usize;
    (1..=n)
        .map(|i| match word(i)? {
            NOT_OPENED => Some(None),
            end => {
                let p = plain.get(start..end as usize)?.to_vec();
                start = end as usize;
                Some(Some(p))
            }
        })
        .collect()
}

/// The engine's side: `{pull(url, bearer, timeoutMs, maxResponseBytes, ownerId)}` as
/// js/opener.js gives it, resolving `{status, body, retryAfter, opened}` (`opened`: the
/// packed openings, or undefined), `null` while the opener worker is not ready or after it
/// failed, or rejecting with the network error's message.
pub(crate) struct JsPageOpener {
    this: JsValue,
    pull: Function,
}

impl JsPageOpener {
    pub(crate) fn from_js(v: &JsValue) -> Result<JsPageOpener, JsValue> {
        let pull = Reflect::get(v, &"pull".into())?
            .dyn_into::<Function>()
            .map_err(|_| super::writes::bad_arg("opener.pull must be a function".into()))?;
        Ok(JsPageOpener { this: v.clone(), pull })
    }
}

fn answer_from_js(v: &JsValue) -> Option<(HttpResponse, Option<Openings>)> {
    let get = |key: &str| Reflect::get(v, &key.into()).ok();
    let status = get("status")?.as_f64().filter(|s| (100.0..600.0).contains(s))? as u16;
    let body = get("body")?.dyn_into::<Uint8Array>().ok()?.to_vec();
    let retry_after = get("retryAfter")?.as_string();
    let opened = get("opened")?.dyn_into::<Uint8Array>().ok().and_then(|o| unpack(&o.to_vec()));
    Some((HttpResponse { status, body, retry_after }, opened))
}

impl OpensPages for JsPageOpener {
    fn pull_opened(
        &self,
        request: HttpRequest,
        owner_id: &str,
    ) -> LocalFuture<'static, Result<OpenedPull, TransportError>> {
        let args = js_sys::Array::of5(
            &request.url.into(),
            &request.bearer.map_or(JsValue::NULL, JsValue::from),
            &request.timeout_ms.into(),
            &(request.max_response_bytes as f64).into(),
            &owner_id.into(),
        );
        let sent = self.pull.apply(&self.this, &args).and_then(|p| p.dyn_into::<Promise>());
        let fail = |e: JsValue| TransportError(js_message(&e));
        Box::pin(async move {
            let answer = JsFuture::from(sent.map_err(fail)?).await.map_err(fail)?;
            if answer.is_null() || answer.is_undefined() {
                return Ok(None);
            }
            match answer_from_js(&answer) {
                Some(read) => Ok(Some(read)),
                None => Err(TransportError("the opener worker's answer is not one".into())),
            }
        })
    }
}

/// A page opener that is there, for the engine (`Rc<dyn PageOpener>`).
pub(crate) fn from_js(v: &JsValue) -> Result<Rc<dyn OpensPages>, JsValue> {
    Ok(Rc::new(JsPageOpener::from_js(v)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openings_pack_and_unpack_as_they_were() {
        let o: Openings = vec![Some(b"ab".to_vec()), None, Some(Vec::new()), Some(b"xyz".to_vec())];
        assert_eq!(unpack(&pack(&o)), Some(o));
        assert_eq!(unpack(&pack(&Vec::new())), Some(Vec::new()));
        let mut bad = pack(&vec![Some(b"ab".to_vec())]);
        bad.pop();
        assert_eq!(unpack(&bad), None, "an end past the plaintexts");
        assert_eq!(unpack(&[5, 0, 0, 0]), None, "fewer ends than the count");
    }
}
