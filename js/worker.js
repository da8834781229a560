// The dedicated worker that owns the database: OPFS's SyncAccessHandle pool exists only in
// dedicated workers. It loads the wasm engine, answers {id, method, args} messages from the tab
// that started it, and posts engine events ({event, data}) back.
import init, { Engine } from './simplysync.js';

const ready = init();
let engine = null;

const post = (msg) => self.postMessage(msg);

// Engine methods a tab may call (anything else is refused).
const METHODS = new Set([
  'transaction', 'get', 'list', 'query', 'sync', 'notify', 'relayStatuses', 'addRelay', 'removeRelay',
  'purgeDeleted', 'purgeRows', 'putBlob', 'getBlob', 'getBlobChunk', 'blobManifest', 'recoveryPhrase',
  'rekey', 'confirmRekey', 'pendingRekey', 'retrySetAside', 'retryQuarantined', 'quarantined', 'deferred', 'storage',
]);

async function open(secret, options) {
  engine = await Engine.open(secret, options);
  engine.onChange((data) => post({ event: 'change', data }));
  engine.onStatus((data) => post({ event: 'status', data }));
  engine.onProgress((data) => post({ event: 'progress', data }));
  return { ownerId: engine.ownerId, deviceId: engine.deviceId, storage: engine.storage() };
}

self.onmessage = async ({ data }) => {
  const { id, method, args } = data;
  try {
    await ready;
    let value;
    if (method === 'open') {
      value = await open(...args);
    } else if (method === 'close') {
      engine?.close();
      engine?.free();
      engine = null;
      value = null;
    } else if (!engine) {
      throw Object.assign(new Error('the engine is not open'), { code: 'CLOSED' });
    } else if (METHODS.has(method)) {
      value = await engine[method](...args);
    } else {
      throw Object.assign(new Error(`unknown method ${method}`), { code: 'INVALID_ARGUMENT' });
    }
    post({ id, ok: true, value });
  } catch (e) {
    post({ id, ok: false, error: { message: e?.message ?? String(e), code: e?.code ?? 'INTERNAL' } });
  }
};
