// The dedicated worker that owns one database: OPFS's SyncAccessHandle pool exists only in
// dedicated workers. It loads the wasm engine, answers {id, method, args, requestId, firstSend} messages
// from the tab that started it, posts engine events ({event, data}) back, and keeps the secret
// in custody (custody.js). A Rust panic traps the wasm module: the answer then says `fatal`,
// with the panic's message, and the tab starts a fresh worker.
import init, * as wasm from './simplysync.js';
import { custodyFor, forget, markStored } from './custody.js';
import { startOpener } from './opener.js';
import { drop as dropPages, pageStore, poison } from './idb-pages.js';
import { plainJson } from './plain-json.js';
import { secretCall } from './secrets.js';

const { Engine, takePanicMessage, wipeDatabase } = wasm;
/** What protocol.js asks of this script when it runs as its secrets' worker (no engine). */
const SECRET_CALLS = new Set(['createMnemonic', 'createRecoveryKey', 'validateSecret', 'ownerIdOf']);

const ready = init();
// Each call awaits `ready` and answers its failure (a CSP without 'wasm-unsafe-eval'); until the
// first call comes, nothing else may see the rejection as unhandled — Chromium reports that on
// the page as an uncaught error.
ready.catch(() => {});
let engine = null;
let opener = null;
let dbName = null;
let schema = null;

const post = (msg, transfer) => self.postMessage(msg, transfer ?? []);

// Engine methods a tab may call, with the number of arguments before the request id of the
// mutating ones (anything else is refused).
const METHODS = new Set([
  'get', 'list', 'query', 'queryTables', 'sync', 'notify', 'relayStatuses', 'relayStatusesLocal', 'getBlob', 'getBlobChunk', 'blobManifest',
  'recoveryPhrase', 'pendingRekey', 'quarantined', 'deferred', 'storage', 'setVisible', 'setRegistrationToken',
]);
const MUTATING = {
  transaction: 1, putBlob: 3, purgeDeleted: 0, purgeRows: 2, addRelay: 1, removeRelay: 1, retryQuarantined: 0,
  retrySetAside: 0, rekey: 1, confirmRekey: 0,
};

async function open(secret, options) {
  close();
  engine = await Engine.open(secret ?? undefined, options, custodyFor(options.dbName), pageStore());
  dbName = options.dbName;
  schema = options.schema;
  const storage = engine.storage();
  // On IndexedDB storage a commit is durable only once flushed: tabs hear of a local write after
  // its flush, so no page shows a write that a reload could still take back (OPFS: durable at
  // commit). Pulled pages are told at once: a reload before the pass's flush pulls them again.
  // A failed flush is still told (the call reports STORAGE; the write is saved with the next).
  const durableAtCommit = storage.mode !== 'idb';
  engine.onChange((data) => {
    if (durableAtCommit || data.source !== 'local') return post({ event: 'change', data });
    // Not from inside the engine's callback: the flush runs once the commit has returned.
    queueMicrotask(() => flushed().catch(() => {}).then(() => post({ event: 'change', data })));
  });
  engine.onStatus((data) => post({ event: 'status', data }));
  engine.onProgress((data) => post({ event: 'progress', data }));
  if (storage.mode !== 'memory') await markStored(dbName);
  if (storage.mode !== 'memory') useOpener();
  return { ownerId: engine.ownerId, deviceId: engine.deviceId, storage, schema, status: engine.relayStatusesLocal() };
}

// Pages sent ahead are fetched and decrypted in an opener worker (opener.js) when the secret is
// in key custody here, so that worker can unseal it too; started again after a re-key (the
// new owner's pages need the new keys).
function useOpener() {
  opener?.stop();
  const wrapped = engine.storedWrappedSecret();
  opener = wrapped ? startOpener(dbName, wrapped) : null;
  engine.setPageOpener(opener);
}

function close() {
  opener?.stop();
  opener = null;
  if (!engine) return;
  // Releases the database at once; the wasm object itself is not freed: calls still running
  // (a sync waiting on a relay) hold it and settle with CLOSED-class errors, where freeing it
  // under them would trap ("null pointer passed to rust"). The worker ends with the tab.
  engine.close();
  engine = null;
}

/**
 * Deletes the database's files, its OPFS directory and its key: the secret is gone for good.
 * With `requireSynced`, only once every change reached every relay (else NOT_SYNCED, and the
 * engine stays open): checked and closed in one task, so no write slips in between.
 */
