//! Rust panics in the browser: without a hook a panic surfaces in JavaScript as a bare
//! `RuntimeError: unreachable`. The hook (installed when the module starts) logs the panic's
//! message and keeps it, so the worker can reject the call that trapped with that message and
//! restart the engine.

use std::cell::RefCell;

use wasm_bindgen::prelude::*;

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

#[wasm_bindgen(start)]
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        web_sys::console::error_1(&JsValue::from_str(&format!("simplysync panicked: {message}")));
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(message));
    }));
}

/// The message of the last Rust panic in this module instance (then forgotten), if any.
#[wasm_bindgen(js_name = takePanicMessage)]
pub fn take_panic_message() -> Option<String> {
    LAST_PANIC.with(|p| p.borrow_mut().take())
}
