//! JavaScript values ↔ the protocol's [`Json`], losslessly: strings keep lone surrogates
//! (JavaScript strings are UTF-16), numbers stay doubles. Anything that is not JSON data
//! (functions, symbols, `Date`, typed arrays, non-finite numbers) is an error naming its path.

use js_sys::{Array, JsString, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::protocol::canonical::write_canonical_json;
use crate::protocol::json::{JsonObject, JsonString};
use crate::protocol::json_fields::FromJson;
use crate::protocol::json_write::ToJson;
use crate::protocol::Json;

const MAX_DEPTH: usize = 128;

/// Converts a JS value to JSON; `path` names the argument in errors.
pub fn to_json(v: &JsValue, path: &str) -> Result<Json, String> {
    convert(v, &Path::Root(path), 0)
}

/// Where a value sits in the argument (`row.tags[2]`): formatted only for an error, so a
/// conversion allocates nothing per value for its error messages.
enum Path<'a> {
    Root(&'a str),
    Index(&'a Path<'a>, usize),
    Key(&'a Path<'a>, &'a JsonString),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
            Path::Key(parent, k) => write!(f, "{parent}.{}", k.to_string_lossy()),
        }
    }
}

fn js_string(s: &JsString) -> JsonString {
    // A lone surrogate decodes to U+FFFD; only then is the string looked at unit by unit
    // (one call out of the module instead of two per string).
    if let Some(text) = s.as_string().filter(|t| !t.contains('\u{FFFD}') || s.is_valid_utf16()) {
        return JsonString::from(text);
    }
    let units: Vec<u16> = s.iter().collect();
    JsonString::from_utf16(&units)
}

fn convert(v: &JsValue, path: &Path<'_>, depth: usize) -> Result<Json, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
    }
    if v.is_null() || v.is_undefined() {
        return Ok(Json::Null);
    }
    if let Some(b) = v.as_bool() {
        return Ok(Json::Bool(b));
    }
    if let Some(x) = v.as_f64() {
        return if x.is_finite() {
            Ok(Json::number(x))
        } else {
            Err(format!("{path}: {} is not a finite number", super::io::js_string(v)))
        };
    }
    if let Some(s) = v.dyn_ref::<JsString>() {
        return Ok(Json::String(js_string(s)));
    }
    if Array::is_array(v) {
        let arr: &Array = v.unchecked_ref();
        let mut out = Vec::with_capacity(arr.length() as usize);
        for (i, item) in arr.iter().enumerate() {
            out.push(convert(&item, &Path::Index(path, i), depth + 1)?);
        }
        return Ok(Json::Array(out));
    }
    if v.is_object() && !v.is_function() {
        let obj: &Object = v.unchecked_ref();
        let proto = Object::get_prototype_of(obj);
        let plain = Object::get_prototype_of(&Object::new());
        if !(proto.is_null() || Object::is(&proto, &plain)) {
            return Err(format!("{path}: only plain objects, arrays, strings, numbers, booleans and null are data"));
        }
        let mut members = Vec::new();
        for entry in Object::entries(obj).iter() {
            let pair: Array = entry.unchecked_into();
            let key: JsString = pair.get(0).unchecked_into();
            let value = pair.get(1);
            if value.is_undefined() {
                continue; // as JSON.stringify does
            }
            let k = js_string(&key);
            let child = convert(&value, &Path::Key(path, &k), depth + 1)?;
            members.push((k, child));
        }
        return Ok(Json::Object(JsonObject::from_members(members)));
    }
    Err(format!("{path}: a {} is not JSON data", v.js_typeof().as_string().unwrap_or_default()))
}

fn string_to_js(s: &JsonString) -> JsValue {
    match s.as_str() {
        Some(text) => JsValue::from_str(text),
        None => {
            let units: Vec<u16> = s.code_units().collect();
            JsString::from_char_code(&units).into()
        }
    }
}

