// Key custody: the engine keeps the app's secret itself, sealed at rest with a non-extractable
// AES-GCM CryptoKey that lives in IndexedDB (one key per database). The sealed bytes are stored
// in the engine's own database; a copy of the database alone does not reveal the secret.
// Format (PROTOCOL.md, "Key custody"): iv(12) ‖ AES-256-GCM(key, iv, secret, AAD =
// "simplysync-custody-v1:" + dbName). This is the package's only use of WebCrypto; all sync
// crypto stays in the wasm module.

const IDB_NAME = 'simplysync-custody';
const STORE = 'keys';

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

let dbPromise;
function db() {
  if (dbPromise) return dbPromise;
  const p = new Promise((resolve, reject) => {
    const open = indexedDB.open(IDB_NAME, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(STORE, { keyPath: 'dbName' });
    open.onsuccess = () => {
      const conn = open.result;
      // A connection the browser closed (or that another version replaces) is reopened by the
      // next call.
      conn.onclose = () => dbPromise === p && (dbPromise = undefined);
      conn.onversionchange = () => {
        conn.close();
        if (dbPromise === p) dbPromise = undefined;
      };
      resolve(conn);
    };
    open.onerror = () => reject(open.error);
    open.onblocked = () => reject(new Error('the custody database is blocked by another version'));
  });
  p.catch(() => dbPromise === p && (dbPromise = undefined));
  dbPromise = p;
  return p;
}

async function tx(mode, fn) {
  let conn = await db();
  let t;
  try {
    t = conn.transaction(STORE, mode, { durability: 'strict' });
  } catch (e) {
    if (e?.name !== 'InvalidStateError') throw e;
    dbPromise = undefined; // closed under us: once more on a fresh connection
    conn = await db();
    t = conn.transaction(STORE, mode, { durability: 'strict' });
  }
  return request(fn(t.objectStore(STORE)));
}

const get = (dbName) => tx('readonly', (s) => s.get(dbName));
const put = (record) => tx('readwrite', (s) => s.put(record));

const aad = (dbName) => new TextEncoder().encode(`simplysync-custody-v1:${dbName}`);

async function keyFor(dbName, create) {
  const record = await get(dbName);
  if (record?.key) return record.key;
  if (!create) return null;
  const key = await crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, false, ['encrypt', 'decrypt']);
  await put({ dbName, key, stored: false });
  return key;
}

/** The `{wrap, unwrap}` pair the engine uses for `dbName` (none without IndexedDB). */
export function custodyFor(dbName) {
  if (typeof indexedDB === 'undefined' || indexedDB === null) return undefined;
  return {
    async wrap(bytes) {
      const key = await keyFor(dbName, true);
      const iv = crypto.getRandomValues(new Uint8Array(12));
      const ct = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: aad(dbName) }, key, bytes));
      const out = new Uint8Array(12 + ct.length);
      out.set(iv);
      out.set(ct, 12);
      return out;
    },
    async unwrap(bytes) {
      const key = await keyFor(dbName, false);
      if (!key) throw new Error('the key that sealed it is gone from this browser');
      const iv = bytes.slice(0, 12);
      const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv, additionalData: aad(dbName) }, key, bytes.slice(12));
      return new Uint8Array(plain);
    },
  };
}

/** Records that `dbName`'s database now holds its sealed secret (see {@link hasStoredSecret}). */
export async function markStored(dbName) {
  if (typeof indexedDB === 'undefined' || indexedDB === null) return;
  const record = await get(dbName);
  if (record) await put({ ...record, stored: true });
}

/** Whether this browser keeps a secret for `dbName` (then the engine reopens without one). */
export async function hasStoredSecret(dbName) {
  if (typeof indexedDB === 'undefined' || indexedDB === null) return false;
  return (await get(dbName))?.stored === true;
}

/** Forgets `dbName`'s key: its sealed secret can never be opened again. */
export async function forget(dbName) {
  if (typeof indexedDB === 'undefined' || indexedDB === null) return;
  await tx('readwrite', (s) => s.delete(dbName));
}
