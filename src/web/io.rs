//! The engine's I/O in a browser: `fetch` (window or worker), `Date.now()`, and timers.

use js_sys::{Promise, Uint8Array};
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use web_sys::{AbortController, Headers, ReadableStreamDefaultReader, Request, RequestInit, Response};

use crate::engine::io::{Clock, HttpRequest, HttpResponse, LocalFuture, Timer, Transport, TransportError};

#[wasm_bindgen]
extern "C" {
    /// The global `fetch`, in a window and in a worker alike.
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(input: &Request) -> Promise;

    /// `performance.now()`, in a window and in a worker alike.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;

    /// JavaScript's `String(x)`: a value's text without the glue of `JsValue`'s `Debug`.
    #[wasm_bindgen(js_name = String)]
    pub(crate) fn js_string(value: &JsValue) -> String;

}

/// The message of a JavaScript error value.
pub(crate) fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| js_string(e))
}

/// How much of a response's declared length is reserved before its bytes arrive.
const RESERVE_MAX: u64 = 4 * 1024 * 1024;

/// HTTP through `fetch`, each request aborted at its deadline (`AbortController`; the body's
/// download included).
#[derive(Debug, Default, Clone, Copy)]
pub struct FetchTransport;

impl FetchTransport {
    async fn send_inner(req: HttpRequest, controller: &AbortController) -> Result<HttpResponse, JsValue> {
        let init = RequestInit::new();
        init.set_signal(Some(&controller.signal()));
        init.set_method(req.method.as_str());
        let headers = Headers::new()?;
        if let Some(t) = &req.bearer {
            headers.set("Authorization", &format!("Bearer {t}"))?;
        }
        if let Some(t) = &req.registration {
            headers.set("X-SimplySync-Registration", t)?;
            // The token is for this relay only: a redirect elsewhere would carry it along.
            init.set_redirect(web_sys::RequestRedirect::Error);
        }
        if let Some(ct) = req.content_type {
            headers.set("Content-Type", ct)?;
        }
        init.set_headers(&headers);
        if let Some(body) = &req.body {
            init.set_body(&Uint8Array::from(body.as_slice()));
        }
        let request = Request::new_with_str_and_init(&req.url, &init)?;
        let resp: Response = JsFuture::from(global_fetch(&request)).await?.dyn_into()?;
        let status = resp.status();
        let retry_after = resp.headers().get("retry-after").ok().flatten();
        let limit = req.max_response_bytes;
        let too_large = || JsValue::from_str(&TransportError::response_too_large(limit).0);
        let declared = resp.headers().get("content-length").ok().flatten().and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            controller.abort();
            return Err(too_large());
        }
        // Read the stream chunk by chunk: a body without a declared length is cut off at the limit.
        let Some(stream) = resp.body() else {
            return Ok(HttpResponse { status, body: Vec::new(), retry_after });
        };
        let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
        // Sized once from the declared length (a pulled page is ~1 MB): no regrowing and
        // re-copying as the chunks arrive. Only up to RESERVE_MAX ahead of the bytes (a relay may
        // declare more than it sends), and a reservation that fails just leaves it to growth.
        let mut body = Vec::new();
        let ahead = declared.map_or(0, |n| n.min(RESERVE_MAX));
        let _ = body.try_reserve_exact(usize::try_from(ahead).unwrap_or(0));
        loop {
            let step = JsFuture::from(reader.read()).await?;
            if js_sys::Reflect::get(&step, &"done".into())?.as_bool().unwrap_or(true) {
                break;
            }
            let chunk: Uint8Array = js_sys::Reflect::get(&step, &"value".into())?.dyn_into()?;
            if body.len() as u64 + u64::from(chunk.length()) > limit {
                controller.abort();
                return Err(too_large());
            }
            let start = body.len();
            body.resize(start + chunk.length() as usize, 0);
            chunk.copy_to(&mut body[start..]);
        }
        Ok(HttpResponse { status, body, retry_after })
    }
}

impl Transport for FetchTransport {
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let timeout_ms = req.timeout_ms;
            let controller = AbortController::new().map_err(|e| TransportError(js_message(&e)))?;
            let timed_out = Rc::new(Cell::new(false));
            let timer = {
                let (controller, timed_out) = (controller.clone(), timed_out.clone());
                gloo_timers::callback::Timeout::new(timeout_ms, move || {
                    timed_out.set(true);
                    controller.abort();
                })
            };
            // Dropped before it settles (a live wait the driver ended), the fetch is aborted
            // rather than left to run to its deadline.
            let abort_on_drop = AbortOnDrop(Some(controller.clone()));
            let out = Self::send_inner(req, &controller).await;
            abort_on_drop.disarm();
            drop(timer); // cancels the timer when the answer came first
            out.map_err(|e| {
                if timed_out.get() {
                    TransportError(format!("the relay did not answer within {timeout_ms} ms (request timed out)"))
                } else if let Some(m) = e.as_string().filter(|m| TransportError(m.clone()).is_response_too_large()) {
                    TransportError(m)
                } else {
                    TransportError(js_message(&e))
                }
            })
        })
    }
}

/// Aborts a fetch whose future is dropped before it settles.
struct AbortOnDrop(Option<AbortController>);

impl AbortOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.abort();
        }
    }
}

/// `Date.now()`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DateClock;

impl Clock for DateClock {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }

    fn precise_ms(&self) -> f64 {
        performance_now()
    }
}

/// Resolves after `ms` milliseconds (windows and workers alike).
pub async fn sleep(ms: u32) {
    gloo_timers::future::TimeoutFuture::new(ms).await;
}

/// `setTimeout`, in a window and in a worker alike.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlooTimer;

impl Timer for GlooTimer {
    fn sleep(&self, ms: u64) -> LocalFuture<'_, ()> {
        // setTimeout takes at most 2^31-1 ms.
        Box::pin(sleep(ms.min(i32::MAX as u64) as u32))
    }
}
