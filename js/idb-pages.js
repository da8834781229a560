// The IndexedDB side of the engine's fallback storage (src/store/idb.rs): where OPFS sync access
// handles are missing (WebKit, Firefox private windows, some WebViews), the database lives in
// memory in the worker and each flush writes the pages that changed — and the file size — in
// ONE IndexedDB transaction with durability "strict", so the stored copy is always a committed
// state of the database. Layout (PROTOCOL.md, "IndexedDB storage"): database
// "simplysync-pages:<dbName>", object store "pages" (key: page index, value: the page's bytes)
// and "meta" (key "header": {pageSize, size}).

const connections = new Map();

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
  return { pageSize: header?.pageSize ?? 0, size: header?.size ?? 0, pages: keys.map((k, i) => [k, values[i]]) };
}

/** Writes changed pages and the size in one durable transaction; resolves once it committed. */
export async function store(dbName, pageSize, size, pages) {
  const db = await open(dbName);
  const tx = db.transaction(['pages', 'meta'], 'readwrite', { durability: 'strict' });
  const done = new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onabort = () => reject(tx.error ?? new Error('the IndexedDB transaction was aborted'));
    tx.onerror = () => reject(tx.error);
  });
  const store = tx.objectStore('pages');
  for (const [index, bytes] of pages) store.put(bytes, index);
  store.delete(IDBKeyRange.lowerBound(Math.ceil(size / pageSize)));
  tx.objectStore('meta').put({ pageSize, size }, 'header');
  await done;
}

/** Deletes `dbName`'s page store. */
export async function drop(dbName) {
  const c = connections.get(dbName);
  connections.delete(dbName);
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
