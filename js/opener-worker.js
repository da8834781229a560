// The opener worker itself (started by opener.js): unseals the engine's secret with the same key
// custody, then answers each pull sent ahead ({id, url, bearer, timeoutMs, maxBytes, ownerId})
// with {id, answer: {status, body, retryAfter, opened}} or {id, error}. Before it opens a page
// it sends the pull the engine will send next, so the relay's answer time overlaps the
// decryption. A trapped wasm module (a Rust panic) answers {failed}: the engine stops using it.
import init, { PageOpener } from './simplysync.js';
import { custodyFor } from './custody.js';

let opener = null;
// The next pulls, sent before they were asked for (one per relay being pulled), by URL:
// {bearer, answer, abort}; each dropped (and its fetch aborted) unless asked for within 10 s.
const aheads = new Map();
const AHEAD_KEPT_MS = 10000;
const AHEADS_MAX = 8;

const failed = (e) => self.postMessage({ failed: String(e?.message ?? e) });

// One GET with the engine's transport rules (src/web/io.rs): aborted at its deadline, and a
// body past maxBytes (declared or not) not read.
async function get(url, bearer, timeoutMs, maxBytes, abort = new AbortController()) {
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, Math.min(timeoutMs, 2 ** 31 - 1));
  const tooLarge = () => {
    abort.abort();
    return new Error(`the relay's answer is larger than ${maxBytes} bytes; it was not read`);
  };
  try {
    const res = await fetch(url, { headers: bearer != null ? { Authorization: `Bearer ${bearer}` } : {}, signal: abort.signal });
    const declared = res.headers.get('content-length')?.trim();
    if (/^\d+$/.test(declared ?? '') && Number(declared) > maxBytes) throw tooLarge();
    const chunks = [];
    let size = 0;
    for (const reader = res.body?.getReader(); reader; ) {
      const { done, value } = await reader.read();
      if (done) break;
      if ((size += value.length) > maxBytes) throw tooLarge();
      chunks.push(value);
    }
    const body = new Uint8Array(size);
    chunks.reduce((at, c) => (body.set(c, at), at + c.length), 0);
    return { status: res.status, body, retryAfter: res.headers.get('retry-after') };
  } catch (e) {
    throw timedOut ? new Error(`the relay did not answer within ${timeoutMs} ms (request timed out)`) : e;
  } finally {
    clearTimeout(timer);
  }
}

function sendAhead(url, bearer, timeoutMs, maxBytes) {
  if (aheads.size >= AHEADS_MAX) drop(aheads.keys().next().value, true);
  const abort = new AbortController();
  const answer = get(url, bearer, timeoutMs, maxBytes, abort);
  answer.catch(() => {}); // asked for later, or never
  aheads.set(url, { bearer, answer, abort, timer: setTimeout(() => drop(url, true), AHEAD_KEPT_MS) });
}

function drop(url, abort) {
  const kept = aheads.get(url);
  aheads.delete(url);
  clearTimeout(kept?.timer);
  if (abort) kept?.abort.abort();
}

self.onmessage = async ({ data }) => {
  if (data.init) {
    try {
      await init();
      // Unsealed as the engine's own open unseals it (the sealed form is base64url), handed to
      // the module, and this copy overwritten.
      const sealed = Uint8Array.from(atob(data.init.wrapped.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
      const secret = await custodyFor(data.init.dbName).unwrap(sealed);
      try {
        opener = new PageOpener(secret);
      } finally {
        secret.fill(0);
      }
      self.postMessage({ ready: true });
    } catch (e) {
      failed(e);
    }
    return;
  }
  const { id, url, bearer, timeoutMs, maxBytes, ownerId } = data;
  try {
    const kept = aheads.get(url);
    if (kept) drop(url, kept.bearer !== bearer);
    const answer = await (kept?.bearer === bearer ? kept.answer : get(url, bearer, timeoutMs, maxBytes));
    if (answer.status === 200) {
      // The page is read once: the pull after it is sent (from inside `open`) before the
      // decryption starts.
      answer.opened = opener.open(url, ownerId, answer.body, (next) => {
        if (!aheads.has(next)) sendAhead(next, bearer, timeoutMs, maxBytes);
      });
    }
    self.postMessage({ id, answer }, [answer.body.buffer, answer.opened?.buffer].filter(Boolean));
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) return failed(e);
    self.postMessage({ id, error: String(e?.message ?? e) });
  }
};
