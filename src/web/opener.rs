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
use crate::engine::{pack_openings, unpack_openings, PageToOpen};
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

    /// Opens the page `body` that a pull sent to `url` answered, read once: first calls
    /// `ahead(nextUrl)` when the engine will pull a page after this one (the opener worker
    /// fetches it while this page is decrypted), then returns the envelopes opened with these
    /// keys, packed (see [`pack_openings`]); `undefined` when `body` is not a page, or not one
    /// of `owner_id`'s. `ahead` throwing changes nothing here.
    pub fn open(&self, url: &str, owner_id: &str, body: &[u8], ahead: &Function) -> Option<Vec<u8>> {
        let page = PageToOpen::read(body)?;
        if let Some(next) = page.next_url(url) {
            let _ = ahead.call1(&JsValue::NULL, &next.into());
        }
        page.open(&self.identity, owner_id).map(|o| pack_openings(&o))
    }
}

/// The engine's side: `{pull(url, bearer, timeoutMs, maxResponseBytes, ownerId)}` as
/// js/opener.js gives it: `null` at once while the opener worker is not ready or after it
/// failed, else a promise of `{status, body, retryAfter, opened}` (`opened`: the packed
/// openings, or undefined) that rejects with the network error's message.
struct JsPageOpener {
    this: JsValue,
    pull: Function,
}

/// The page opener `v` (js/opener.js's), for the engine.
pub(crate) fn from_js(v: &JsValue) -> Result<Rc<dyn OpensPages>, JsValue> {
    let pull = Reflect::get(v, &"pull".into())?
        .dyn_into::<Function>()
        .map_err(|_| super::writes::bad_arg("opener.pull must be a function".into()))?;
    Ok(Rc::new(JsPageOpener { this: v.clone(), pull }))
}

fn answer_from_js(v: &JsValue) -> Option<(HttpResponse, Option<Openings>)> {
    let get = |key: &str| Reflect::get(v, &key.into()).ok();
    let status = get("status")?.as_f64().filter(|s| (100.0..600.0).contains(s))? as u16;
    let body = get("body")?.dyn_into::<Uint8Array>().ok()?.to_vec();
    let retry_after = get("retryAfter")?.as_string();
    let opened = get("opened")?.dyn_into::<Uint8Array>().ok().and_then(|o| unpack_openings(&o.to_vec()));
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
        let fail = |e: JsValue| TransportError(js_message(&e));
        let sent = match self.pull.apply(&self.this, &args) {
            // Not ready (or gone): answered at once, so the engine sends the pull itself in the
            // same step and its network time still overlaps the apply.
            Ok(v) if v.is_null() || v.is_undefined() => return Box::pin(std::future::ready(Ok(None))),
            other => other.and_then(|p| p.dyn_into::<Promise>()),
        };
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
