// SimplySync for the browser: the thin facade over the wasm engine.
//
// The engine runs in a dedicated worker (OPFS's sync access handles exist only there), and the
// OPFS pool is exclusive per origin — so exactly one tab (the leader, elected with Web Locks)
// runs the worker. Other tabs of the same app send their calls to the leader over a
// BroadcastChannel and receive its change events. When the leader tab closes, its lock passes
// to a waiting tab, which starts its own worker and re-sends calls that were not answered;
// writes carry a request id the engine records with the write, so a re-sent write is applied
// once.
import init, * as wasm from './simplysync.js';

let wasmReady;
function loadWasm() {
  return (wasmReady ??= init());
}

/** An error from SimplySync, with a stable machine-readable `code`. */
export class SimplySyncError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'SimplySyncError';
    this.code = code;
  }
}

const revive = (e) => new SimplySyncError(e?.message ?? String(e), e?.code ?? 'INTERNAL');
const invalid = (message) => new SimplySyncError(message, 'INVALID_ARGUMENT');

function wrapSync(fn) {
  try {
    return fn();
  } catch (e) {
    throw revive(e);
  }
}

/** Mints a new 12-word recovery phrase. */
export async function createMnemonic() {
  await loadWasm();
  return wrapSync(() => wasm.createMnemonic());
}

/** Mints a new `sf1_` recovery key. */
export async function createRecoveryKey() {
  await loadWasm();
  return wrapSync(() => wasm.createRecoveryKey());
}

/** Checks a secret without throwing: `{ok: true, kind}` or `{ok: false, code, message}`. */
export async function validateSecret(secret) {
  await loadWasm();
  try {
    return { ok: true, kind: wasm.validateSecret(String(secret ?? '')) };
  } catch (e) {
    return { ok: false, code: e.code, message: e.message };
  }
}

/** Derives an identity handle (only `ownerId` and `streamId()` are visible). */
export async function deriveIdentity(secret) {
  await loadWasm();
  return wrapSync(() => wasm.deriveIdentity(secret));
}

/** Seals a payload into an envelope. */
export async function encryptPayload(identity, meta, payload) {
  await loadWasm();
  return wrapSync(() => wasm.encryptPayload(identity, meta, payload));
}

/** Opens an envelope; throws `CRYPTO` for a foreign owner or any tampering. */
export async function decryptEnvelope(identity, envelope) {
  await loadWasm();
  return wrapSync(() => wasm.decryptEnvelope(identity, envelope));
}

/** Seals bytes as a blob: `{manifest, chunks: [{hash, bytes}]}`. */
export async function encryptBlob(identity, bytes, { mimeType, chunkSize } = {}) {
  await loadWasm();
  return wrapSync(() => wasm.encryptBlob(identity, toBytes(bytes), String(mimeType ?? 'application/octet-stream'), chunkSize));
}

/** Verifies and decrypts a blob from its manifest and stored chunks. */
export async function decryptBlob(identity, manifest, chunks) {
  await loadWasm();
  return wrapSync(() => wasm.decryptBlob(identity, manifest, chunks.map(toBytes)));
}

function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw invalid('expected a Uint8Array, an ArrayBuffer or a typed array');
}

const randomId = () =>
  globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;

/** Elects the leader tab and routes calls to its worker. */
class Hub {
  constructor(secret, options) {
    this.secret = secret;
    this.options = options;
    this.tabId = randomId();
    this.lockName = `simplysync:${options.dbName}`;
    this.seq = 0;
    this.pending = new Map(); // calls sent to the leader (or waiting for one): id -> {method, args, resolve, reject}
    this.workerCalls = new Map();
    this.listeners = { change: new Set(), status: new Set(), progress: new Set() };
    this.role = 'starting';
    this.leaderId = null;
    this.closed = false;
    this.ready = new Promise((resolve, reject) => {
      this.markReady = resolve;
      this.failReady = reject;
    });
    this.channel = typeof BroadcastChannel === 'function' ? new BroadcastChannel(this.lockName) : null;
    if (this.channel) this.channel.onmessage = (e) => this.onChannel(e.data);
    if (globalThis.navigator?.locks && this.channel) {
      navigator.locks.request(this.lockName, () => this.lead()).catch((e) => this.failReady(revive(e)));
      this.channel.postMessage({ type: 'hello', from: this.tabId });
    } else {
      // No Web Locks or BroadcastChannel: this tab runs the engine itself.
      this.lead();
    }
  }

