//! Rust errors → JavaScript `Error` objects with a stable `code` property.

use js_sys::Reflect;
use wasm_bindgen::JsValue;

use crate::engine::EngineError;
use crate::protocol::entropy::EntropyError;
use crate::protocol::IdentityError;

/// An error as JavaScript sees it: `new Error(message)` with `code` set.
pub(crate) fn js_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    // Setting a property on a fresh Error object cannot fail.
    let _ = Reflect::set(&err, &JsValue::from_str("code"), &JsValue::from_str(code));
    err.into()
}

/// An engine error with its code.
pub(crate) fn engine_error(e: &EngineError) -> JsValue {
    js_error(e.code(), &e.to_string())
}

/// Errors that have a stable code for JavaScript.
pub(crate) trait ErrorCode: std::fmt::Display {
    /// The stable machine-readable code.
    fn code(&self) -> &'static str;

    fn to_js(&self) -> JsValue {
        js_error(self.code(), &self.to_string())
    }
}

impl ErrorCode for IdentityError {
    fn code(&self) -> &'static str {
        EngineError::Identity(self.clone()).code()
    }
}

impl ErrorCode for EntropyError {
    fn code(&self) -> &'static str {
        "ENTROPY_UNAVAILABLE"
    }
}
