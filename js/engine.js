// The Engine object an app holds: a thin facade over the hub (hub.js), which runs each call in
// this tab's worker or forwards it to the tab that runs the engine.
import { closedError, invalid } from './errors.js';
import { toBytes } from './protocol.js';
import { Watches } from './watch.js';

/** A SimplySync engine. Create one with {@link createEngine}. */
export class Engine {
  #hub;
  #onFocus = null;
  #onOnline = null;
  #onVisible = null;
  #blobUrls = new Set();
  #watches;

  constructor(hub) {
    this.#hub = hub;
    this.#watches = new Watches(hub);
    // Closed by another tab (a log-out, an upgrade) or for good after a failure: this tab's
    // listeners and object URLs go too, as close() lets them go.
    hub.on('closed', () => this.#release());
    if (typeof window !== 'undefined' && hub.autoSync) {
      this.#onFocus = () => hub.call('notify', ['focus']).catch(() => {});
      this.#onOnline = () => hub.call('notify', ['online']).catch(() => {});
      // A page shown again syncs, as focus does (mobile browsers often send no focus event).
      this.#onVisible = () => document.visibilityState === 'visible' && this.#onFocus();
      window.addEventListener('focus', this.#onFocus);
      window.addEventListener('online', this.#onOnline);
      document.addEventListener('visibilitychange', this.#onVisible);
    }
  }

  get ownerId() {
    return this.#hub.info?.ownerId;
  }

  get deviceId() {
    return this.#hub.info?.deviceId;
  }

  get role() {
    return this.#hub.role;
  }

  /** The error the engine closed with (its `code` says why), or null while it is open. */
  get closed() {
    return this.#hub.closed ? this.#hub.closeError : null;
  }

  /** Every relay's status as last known here (no request): what {@link onStatus} last told. */
  get status() {
    return this.#hub.lastStatus;
  }

  /** Whether a pass has read from a relay (ever, on this device): the data is not only local. */
  get hasSynced() {
    return this.#hub.lastStatus.some((s) => s.lastSyncAt !== null && s.lastSyncAt !== undefined);
  }

  /** Resolves once {@link hasSynced} (at once if it already is); rejects if the engine closes first. */
  waitForFirstSync() {
    if (this.hasSynced) return Promise.resolve();
    if (this.#hub.closed) return Promise.reject(this.#hub.closeError ?? closedError());
    return new Promise((resolve, reject) => {
      const stop = () => {
        offStatus();
        offClose();
      };
      const offStatus = this.onStatus(() => this.hasSynced && (stop(), resolve()));
      const offClose = this.onClose((e) => (stop(), reject(e)));
    });
  }

  async #write(ops) {
    if (!Array.isArray(ops)) throw invalid('transaction() takes an array of operations');
    return this.#hub.call('transaction', [ops]);
  }

  async insert(table, row) {
    return (await this.#write([{ op: 'insert', table, row }]))[0];
  }

  async update(table, id, patch) {
    return (await this.#write([{ op: 'update', table, id, patch }]))[0];
  }

  async upsert(table, row) {
    return (await this.#write([{ op: 'upsert', table, row }]))[0];
  }

  async delete(table, id) {
    return (await this.#write([{ op: 'delete', table, id }]))[0];
  }

  transaction(ops) {
    return this.#write(ops);
  }

  get(table, id) {
    return this.#hub.call('get', [table, id]);
  }

  list(table, options = {}) {
    return this.#hub.call('list', [table, options]);
  }

  query(sql, params = [], options = {}) {
    return this.#hub.call('query', [sql, params, { raw: options?.raw === true }]);
  }

  watch(table, options, callback, onError) {
    if (typeof options === 'function') [options, callback, onError] = [{}, options, callback];
    if (typeof table !== 'string' || !table) throw invalid('watch(table, options, callback): table must be a non-empty string');
    if (options !== undefined && options !== null && typeof options !== 'object') {
      throw invalid('watch(table, options, callback): options must be an object ({where, orderBy, limit, includeDeleted})');
    }
    const listOptions = { ...(options ?? {}) };
    return this.#watches.add({ tables: [table], run: () => this.list(table, listOptions), callback, onError });
  }

  watchQuery(sql, params, callback, onError) {
    if (typeof params === 'function') [params, callback, onError] = [[], params, callback];
    if (typeof sql !== 'string' || !sql.trim()) throw invalid('watchQuery(sql, params, callback): sql must be a non-empty string');
    if (params !== undefined && params !== null && !Array.isArray(params)) {
      throw invalid('watchQuery(sql, params, callback): params must be an array');
    }
    const args = [...(params ?? [])];
    return this.#watches.add({
      findTables: () => this.#hub.call('queryTables', [sql]),
      run: () => this.query(sql, args),
      callback,
      onError,
    });
  }

  subscribe(tables, callback) {
    const set = tables ? new Set(Array.isArray(tables) ? tables : [tables]) : null;
    return this.#hub.on('change', (event) => {
      if (!set) return callback(event);
      const rows = event.rows.filter((r) => set.has(r.table));
      if (rows.length) callback({ ...event, tables: event.tables.filter((t) => set.has(t)), rows });
    });
  }

  sync() {
    return this.#hub.call('sync');
  }

  getRelayStatuses(options = {}) {
    return this.#hub.call(options?.refresh === true ? 'relayStatuses' : 'relayStatusesLocal');
  }

  onStatus(callback) {
    return this.#hub.on('status', callback);
  }

  onProgress(callback) {
    return this.#hub.on('progress', callback);
  }

  onClose(callback) {
    return this.#hub.on('closed', callback);
  }

  addRelay(url) {
    return this.#hub.call('addRelay', [url]);
  }

  removeRelay(url) {
    return this.#hub.call('removeRelay', [url]);
  }

  setRegistrationToken(url, token) {
    if (token !== null && token !== undefined && typeof token !== 'string') {
      return Promise.reject(invalid('setRegistrationToken(url, token): token must be a string or null'));
    }
    return this.#hub.call('setRegistrationToken', [String(url), token ?? null]);
  }

  purgeDeleted() {
    return this.#hub.call('purgeDeleted');
  }

  purgeRows(table, ids) {
    return this.#hub.call('purgeRows', [table, ids]);
  }

  async putBlob(data, { mimeType, chunkSize, onProgress } = {}) {
    if (onProgress !== undefined && typeof onProgress !== 'function') throw invalid('putBlob(data, {onProgress}): onProgress must be a function');
    let bytes;
    let type = mimeType;
    let ours = false;
    if (typeof Blob !== 'undefined' && data instanceof Blob) {
      type ??= data.type;
      bytes = new Uint8Array(await data.arrayBuffer());
      ours = true; // read here: moved to the worker, not copied
    } else {
      bytes = toBytes(data);
    }
    type = String(type || 'application/octet-stream');
    // The same bytes (type, chunk size) put again — an app retrying after a TIMEOUT — get the
    // blob stored the first time: the request id is their digest, and the engine answers a
    // repeated request id with its first result (for a day).
    const digest = await sha256Hex(bytes);
    const requestId = `blob:${await sha256Hex(new TextEncoder().encode(`${digest}\n${type}\n${chunkSize ?? ''}`))}`;
    // The deadline grows with the size: 2 s more per MiB.
    const extraMs = Math.ceil(bytes.byteLength / 1048576) * 2000;
    const total = bytes.byteLength;
    // Told as each chunk is sealed (in the worker), then once more when the blob is stored.
    const tell = onProgress && ((sealedBytes) => {
      try {
        onProgress({ sealedBytes, totalBytes: total, stored: false });
      } catch (e) {
        queueMicrotask(() => {
          throw e;
        });
      }
    });
    const manifest = await this.#hub.call('putBlob', [bytes, type, chunkSize], {
      requestId, extraMs, transfer: ours ? [bytes.buffer] : undefined, onProgress: tell,
    });
    onProgress?.({ sealedBytes: total, totalBytes: total, stored: true });
    return manifest;
  }

  getBlob(blobId) {
    return this.#hub.call('getBlob', [blobId]);
  }

  getBlobChunk(blobId, index) {
    return this.#hub.call('getBlobChunk', [blobId, index]);
  }

  getBlobManifest(blobId) {
    return this.#hub.call('blobManifest', [blobId]);
  }

  async getBlobUrl(blobId) {
    const [manifest, bytes] = await Promise.all([this.getBlobManifest(blobId), this.getBlob(blobId)]);
    const url = URL.createObjectURL(new Blob([bytes], { type: manifest.mimeType }));
    this.#blobUrls.add(url);
    return url;
  }

  revokeBlobUrl(url) {
    if (!this.#blobUrls.delete(url)) return false;
    URL.revokeObjectURL(url);
    return true;
  }

  showRecoveryPhrase() {
    return this.#hub.call('recoveryPhrase');
  }

  rekey(newSecret) {
    return this.#hub.call('rekey', [newSecret]);
  }

  confirmRekey() {
    return this.#hub.call('confirmRekey');
  }

  pendingRekey() {
    return this.#hub.call('pendingRekey');
  }

  retrySetAside() {
    return this.#hub.call('retrySetAside');
  }

  retryQuarantined() {
    return this.#hub.call('retryQuarantined');
  }

  quarantined() {
    return this.#hub.call('quarantined');
  }

  deferred() {
    return this.#hub.call('deferred');
  }

  storage() {
    return this.#hub.call('storageInfo');
  }

  /**
   * Logs out on this device: closes the engine and deletes its database and stored secret.
   * `requireSynced: true` refuses (NOT_SYNCED, nothing deleted) while a change has not reached
   * every relay.
   */
  async resetLocalData(options = {}) {
    try {
      await this.#hub.call('reset', [{ requireSynced: options?.requireSynced === true }]);
    } catch (e) {
      if (e.code !== 'CLOSED') throw e; // the leader closed every tab, this one included
    }
    await this.close();
  }

  async close() {
    this.#release();
    await this.#hub.close();
  }

  #release() {
    if (this.#onFocus) {
      window.removeEventListener('focus', this.#onFocus);
      window.removeEventListener('online', this.#onOnline);
      document.removeEventListener('visibilitychange', this.#onVisible);
      this.#onFocus = null;
    }
    for (const url of this.#blobUrls) URL.revokeObjectURL(url);
    this.#blobUrls.clear();
  }
}

async function sha256Hex(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}