  async lead() {
    if (this.closed) return;
    this.worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'simplysync' });
    this.worker.onmessage = (e) => this.onWorker(e.data);
    this.worker.onerror = (e) => this.failReady(new SimplySyncError(`the engine worker failed: ${e.message ?? e}`, 'WORKER'));
    try {
      this.info = await this.toWorker('open', [this.secret, this.options], randomId());
    } catch (e) {
      this.worker.terminate();
      this.worker = null;
      this.failReady(e);
      return; // releases the lock: another tab may try
    }
    this.role = 'leader';
    this.leaderId = this.tabId;
    this.channel?.postMessage({ type: 'leader', from: this.tabId });
    this.markReady();
    // Calls this tab had sent to a previous leader that never answered: run them here.
    for (const [id, call] of this.pending) {
      this.pending.delete(id);
      this.toWorker(call.method, call.args, id).then(call.resolve, call.reject);
    }
    // Hold the lock (and the database) until this tab closes or the engine is closed.
    await new Promise((resolve) => (this.releaseLock = resolve));
  }

  toWorker(method, args, id) {
    return new Promise((resolve, reject) => {
      this.workerCalls.set(id, { resolve, reject });
      this.worker.postMessage({ id, method, args });
    });
  }

  onWorker(msg) {
    if (msg.event) {
      this.emit(msg.event, msg.data);
      this.channel?.postMessage({ type: 'event', event: msg.event, data: msg.data });
      return;
    }
    const call = this.workerCalls.get(msg.id);
    if (!call) return;
    this.workerCalls.delete(msg.id);
    if (msg.ok) call.resolve(msg.value);
    else call.reject(revive(msg.error));
  }

  onChannel(msg) {
    switch (msg.type) {
      case 'hello':
        if (this.role === 'leader') this.channel.postMessage({ type: 'leader', from: this.tabId });
        break;
      case 'leader':
        if (msg.from === this.tabId) break;
        this.leaderId = msg.from;
        if (this.role !== 'leader') {
          this.role = 'follower';
          this.markReady();
          for (const [id, call] of this.pending) this.sendToLeader(id, call);
        }
        break;
      case 'bye':
        if (msg.from === this.leaderId) this.leaderId = null; // the next leader will announce itself
        break;
      case 'call':
        if (this.role === 'leader' && msg.to === this.tabId) {
          this.toWorker(msg.method, msg.args, msg.id).then(
            (value) => this.channel.postMessage({ type: 'result', id: msg.id, to: msg.from, ok: true, value }),
            (e) => this.channel.postMessage({ type: 'result', id: msg.id, to: msg.from, ok: false, error: { message: e.message, code: e.code } }),
          );
        }
        break;
      case 'result': {
        if (msg.to !== this.tabId) break;
        const call = this.pending.get(msg.id);
        if (!call) break;
        this.pending.delete(msg.id);
        if (msg.ok) call.resolve(msg.value);
        else call.reject(revive(msg.error));
        break;
      }
      case 'event':
        if (this.role !== 'leader') this.emit(msg.event, msg.data);
        break;
    }
  }

  sendToLeader(id, call) {
    this.channel.postMessage({ type: 'call', id, from: this.tabId, to: this.leaderId, method: call.method, args: call.args });
  }

  call(method, args = []) {
    if (this.closed) return Promise.reject(new SimplySyncError('the engine is closed', 'CLOSED'));
    const id = `${this.tabId}:${++this.seq}`;
    if (this.role === 'leader') return this.toWorker(method, args, id);
    return new Promise((resolve, reject) => {
      const call = { method, args, resolve, reject };
      this.pending.set(id, call);
      if (this.leaderId) this.sendToLeader(id, call);
    });
  }

  /** A fresh request id for a write, so a re-sent write applies once. */
  requestId() {
    return `${this.tabId}:w${++this.seq}`;
  }

  on(event, fn) {
    this.listeners[event].add(fn);
    return () => this.listeners[event].delete(fn);
  }

  emit(event, data) {
    for (const fn of this.listeners[event]) {
      try {
        fn(data);
      } catch (e) {
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }

  async close() {
    if (this.closed) return;
    if (this.role === 'leader') {
      await this.toWorker('close', [], randomId()).catch(() => {});
      this.worker.terminate();
      this.channel?.postMessage({ type: 'bye', from: this.tabId });
      this.releaseLock?.();
    }
    this.closed = true;
    for (const call of this.pending.values()) call.reject(new SimplySyncError('the engine is closed', 'CLOSED'));
    this.pending.clear();
    this.channel?.close();
  }
}

/** A SimplySync engine. Create one with {@link createEngine}. */
export class Engine {
  constructor(hub, info) {
    this.hub = hub;
    this.ownerId = info.ownerId;
    this.deviceId = info.deviceId;
    this._storage = info.storage;
    if (typeof window !== 'undefined' && hub.options.autoSync !== false) {
      this._onFocus = () => hub.call('notify', ['focus']).catch(() => {});
      this._onOnline = () => hub.call('notify', ['online']).catch(() => {});
      window.addEventListener('focus', this._onFocus);
      window.addEventListener('online', this._onOnline);
    }
  }

  async _write(ops) {
    if (!Array.isArray(ops)) throw invalid('transaction() takes an array of operations');
    return this.hub.call('transaction', [ops, this.hub.requestId()]);
  }

  async insert(table, row) {
    return (await this._write([{ op: 'insert', table, row }]))[0];
  }

  async update(table, id, patch) {
    return (await this._write([{ op: 'update', table, id, patch }]))[0];
  }

  async upsert(table, row) {
    return (await this._write([{ op: 'upsert', table, row }]))[0];
  }

  async delete(table, id) {
    return (await this._write([{ op: 'delete', table, id }]))[0];
  }

  transaction(ops) {
    return this._write(ops);
  }

  get(table, id) {
    return this.hub.call('get', [table, id]);
  }

  list(table, options = {}) {
    return this.hub.call('list', [table, options]);
  }

  query(sql, params = []) {
    return this.hub.call('query', [sql, params]);
  }

  subscribe(tables, callback) {
    const set = tables ? new Set(Array.isArray(tables) ? tables : [tables]) : null;
    return this.hub.on('change', (event) => {
      if (!set) return callback(event);
      const rows = event.rows.filter((r) => set.has(r.table));
      if (rows.length) callback({ ...event, tables: event.tables.filter((t) => set.has(t)), rows });
    });
  }

  sync() {
    return this.hub.call('sync');
  }

  getRelayStatuses() {
    return this.hub.call('relayStatuses');
  }

  onStatus(callback) {
    return this.hub.on('status', callback);
  }

  onProgress(callback) {
    return this.hub.on('progress', callback);
  }

  addRelay(url) {
    return this.hub.call('addRelay', [url]);
  }

  removeRelay(url) {
    return this.hub.call('removeRelay', [url]);
  }

  purgeDeleted() {
    return this.hub.call('purgeDeleted');
  }

  purgeRows(table, ids) {
    return this.hub.call('purgeRows', [table, ids]);
  }

  async putBlob(data, { mimeType, chunkSize } = {}) {
    let bytes = data;
    let type = mimeType;
    if (typeof Blob !== 'undefined' && data instanceof Blob) {
      type ??= data.type;
      bytes = new Uint8Array(await data.arrayBuffer());
    }
    return this.hub.call('putBlob', [toBytes(bytes), String(type || 'application/octet-stream'), chunkSize]);
  }

  getBlob(blobId) {
    return this.hub.call('getBlob', [blobId]);
  }

  getBlobChunk(blobId, index) {
    return this.hub.call('getBlobChunk', [blobId, index]);
  }

  getBlobManifest(blobId) {
    return this.hub.call('blobManifest', [blobId]);
  }

  async getBlobUrl(blobId) {
    const [manifest, bytes] = await Promise.all([this.getBlobManifest(blobId), this.getBlob(blobId)]);
    return URL.createObjectURL(new Blob([bytes], { type: manifest.mimeType }));
  }

  showRecoveryPhrase() {
    return this.hub.call('recoveryPhrase');
  }

  rekey(newSecret) {
    return this.hub.call('rekey', [newSecret]);
  }

  confirmRekey() {
    return this.hub.call('confirmRekey');
  }

  pendingRekey() {
    return this.hub.call('pendingRekey');
  }

  retrySetAside() {
    return this.hub.call('retrySetAside');
  }

  retryQuarantined() {
    return this.hub.call('retryQuarantined');
  }

  quarantined() {
    return this.hub.call('quarantined');
  }

  deferred() {
    return this.hub.call('deferred');
  }

  storage() {
    return this.hub.call('storage');
  }

  get role() {
    return this.hub.role;
  }

  async close() {
    if (typeof window !== 'undefined' && this._onFocus) {
      window.removeEventListener('focus', this._onFocus);
      window.removeEventListener('online', this._onOnline);
    }
    await this.hub.close();
  }
}

/** Opens (or joins, from another tab) the engine of `options.dbName`. */
export async function createEngine(options) {
  if (!options || typeof options !== 'object') throw invalid('createEngine(options): options must be an object');
  const { secret, relays = [], schema } = options;
  if (typeof secret !== 'string') throw invalid('options.secret must be a string (a recovery phrase or sf1_ key)');
  if (!Array.isArray(relays) || relays.some((r) => typeof r !== 'string')) throw invalid('options.relays must be an array of URLs');
  if (!schema || !Array.isArray(schema.tables)) throw invalid('options.schema must be {schemaVersion?, tables: [...]}');
  const check = await validateSecret(secret);
  if (!check.ok) throw new SimplySyncError(check.message, check.code);
  const engineOptions = {
    relays,
    schema: { schemaVersion: schema.schemaVersion ?? 1, tables: schema.tables },
    dbName: options.dbName ?? 'simplysync.db',
    syncIntervalMs: options.syncIntervalMs ?? 5000,
    autoSync: options.autoSync ?? true,
    storage: options.storage ?? 'auto',
  };
  for (const name of ['maxEventBytes', 'maxBlobBytes', 'requestTimeoutMs']) {
    if (options[name] !== undefined) engineOptions[name] = options[name];
  }
  const hub = new Hub(secret, engineOptions);
  await hub.ready;
  const info = hub.info ?? (await hub.call('storage').then((storage) => ({ storage })));
  if (!hub.info) {
    // A follower learns the ids from the leader.
    const [owner] = await hub.call('query', ["SELECT value AS ownerId FROM _sync_meta WHERE key = 'owner_id'"]);
    const [device] = await hub.call('query', ["SELECT value AS deviceId FROM _sync_meta WHERE key = 'device_id'"]);
    info.ownerId = owner?.ownerId;
    info.deviceId = device?.deviceId;
    const mine = wasm.deriveIdentity(secret);
    const ownerId = mine.ownerId;
    mine.free();
    if (ownerId !== info.ownerId) {
      await hub.close();
      throw new SimplySyncError(
        `another tab has ${engineOptions.dbName} open for owner ${info.ownerId}, but this secret derives owner ${ownerId}`,
        'OWNER_MISMATCH',
      );
    }
  }
  return new Engine(hub, info);
}
