// JSON text for values that are plain data through and through, or undefined. The worker hands
// a transaction's ops to the engine as one string when it can (one crossing into the wasm
// module and one parse, instead of a call out of the module per key and value); when it
// cannot, the engine converts the values themselves and names whatever is not data.
//
// Plain data here is a subset of what the engine accepts: null, booleans, strings, finite
// numbers other than -0, arrays, and objects whose prototype is Object.prototype or null and
// that have no toJSON method — with `undefined` treated as JSON.stringify treats it (a key left
// out, null in an array). Anything else (a Date, typed arrays, Map, Set, boxed primitives,
// BigInt, symbols, functions, NaN, Infinity, -0, nesting as deep as the engine's parser refuses,
// cycles, text too long for a string) makes this return undefined, and the engine's own
// conversion decides. The values are checked first, then stringified natively (a replacer
// function would cost more than the whole check): a getter could answer differently the second
// time, but what reaches the worker is a structured clone, which has no getters.

const MAX_DEPTH = 128; // the engine's parser's bound (json/src/json_parse.rs)

function plain(value, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'undefined':
      return true;
    case 'number':
      return Number.isFinite(value) && !Object.is(value, -0);
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        if (typeof value.toJSON === 'function') return false;
        for (let i = 0; i < value.length; i++) if (!plain(value[i], depth + 1)) return false;
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      // An inherited toJSON (a polluted Object.prototype) would change what stringify writes.
      if ((proto !== Object.prototype && proto !== null) || typeof value.toJSON === 'function') return false;
      for (const key of Object.keys(value)) if (!plain(value[key], depth + 1)) return false;
      return true;
    }
    default:
      return false;
  }
}

/** `JSON.stringify(value)` when `value` is plain data, else undefined. */
export function plainJson(value) {
  if (!plain(value, 0)) return undefined;
  try {
    return JSON.stringify(value);
  } catch {
    return undefined; // longer than a string can be: the engine's conversion says so
  }
}
