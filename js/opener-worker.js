// The opener worker itself (started by opener.js): unseals the engine's secret with the same key
// custody, then answers each pull sent ahead ({id, url, bearer, timeoutMs, maxBytes, ownerId})
// with {id, answer: {status, body, retryAfter, opened}} or {id, error}. Before it opens a page
// it sends the pull the engine will send next, so the relay's answer time overlaps the
// decryption. A trapped wasm module (a Rust panic) answers {failed}: the engine stops using it.
import init, { PageOpener } from './simplysync.js';
import { custodyFor } from './custody.js';

let opener = null;
let ahead = null; // {url, bearer, at, answer}: the next pull, sent before it was asked for

const failed = (e) => self.postMessage({ failed: String(e?.message ?? e) });

// One GET with the engine's transport rules (src/web/io.rs): aborted at its deadline, and a
// body past maxBytes (declared or not) not read.
async function get(url, bearer, timeoutMs, maxBytes) {
  const abort = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, timeoutMs);
  const tooLarge = () => {
    abort.abort();
    return new Error(`the relay's answer is larger than ${maxBytes} bytes; it was not read`);
  };
  try {
    const res = await fetch(url, { headers: bearer ? { Authorization: `Bearer ${bearer}` } : {}, signal: abort.signal });
    if (Number(res.headers.get('content-length') ?? 0) > maxBytes) throw tooLarge();
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

self.onmessage = async ({ data }) => {
  if (data.init) {
    try {
      await init();
      // Unsealed as the engine's own open unseals it (the sealed form is base64url), handed to
      // the module and overwritten here.
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
    const sent = ahead?.url === url && ahead.bearer === bearer && Date.now() - ahead.at < 10000 ? ahead.answer : get(url, bearer, timeoutMs, maxBytes);
    ahead = null;
    const answer = await sent;
    if (answer.status === 200) {
      const next = opener.nextUrl(url, answer.body);
      if (next) {
        ahead = { url: next, bearer, at: Date.now(), answer: get(next, bearer, timeoutMs, maxBytes) };
        ahead.answer.catch(() => {}); // asked for later, or never
      }
      answer.opened = opener.open(ownerId, answer.body);
    }
    self.postMessage({ id, answer }, [answer.body.buffer, answer.opened?.buffer].filter(Boolean));
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) return failed(e);
    self.postMessage({ id, error: String(e?.message ?? e) });
  }
};
