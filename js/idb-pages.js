// The IndexedDB side of the engine's fallback storage (src/store/idb.rs): where OPFS sync access
// handles are missing (WebKit, Firefox private windows, some WebViews), the database lives in
// memory in the worker and each flush writes the pages that changed — and the file size — in
// ONE IndexedDB transaction with durability "strict", so the stored copy is always a committed
// state of the database. Layout (PROTOCOL.md, "IndexedDB storage"): database
// "simplysync-pages:<dbName>", object store "pages" (key: page index, value: the page's bytes)
// and "meta" (key "header": {pageSize, size, generation}).
//
// Only one worker may write a page store. Web Locks make sure of that (one tab runs the engine);
// where a browser has no Web Locks, two tabs could each hold a copy, and the second writer would
// overwrite the first's pages. So every flush checks, inside its transaction, that the stored
// generation is the one this worker loaded or last wrote, and aborts — writing nothing — if
// another worker wrote since.

const connections = new Map();
const generations = new Map();

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function open(dbName) {
  let c = connections.get(dbName);
  if (!c) {
    c = new Promise((resolve, reject) => {
      const req = indexedDB.open(`simplysync-pages:${dbName}`, 1);
      req.onupgradeneeded = () => {
        req.result.createObjectStore('pages');
        req.result.createObjectStore('meta');
      };
      req.onsuccess = () => {
        const db = req.result;
        // A connection the browser closed (WebKit's "connection to Indexed Database server
        // lost", a deletion elsewhere) is reopened by the next call.
        db.onclose = () => connections.get(dbName) === c && connections.delete(dbName);
        db.onversionchange = () => {
          db.close();
          if (connections.get(dbName) === c) connections.delete(dbName);
        };
        resolve(db);
      };
      req.onerror = () => reject(req.error);
      req.onblocked = () => reject(new Error('the page store is blocked by another connection'));
    });
    c.catch(() => connections.get(dbName) === c && connections.delete(dbName));
    connections.set(dbName, c);
  }
  return c;
}

/** A transaction on `dbName`'s store; a connection found closed is reopened once. */
async function transaction(dbName, mode, options) {
  try {
    return (await open(dbName)).transaction(['pages', 'meta'], mode, options);
  } catch (e) {
    if (e?.name !== 'InvalidStateError') throw e;
    connections.delete(dbName);
    return (await open(dbName)).transaction(['pages', 'meta'], mode, options);
  }
}

let poisoned = null;

/**
 * Refuses every later write (the worker calls it when the wasm module trapped: nothing in its
 * memory can be trusted to be a committed state).
 */
export function poison(reason) {
  poisoned = reason;
}

/** Whether this context has IndexedDB at all. */
export const available = () => typeof indexedDB !== 'undefined' && indexedDB !== null;

/** Every stored page of `dbName`: `{pageSize, size, pages: [[index, bytes]...]}`. */
export async function load(dbName) {
  const tx = await transaction(dbName, 'readonly');
  const [header, keys, values] = await Promise.all([
    request(tx.objectStore('meta').get('header')),
    request(tx.objectStore('pages').getAllKeys()),
    request(tx.objectStore('pages').getAll()),
  ]);
  generations.set(dbName, header?.generation ?? 0);
  return { pageSize: header?.pageSize ?? 0, size: header?.size ?? 0, pages: keys.map((k, i) => [k, values[i]]) };
}

/**
 * Writes changed pages and the size in one durable transaction; resolves once it committed.
 * Rejects, writing nothing, if another worker wrote the store since this one loaded it.
 */
export async function store(dbName, pageSize, size, pages) {
  if (poisoned) throw new Error(`the engine stopped (${poisoned}); nothing more is saved until the page reloads`);
  const tx = await transaction(dbName, 'readwrite', { durability: 'strict' });
  let conflict = null; // why the transaction was aborted on purpose
  let written = null;
  const done = new Promise((resolve, reject) => {
    tx.oncomplete = () => {
      // Synchronously, before the next flush's transaction (they run one after another) reads it.
      generations.set(dbName, written);
      resolve();
    };
    tx.onabort = () => reject(conflict ?? tx.error ?? new Error('the IndexedDB transaction was aborted'));
    tx.onerror = () => reject(tx.error);
  });
  const meta = tx.objectStore('meta');
  const header = meta.get('header');
  // The writes are queued from the read's callback, inside the same transaction (never after an
  // await: a transaction may commit once control returns to the event loop). Flushes of one
  // worker may overlap: the generation expected is read here, when this transaction runs.
  header.onsuccess = () => {
    const expected = generations.get(dbName) ?? 0;
    const stored = header.result?.generation ?? 0;
    if (stored !== expected) {
      conflict = new Error(
        `another tab or window wrote database ${dbName} since this one opened it (this browser has no Web Locks to share it): nothing was saved; reload the page`,
      );
      tx.abort();
      return;
    }
    written = expected + 1;
    try {
      const store = tx.objectStore('pages');
      for (const [index, bytes] of pages) store.put(bytes, index);
      store.delete(IDBKeyRange.lowerBound(Math.ceil(size / pageSize)));
      meta.put({ pageSize, size, generation: written }, 'header');
    } catch (e) {
      // A write refused at once (a bad key, a quota): nothing of this transaction is kept.
      conflict = e;
      tx.abort();
    }
  };
  await done;
}

/** Deletes `dbName`'s page store. */
export async function drop(dbName) {
  const c = connections.get(dbName);
  connections.delete(dbName);
  generations.delete(dbName);
  if (c) (await c.catch(() => null))?.close();
  await new Promise((resolve, reject) => {
    const req = indexedDB.deleteDatabase(`simplysync-pages:${dbName}`);
    req.onsuccess = resolve;
    req.onerror = () => reject(req.error);
    req.onblocked = resolve; // deleted once the last connection closes
  });
}

/** Whether IndexedDB holds a database `dbName` with data (without creating one). */
export async function has(dbName) {
  if (!available()) return false;
  const name = `simplysync-pages:${dbName}`;
  if (typeof indexedDB.databases === 'function') {
    const all = await indexedDB.databases().catch(() => null);
    if (all && !all.some((d) => d.name === name)) return false;
  }
  const tx = await transaction(dbName, 'readonly');
  const header = await request(tx.objectStore('meta').get('header'));
  return (header?.size ?? 0) > 0;
}

/** Whether OPFS holds a pool directory for `dbName` (the OPFS storage's files). */
export async function opfsHas(dbName) {
  try {
    const root = await navigator.storage.getDirectory();
    const dir = await (await root.getDirectoryHandle('simplysync')).getDirectoryHandle(dbName);
    for await (const _ of dir.keys()) return true;
    return false;
  } catch {
    return false;
  }
}

/** What the engine's IndexedDB storage uses: `{load, store, has, opfsHas}`. */
export function pageStore() {
  return available() ? { load, store, has, opfsHas } : undefined;
}