/// Converts JSON to a JS value (plain objects and arrays).
pub fn to_js(v: &Json) -> JsValue {
    match v {
        Json::Null => JsValue::NULL,
        Json::Bool(b) => JsValue::from_bool(*b),
        Json::Number(n) => JsValue::from_f64(n.get()),
        Json::String(s) => string_to_js(s),
        Json::Array(items) => items.iter().map(to_js).collect::<Array>().into(),
        Json::Object(map) => {
            // Every key is defined as an own data property, as `JSON.parse` makes it: an
            // assignment (`Reflect.set`) would run `Object.prototype`'s `__proto__` setter
            // (changing the object's prototype, or nothing), and under a frozen
            // `Object.prototype` (SES, hardened realms) it silently skips a key such as
            // `toString` whose inherited property is read-only.
            let obj = Object::new();
            for (k, val) in map {
                own_data_property(&obj, &string_to_js(k), &to_js(val));
            }
            obj.into()
        }
    }
}

/// Defines `key` on `obj` as an ordinary own property (enumerable, writable, configurable).
fn own_data_property(obj: &Object, key: &JsValue, value: &JsValue) {
    // No prototype: a descriptor's fields are read with inheritance, and an app's
    // `Object.prototype.get` must not turn this into an accessor.
    let descriptor = Object::create(JsValue::NULL.unchecked_ref());
    let flags = [("writable", JsValue::TRUE), ("enumerable", JsValue::TRUE), ("configurable", JsValue::TRUE)];
    for (name, v) in [("value", value.clone())].into_iter().chain(flags) {
        let _ = Reflect::set(&descriptor, &JsValue::from_str(name), &v);
    }
    // Defining a property on a fresh plain object cannot fail.
    let _ = Reflect::define_property(obj, key, &descriptor);
}

/// A JSON value as a JS value through `JSON.parse` of its canonical JSON, as [`array_to_js`]
/// does for many: one string across instead of a call out of the module per key and value, and
/// the same values as [`to_js`] (a key such as `__proto__` is an own key in both).
pub fn json_to_js(v: &Json) -> JsValue {
    js_sys::JSON::parse(&crate::protocol::to_canonical_json(v)).unwrap_or_else(|_| to_js(v))
}

/// A JS array of `items`, through `JSON.parse` of their canonical JSON: one string across
/// instead of a call out of the module per key and value, and the same values as [`to_js`]
/// (lone surrogates are escaped in the text; keys come in the same order).
pub fn array_to_js(items: &[Json]) -> JsValue {
    let mut text = String::with_capacity(items.len() * 64 + 2);
    text.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        write_canonical_json(item, &mut text);
    }
    text.push(']');
    // Canonical JSON always parses; were it ever refused, the values go across one by one.
    js_sys::JSON::parse(&text).unwrap_or_else(|_| items.iter().map(to_js).collect::<Array>().into())
}

/// A record or report as a JS value through `JSON.parse` of its JSON text ([`ToJson`]): one
/// string across instead of a call out of the module per key and value (the change event of a
/// 10,000-row transaction), and one writer per type for JS, storage and the wire alike. Exact
/// for what the engine reports: strings, enums, integers within 2^53 and finite doubles
/// (written as JavaScript writes them). `null` if `JSON.parse` refused it, which valid JSON
/// text never is.
pub fn record_to_js<T: ToJson + ?Sized>(v: &T) -> JsValue {
    js_sys::JSON::parse(&v.to_json_text()).unwrap_or(JsValue::NULL)
}

/// Reads a JS argument as `T`: the value is first checked as JSON data ([`to_json`]: errors
/// name the path of a function, `Date`, `NaN`…), then read by `T`'s [`FromJson`], which JS
/// arguments, stored records and relay answers share. `path` names the argument in errors
/// (`options: missing field `relays``, `options.syncIntervalMs: expected a number, …`).
pub fn from_js<T: FromJson>(v: &JsValue, path: &str) -> Result<T, String> {
    T::from_json(&to_json(v, path)?, path).map_err(|e| e.0)
}