async function reset(options) {
  if (options?.requireSynced) {
    if (!engine) throw coded('the engine is not open, so whether every change reached a relay is unknown', 'NOT_SYNCED');
    const statuses = engine.relayStatusesLocal();
    if (!statuses.length) throw coded('this database has no relay: its changes exist only on this device', 'NOT_SYNCED');
    // A relay never synced with may not have been sent the rows it is owed (its backfill runs
    // in its first pass), whatever its pending count says.
    const behind = statuses.filter((s) => s.lastSyncAt === null || s.pending > 0 || s.setAside.events > 0 || s.setAside.chunks > 0);
    if (behind.length) {
      const which = behind
        .map((s) => `${s.url} (${s.lastSyncAt === null ? 'never synced, ' : ''}${s.pending} pending, ${s.setAside.events + s.setAside.chunks} set aside)`)
        .join(', ');
      throw coded(`changes have not reached every relay: ${which}`, 'NOT_SYNCED');
    }
  }
  close();
  if (!dbName) return null;
  // A call that was still running holds the database a moment longer: wait for it.
  for (let attempt = 0; ; attempt++) {
    try {
      wipeDatabase(dbName);
      break;
    } catch (e) {
      if (attempt >= 50) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  try {
    const root = await navigator.storage.getDirectory();
    const dir = await root.getDirectoryHandle('simplysync');
    await dir.removeEntry(dbName, { recursive: true });
  } catch {
    // No OPFS directory (memory storage) or already gone.
  }
  await dropPages(dbName).catch(() => {}); // the IndexedDB copy, if the database lived there
  await forget(dbName);
  return null;
}

const coded = (message, code) => Object.assign(new Error(message), { code });

async function run(method, args, requestId, firstSend, callId) {
  if (method === 'open') return open(...args);
  if (method === 'close') return close();
  if (method === 'reset') return reset(args[0]);
  if (SECRET_CALLS.has(method)) return secretCall(wasm, method, args);
  if (!engine) throw Object.assign(new Error('the engine is not open'), { code: 'CLOSED' });
  if (method in MUTATING) {
    const padded = args.slice(0, MUTATING[method]);
    while (padded.length < MUTATING[method]) padded.push(undefined);
    let value;
    if (method === 'transaction') {
      value = engine.transaction(padded[0], requestId ?? undefined, plainJson(padded[0]), firstSend === true);
    } else if (method === 'putBlob') {
      // Each sealed chunk is told to the asking tab while the put runs (the call's own id).
      const progress = callId ? (done, total) => post({ progress: callId, done, total }) : undefined;
      value = engine.putBlob(...padded, requestId ?? undefined, progress);
    } else {
      value = await engine[method](...padded, requestId ?? undefined);
    }
    if (method === 'rekey' || method === 'confirmRekey') {
      post({ event: 'owner', data: engine.ownerId });
      if (opener) useOpener();
    }
    return value;
  }
  if (METHODS.has(method)) return engine[method](...args);
  throw Object.assign(new Error(`unknown method ${method}`), { code: 'INVALID_ARGUMENT' });
}

self.onmessage = async ({ data }) => {
  const { id, method, args, requestId, firstSend, progress } = data;
  // The heartbeat (hub.js): answered as soon as this worker's event loop runs.
  if (method === 'ping') return post({ id, ok: true, value: null });
  let value;
  try {
    await ready;
    value = await run(method, args ?? [], requestId, firstSend, progress ? id : undefined);
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) {
      const message = takePanicMessage() ?? e.message;
      engine = null; // the module trapped: nothing in it can be trusted any more
      poison('the engine crashed'); // and none of its memory may reach IndexedDB
      post({ id, ok: false, fatal: true, error: { message: `the engine crashed: ${message}`, code: 'PANIC' } });
      return;
    }
    // A call that failed may still have committed locally (a re-key whose sync failed): save it.
    await flushed().catch(() => {});
    post({ id, ok: false, error: { message: e?.message ?? String(e), code: e?.code ?? 'INTERNAL' } });
    return;
  }
  try {
    // Acknowledge only what is durable (IndexedDB storage flushes here; a no-op on OPFS).
    await flushed();
  } catch (e) {
    const conflict = String(e?.message ?? e).includes('another tab or window wrote database');
    // Another tab wrote the page store (no Web Locks here): this worker's copy is stale. Fatal:
    // the tab restarts its worker, which loads the current state.
    post({ id, ok: false, fatal: conflict, error: { message: e?.message ?? String(e), code: e?.code ?? 'STORAGE' } });
    return;
  }
  post({ id, ok: true, value }, value instanceof Uint8Array ? [value.buffer] : undefined);
};

/** Saves what the last call changed (IndexedDB storage; nothing to do on OPFS). */
async function flushed() {
  if (engine) await engine.flush();
}
