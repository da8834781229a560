// The opener worker, from the engine's worker: a second wasm instance in a worker of its own
// that fetches and decrypts the pages the engine sends ahead while the engine applies the page
// before (on two cores the restore's decryption then overlaps its SQLite writes). It unseals the
// same secret through the same key custody (custody.js): no secret or key crosses postMessage.
// Until it is ready, after it failed, and where a worker cannot start one, `pull` returns null
// and the engine fetches and decrypts the page itself, as before.

/** Extra time an answer may take beyond the request's own deadline before the opener counts as stuck. */
const GRACE_MS = 5000;

/**
 * Starts an opener worker for `dbName`'s engine, whose secret is sealed as `wrapped`; returns
 * `{pull, state, stop()}` for `engine.setPageOpener`, or null without nested workers.
 */
export function startOpener(dbName, wrapped) {
  let worker;
  try {
    worker = new Worker(new URL('./opener-worker.js', import.meta.url), { type: 'module', name: 'simplysync-opener' });
  } catch {
    return null; // no nested workers here
  }
  const pending = new Map();
  let nextId = 0;
  let state = 'starting';
  const fail = (why) => {
    if (state === 'gone') return;
    state = 'gone';
    worker.terminate();
    for (const p of pending.values()) {
      clearTimeout(p.timer);
      p.reject(new Error(why));
    }
    pending.clear();
  };
  worker.onmessage = ({ data }) => {
    if (data.ready) return state === 'starting' && (state = 'ready');
    if (data.failed !== undefined) return fail(`the opener worker failed: ${data.failed}`);
    const p = pending.get(data.id);
    if (!p) return;
    pending.delete(data.id);
    clearTimeout(p.timer);
    if (data.error !== undefined) p.reject(new Error(data.error));
    else p.resolve(data.answer);
  };
  worker.onerror = (e) => {
    e.preventDefault?.();
    fail(`the opener worker failed: ${e.message ?? 'unknown error'}`);
  };
  worker.postMessage({ init: { dbName, wrapped } });
  return {
    // null (not a promise) when not ready: the engine then sends the pull itself at once.
    pull(url, bearer, timeoutMs, maxBytes, ownerId) {
      if (state !== 'ready') return null;
      const id = ++nextId;
      return new Promise((resolve, reject) => {
        const limit = Math.min(timeoutMs + GRACE_MS, 2 ** 31 - 1);
        const timer = setTimeout(() => fail(`the opener worker did not answer within ${limit} ms`), limit);
        pending.set(id, { resolve, reject, timer });
        worker.postMessage({ id, url, bearer, timeoutMs, maxBytes, ownerId });
      });
    },
    get state() {
      return state;
    },
    stop() {
      fail('the engine closed');
    },
  };
}
