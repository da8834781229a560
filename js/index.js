// SimplySync for the browser. Modules, each about one thing:
//   errors.js    SimplySyncError and its codes
//   protocol.js  secrets (in a worker: secrets.js), envelopes and blobs (on this thread)
//   calls.js     calls in flight, with deadlines
//   hub.js       tabs: leader election, routing, restarts
//   engine.js    the Engine facade an app holds
//   watch.js     live queries (watch, watchQuery)
//   react.js     React bindings (the `simplysync/react` entry point)
//   custody.js   the secret, sealed at rest with a non-extractable key (used by the worker)
//   worker.js    the dedicated worker that runs the engine on OPFS
import { Engine } from './engine.js';
import { SimplySyncError, invalid } from './errors.js';
import { Hub } from './hub.js';
import { ownerIdOf, validateSecret } from './protocol.js';
import { forget, hasStoredSecret as storedSecret } from './custody.js';
import { drop as dropPages } from './idb-pages.js';

export { Engine } from './engine.js';
export { SimplySyncError } from './errors.js';
export {
  createMnemonic, createRecoveryKey, decryptBlob, decryptEnvelope, deriveIdentity, encryptBlob, encryptPayload,
  validateSecret,
} from './protocol.js';

/**
 * Declares the app's schema once, for typed rows (index.d.ts infers table and column names and
 * types from it). At run time it returns the schema as it is.
 */
export function defineSchema(schema) {
  return schema;
}

/** Whether this browser keeps a secret for `dbName`: then `createEngine` without `secret` reopens it. */
export async function hasStoredSecret(dbName = 'simplysync.db') {
  if (typeof dbName !== 'string' || !dbName) throw invalid('hasStoredSecret(dbName): dbName must be a non-empty string');
  return storedSecret(dbName);
}

const DEFAULTS = {
  dbName: 'simplysync.db', syncIntervalMs: 5000, autoSync: true, storage: 'auto', callTimeoutMs: 60000,
  longCallTimeoutMs: 600000, openTimeoutMs: 60000, unresponsiveMs: 15000, persist: true,
};

/**
 * Deletes database `dbName` from this browser — its files (OPFS or IndexedDB) and its stored
 * key — without opening it: for a database whose key or phrase is lost, or to log out where no
 * engine is open. Every tab that has it open closes first, with the code DELETED.
 */
export async function deleteDatabase(dbName, { timeoutMs = 30000 } = {}) {
  if (typeof dbName !== 'string' || !dbName) throw invalid('deleteDatabase(dbName): dbName must be a non-empty string');
  const lockName = `simplysync:${dbName}`;
  if (!globalThis.navigator?.locks || typeof BroadcastChannel !== 'function') return wipe(dbName);
  // Every tab of it closes; the request is said again each second while the lock is held (a
  // tab that opened just after the first word, or a frozen one that wakes).
  const channel = new BroadcastChannel(lockName);
  const say = () => channel.postMessage({ type: 'closed', code: 'DELETED', reason: `the database ${dbName} was deleted (deleteDatabase)` });
  say();
  const again = setInterval(say, 1000);
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    // Once the tab that runs it let go (its worker stopped: the files are free).
    await navigator.locks.request(lockName, { signal: abort.signal }, () => {
      clearInterval(again);
      return wipe(dbName);
    });
  } catch (e) {
    if (e?.name !== 'AbortError') throw e;
    throw new SimplySyncError(`${dbName} is still held by a tab that did not close within ${timeoutMs} ms: nothing was deleted`, 'TIMEOUT');
  } finally {
    clearInterval(again);
    clearTimeout(timer);
    channel.close();
  }
}

async function wipe(dbName) {
  if (globalThis.navigator?.storage?.getDirectory) {
    const root = await navigator.storage.getDirectory();
    let dir = null;
    try {
      dir = await root.getDirectoryHandle('simplysync');
    } catch {
      // No OPFS database here at all.
    }
    // A worker that just stopped may hold its files a moment longer.
    for (let attempt = 0; dir; attempt++) {
      try {
        await dir.removeEntry(dbName, { recursive: true });
        break;
      } catch (e) {
        if (e?.name === 'NotFoundError') break;
        if (attempt >= 50) throw new SimplySyncError(`could not delete ${dbName}: ${e?.message ?? e}`, 'STORAGE');
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  if (typeof indexedDB !== 'undefined' && indexedDB !== null) {
    await dropPages(dbName);
    await forget(dbName);
  }
}

/** Opens (or joins, from another tab) the engine of `options.dbName`. */
export async function createEngine(options) {
  if (!options || typeof options !== 'object') throw invalid('createEngine(options): options must be an object');
  const { secret, relays = [], schema } = options;
  if (secret !== undefined && typeof secret !== 'string') throw invalid('options.secret must be a string (a recovery phrase or sf1_ key), or left out to reopen the stored one');
  if (!Array.isArray(relays) || relays.some((r) => typeof r !== 'string')) throw invalid('options.relays must be an array of URLs');
  if (!schema || !Array.isArray(schema.tables)) throw invalid('options.schema must be {schemaVersion?, tables: [...]}');
  if (secret !== undefined) {
    const check = await validateSecret(secret);
    if (!check.ok) throw new SimplySyncError(check.message, check.code);
  }
  const engineOptions = { relays, schema: { schemaVersion: schema.schemaVersion ?? 1, tables: schema.tables } };
  for (const [name, fallback] of Object.entries(DEFAULTS)) engineOptions[name] = options[name] ?? fallback;
  for (const name of ['maxEventBytes', 'maxBlobBytes', 'requestTimeoutMs', 'live', 'registrationTokens']) {
    if (options[name] !== undefined) engineOptions[name] = options[name];
  }
  const hub = new Hub(secret, engineOptions);
  hub.autoSync = engineOptions.autoSync;
  await hub.ready;
  if (hub.role === 'follower' && secret !== undefined) {
    // Another tab runs this database: it must be this secret's.
    const ownerId = await ownerIdOf(secret);
    if (ownerId !== hub.info.ownerId) {
      await hub.close();
      throw new SimplySyncError(
        `another tab has ${engineOptions.dbName} open for owner ${hub.info.ownerId}, but this secret derives owner ${ownerId}`,
        'OWNER_MISMATCH',
      );
    }
  }
  return new Engine(hub);
}
