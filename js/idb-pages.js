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
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
      req.onblocked = () => reject(new Error('the page store is blocked by another connection'));
    });
    connections.set(dbName, c);
  }
  return c;
}

/** Whether this context has IndexedDB at all. */
export const available = () => typeof indexedDB !== 'undefined' && indexedDB !== null;

/** Every stored page of `dbName`: `{pageSize, size, pages: [[index, bytes]...]}`. */
export async function load(dbName) {
  const db = await open(dbName);
  const tx = db.transaction(['pages', 'meta'], 'readonly');
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
  const db = await open(dbName);
  const tx = db.transaction(['pages', 'meta'], 'readwrite', { durability: 'strict' });
  let conflict = null;
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
    const store = tx.objectStore('pages');
    for (const [index, bytes] of pages) store.put(bytes, index);
    store.delete(IDBKeyRange.lowerBound(Math.ceil(size / pageSize)));
    meta.put({ pageSize, size, generation: written }, 'header');
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

/** The `{load, store}` pair the engine's IndexedDB storage uses. */
export function pageStore() {
  return available() ? { load, store } : undefined;
}
