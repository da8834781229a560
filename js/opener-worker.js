// The opener worker itself (started by opener.js): unseals the engine's secret with the same key
// custody, then answers each pull sent ahead ({id, url, bearer, timeoutMs, maxBytes, ownerId})
// with {id, answer: {status, body, retryAfter, opened}} or {id, error}. Before it opens a page
// it sends the pull the engine will send next, so the relay's answer time overlaps the
// decryption, and opens that page as soon as it arrives: up to DEPTH pages of a pull are
// fetched and opened before the engine asks for them. A trapped wasm module (a Rust panic) answers {failed}: the engine stops using it.
import init, { PageOpener } from './simplysync.js';
import { custodyFor } from './custody.js';

let opener = null;
// Pages fetched before they were asked for, by URL: {req, result, abort, timer, next}.
// `req` is the pull's bearer, deadline, size cap and owner (those of the engine's pull it
// follows); `result` resolves once the page is fetched and (a 200 page) opened; `next` is then
// the URL of the page after it. Each is dropped (its fetch aborted) unless asked for within 10 s.
const aheads = new Map();
const AHEAD_KEPT_MS = 10000;
const AHEADS_MAX = 8;
// How many pages of one relay's pull may be fetched and opened before the engine asks for
// them: two, so a page is ready when the engine comes back for it even when this worker was
// slowed down while it opened the one before.
const DEPTH = 2;

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

// Fetches `url` and, when it answers a page, opens it: {answer, next}. Before the decryption
// starts, the page after it is fetched ahead (`next`, within DEPTH).
function fetchAndOpen(url, req, abort) {
  return get(url, req.bearer, req.timeoutMs, req.maxBytes, abort).then((answer) => {
    let next = null;
    if (answer.status === 200) {
      try {
        answer.opened = opener.open(url, req.ownerId, answer.body, (n) => {
          next = n;
          sendAhead(n, req);
        });
      } catch (e) {
        // A trapped module (a Rust panic) is reported at once, even for a page opened ahead
        // that the engine never asks for: the engine stops using this worker.
        if (e instanceof WebAssembly.RuntimeError) failed(e);
        throw e;
      }
    }
    return { answer, next };
  });
}

// The relay and owner a pull URL belongs to (pages ahead are counted per chain).
const chainOf = (url) => {
  const u = new URL(url);
  return `${u.origin}${u.pathname}?${u.searchParams.get('ownerId')}`;
};

function sendAhead(url, req) {
  if (aheads.has(url)) return;
  const chain = chainOf(url);
  if ([...aheads.keys()].filter((u) => chainOf(u) === chain).length >= DEPTH) return;
  if (aheads.size >= AHEADS_MAX) drop(aheads.keys().next().value, true);
  const abort = new AbortController();
  const kept = { req, abort, next: null, timer: setTimeout(() => drop(url, true), AHEAD_KEPT_MS) };
  const mine = () => aheads.get(url) === kept;
  kept.result = fetchAndOpen(url, req, abort).then((r) => {
    kept.next = r.next;
    // Kept for 10 s from when it is ready, not from when it was sent for.
    if (mine()) {
      clearTimeout(kept.timer);
      kept.timer = setTimeout(() => drop(url, true), AHEAD_KEPT_MS);
    }
    return r;
  });
  // A failed fetch is not kept: the engine's own request for that page fetches it afresh.
  kept.result.catch(() => mine() && drop(url, false));
  aheads.set(url, kept);
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
  const { id, url, ...req } = data;
  try {
    const kept = aheads.get(url);
    const same = kept?.req.bearer === req.bearer;
    if (kept) drop(url, !same);
    const { answer, next } = await (same ? kept.result : fetchAndOpen(url, req));
    self.postMessage({ id, answer }, [answer.body.buffer, answer.opened?.buffer].filter(Boolean));
    // The engine came for a page: the ones after it in the same pull are fetched next (each
    // with its own pull's token), within DEPTH. Another relay's pages ahead wait for their own
    // pull's next ask (or are dropped unasked after 10 s).
    if (next) sendAhead(next, req);
    const chain = chainOf(url);
    for (const [u, k] of [...aheads]) if (k.next && chainOf(u) === chain) sendAhead(k.next, k.req);
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) return failed(e);
    self.postMessage({ id, error: String(e?.message ?? e) });
  }
};
