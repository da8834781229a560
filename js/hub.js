// The tabs of one app share one engine per database. One tab — the leader, elected with Web
// Locks — runs the engine in a dedicated worker (OPFS's sync access handles exist only there,
// and each database's file pool is exclusive). The other tabs are followers: they send their
// calls to the leader and receive its change, status and progress events.
//
// Messages between tabs travel on BroadcastChannels named after the database:
//   simplysync:<db>              presence (hello, leader, bye), events, visibility, closed
//   simplysync:<db>:tab:<tabId>  what is meant for one tab only: calls to the leader, results
// The secret never crosses tabs: a follower never receives it, and the calls that reveal or
// change it (showRecoveryPhrase, rekey, confirmRekey) answer LEADER_ONLY in a follower.
//
// Every call settles: it has a deadline (TIMEOUT), close() rejects it (CLOSED), a worker that
// fails or traps rejects what it was running (WORKER / PANIC) and is restarted; calls made while
// it restarts wait for it. A worker that stops answering (a long task, frozen) is noticed by a
// heartbeat: calls waiting on it fail with UNRESPONSIVE after `unresponsiveMs` instead of at
// their deadline — in followers too, which also ping the leader's tab itself.
//
// App updates: each tab holds a shared Web Lock naming its schema version while it lives. A tab
// with a newer schema than the leader's asks it to step down (`upgrade`); tabs with an older
// schema close with OUTDATED and never lead again while a newer one runs (a tab checks the locks
// before it leads), so no write is made with the old schema after the upgrade. When the leader
// goes away, calls it did not answer are re-sent to the next leader — only those, and only to a
// new leader; mutating calls carry a request id the engine records with their effect, so a
// re-sent call never applies twice.
import { Calls } from './calls.js';
import { Listeners } from './listeners.js';
import { SimplySyncError, closedError, revive, toWire } from './errors.js';
import { stableJson } from './stable-json.js';

export { stableJson };

/** Calls that change data: they carry a request id (their call id). */
export const MUTATING = new Set([
  'transaction', 'putBlob', 'purgeDeleted', 'purgeRows', 'addRelay', 'removeRelay', 'retryQuarantined',
  'retrySetAside', 'rekey', 'confirmRekey',
]);
/** Calls that reveal or change the secret: answered only in the tab that runs the engine. */
export const LEADER_ONLY = new Set(['recoveryPhrase', 'rekey', 'confirmRekey']);
/** Calls that may take long (network, restores): they get the long deadline. */
const LONG = new Set(['sync', 'rekey', 'confirmRekey', 'getBlob', 'getBlobChunk', 'relayStatuses', 'reset']);
/** Errors a new attempt to open will not fix. */
const PERMANENT = new Set([
  'OWNER_MISMATCH', 'SCHEMA_INVALID', 'INVALID_ARGUMENT', 'NO_SECRET', 'SECRET_LOST', 'INVALID_RELAY',
  'SECRET_EMPTY', 'SECRET_WORD_COUNT', 'SECRET_UNKNOWN_WORD', 'SECRET_CHECKSUM', 'SECRET_INVALID_KEY',
  'SECRET_INVALID_PHRASE',
]);

/** The package's version (build-pkg.sh writes it in), told to other tabs. */
export const PACKAGE_VERSION = '0.0.0-dev';

const randomId = () =>
  globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;

/** Asks the browser to keep the site's storage (never waits long: Firefox may never answer). */
async function persistStorage() {
  const persist = globalThis.navigator?.storage?.persist;
  if (typeof persist !== 'function') return 'unsupported';
  const timeout = new Promise((resolve) => setTimeout(() => resolve('unanswered'), 3000));
  try {
    return await Promise.race([navigator.storage.persist().then((granted) => (granted ? 'granted' : 'denied')), timeout]);
  } catch {
    return 'denied';
  }
}

export class Hub {
  #secret;
  #options;
  #calls;
  #workerCalls = new Map(); // worker-call id -> {resolve, reject}
  #listeners = new Listeners(['change', 'status', 'progress', 'owner', 'closed', 'refresh']);
  #shared = null;
  #inbox = null;
  #outboxes = new Map();
  #worker = null;
  #releaseLock = null;
  #visible = new Map(); // tab id -> visible (leader only)
  #everReady = false;
  #closing = false;
  #election = null; // aborts a lock request still waiting
  #electionDelay = 0;
  #restarts = 0;
  #restarting = null; // a promise while the worker restarts: calls wait for it
  #restarted = null;
  #beat = null; // the heartbeat's timer
  #pingSentAt = null; // when the unanswered ping went out (to the worker, or the leader's tab)
  #stuck = false; // the engine's worker (or the leader's tab) does not answer
  #releaseSchemaLock = null;
  #markReady;
  #failReady;

  constructor(secret, options) {
    this.#secret = secret;
    this.#options = options;
    this.tabId = randomId();
    this.lockName = `simplysync:${options.dbName}`;
    this.#calls = new Calls(this.tabId);
    this.role = 'starting';
    this.leaderId = null;
    this.info = null;
    this.lastStatus = [];
    this.closed = false;
    this.closeError = null;
    this.ready = new Promise((resolve, reject) => {
      this.#markReady = resolve;
      this.#failReady = reject;
    });
    this.ready.catch(() => {});
    const multiTab = typeof BroadcastChannel === 'function' && globalThis.navigator?.locks;
    this.schemaVersion = options.schema.schemaVersion ?? 1;
    if (multiTab) {
      // Held while this tab lives: a tab with an older schema sees it and does not lead.
      navigator.locks
        .request(`${this.lockName}:schema:${this.schemaVersion}`, { mode: 'shared' }, () => new Promise((r) => (this.#releaseSchemaLock = r)))
        .catch(() => {});
      this.#shared = new BroadcastChannel(this.lockName);
      this.#shared.onmessage = (e) => this.#onShared(e.data);
      this.#inbox = new BroadcastChannel(`${this.lockName}:tab:${this.tabId}`);
      this.#inbox.onmessage = (e) => this.#onInbox(e.data);
      this.#elect();
      this.#shared.postMessage({ type: 'hello', from: this.tabId });
    } else {
      // No Web Locks or BroadcastChannel: this tab runs the engine itself (one tab per database).
      this.#lead();
    }
    this.#watchVisibility();
    this.#watchPageHide();
    const period = Math.max(50, Math.min(2000, Math.floor(options.unresponsiveMs / 3)));
    this.#beat = setInterval(() => this.#heartbeat(), period);
    setTimeout(() => {
      if (this.#everReady || this.closed) return;
      // Give up for good: leave the election and stop a worker still opening, so no engine
      // runs later that the app cannot reach or close.
      const error = new SimplySyncError(`no engine for ${options.dbName} within ${options.openTimeoutMs} ms`, 'TIMEOUT');
      this.#failReady(error);
      this.#closeLocally(error);
    }, options.openTimeoutMs);
  }

  // ---- election ------------------------------------------------------------------------

  #elect() {
    this.#election = new AbortController();
    navigator.locks.request(this.lockName, { signal: this.#election.signal }, () => this.#lead()).catch((e) => {
      if (!this.closed) this.#failReady(revive(e));
    });
  }

  async #lead() {
    if (this.closed) return;
    const takeover = this.#everReady;
    if (this.#shared && (await this.#newerSchemaRuns())) {
      this.#closeLocally(this.#outdated());
      return; // releases the lock: the tab with the newer schema leads
    }
    try {
      await this.#startEngine();
      if (this.closed) throw closedError(); // closed (or timed out) while it opened
    } catch (e) {
      const err = revive(e);
      this.#stopWorker();
      if (this.closed) return;
      if (!this.#everReady) {
        this.#failReady(err);
        queueMicrotask(() => this.close());
        return; // releases the lock: another tab may lead
      }
      if (PERMANENT.has(err.code)) {
        // This tab cannot take over (its key is gone, say): close it with the reason, so the
        // app hears it (onClose) and its calls fail at once instead of waiting for a leader.
        this.#closeLocally(err);
        return;
      }
      // A takeover that failed for a reason that may pass: let another tab try, then try again.
      this.#electionDelay = Math.min(30000, Math.max(1000, this.#electionDelay * 2));
      setTimeout(() => !this.closed && this.#elect(), this.#electionDelay);
      return;
    }
    this.#electionDelay = 0;
    this.role = 'leader';
    this.leaderId = this.tabId;
    this.#shared?.postMessage({ type: 'leader', from: this.tabId });
    this.#ready();
    this.#applyVisibility();
    // Changes the previous leader made as it went may not have reached this tab: live queries re-run.
    if (takeover) this.#emit('refresh');
    // Calls this tab had sent to a previous leader that never answered: run them here.
    for (const [id] of this.#calls.unanswered()) this.#dispatch(id);
    // Hold the lock (and the database) until this tab closes or the engine is closed.
    await new Promise((resolve) => (this.#releaseLock = resolve));
  }

  /** Whether a tab of this database runs a newer schema than this tab's. */
  async #newerSchemaRuns() {
    const prefix = `${this.lockName}:schema:`;
    const { held = [] } = await navigator.locks.query();
    return held.some((l) => l.name.startsWith(prefix) && Number(l.name.slice(prefix.length)) > this.schemaVersion);
  }

  #outdated() {
    return new SimplySyncError(
      `a newer version of the app (schema version above ${this.schemaVersion}) runs ${this.#options.dbName} in another tab: reload this page`,
      'OUTDATED',
    );
  }

  #ready() {
    this.#everReady = true;
    this.#markReady();
    this.#listeners.open();
  }

  /** Starts the worker and opens the engine in it. */
  async #startEngine() {
    this.#worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'simplysync' });
    this.#worker.onmessage = (e) => this.#onWorker(e.data);
    this.#worker.onerror = (e) => {
      e.preventDefault?.();
      this.#workerFailed(new SimplySyncError(`the engine worker failed: ${e.message ?? 'unknown error'}`, 'WORKER'));
    };
    this.#worker.onmessageerror = () => this.#workerFailed(new SimplySyncError('the engine worker sent an unreadable message', 'WORKER'));
    // This tab's first open uses the app's secret (if it gave one). A takeover or a restart
    // opens with the secret stored in the database — after a re-key that is the new one —
    // and falls back to the app's secret where nothing is stored (memory storage).
    let info;
    const secret = this.#everReady ? undefined : this.#secret;
    const deadline = this.#options.openTimeoutMs;
    try {
      info = await this.#toWorker('open', [secret, this.#options], undefined, deadline);
    } catch (e) {
      // Nothing stored (memory storage), or its key is gone: the app's own secret, if it gave one.
      const code = revive(e).code;
      if ((code !== 'NO_SECRET' && code !== 'SECRET_LOST') || secret !== undefined || this.#secret === undefined) throw e;
      info = await this.#toWorker('open', [this.#secret, this.#options], undefined, deadline);
    }
    // Asked in the background (Firefox may show a prompt, or never answer): neither opening nor
    // storage() waits for it; `persisted` is 'pending' until it comes. `persist: false`: not asked.
    if (info.storage.durable) {
      if (this.#options.persist === false) info.storage.persisted = 'not-asked';
      else {
        info.storage.persisted = 'pending';
        persistStorage().then((p) => (info.storage.persisted = p));
      }
    }
    info.packageVersion = PACKAGE_VERSION;
    // The engine keeps the secret now (sealed at rest): this page lets go of its copy. Memory
    // storage keeps nothing, so a restart or a takeover there still needs the app's.
    if (info.storage.mode !== 'memory') this.#secret = undefined;
    this.info = info;
    this.lastStatus = info.status ?? [];
    this.#emit('owner', info.ownerId);
  }

  #stopWorker() {
    this.#worker?.terminate();
    this.#worker = null;
    this.#stuck = false; // a fresh worker starts answered
    this.#pingSentAt = null;
    const err = new SimplySyncError('the engine worker stopped', 'WORKER');
    for (const call of this.#workerCalls.values()) call.reject(err);
    this.#workerCalls.clear();
  }

  /** The worker failed or trapped: reject what it was running, and start a fresh one. */
  #workerFailed(error) {
    if (this.closed || !this.#worker) return;
    for (const call of this.#workerCalls.values()) call.reject(error);
    this.#workerCalls.clear();
    this.#stopWorker();
    if (this.role !== 'leader') return;
    if (this.#restarts >= 5) {
      this.#closeLocally(new SimplySyncError(`the engine could not be restarted: ${error.message}`, error.code));
      return;
    }
    // Calls made from now on wait for the fresh worker instead of failing.
    this.#restarting ??= new Promise((resolve) => (this.#restarted = resolve));
    const delay = Math.min(30000, 500 * 2 ** this.#restarts++);
    setTimeout(async () => {
      if (this.closed) return;
      try {
        await this.#startEngine();
        this.#restarts = 0;
        this.#restarted();
        this.#restarting = null;
        this.#applyVisibility();
        // Live queries here and in follower tabs (whose calls failed with WORKER meanwhile) re-run.
        this.#emit('refresh');
        this.#shared?.postMessage({ type: 'event', event: 'refresh' });
        for (const [id] of this.#calls.unanswered()) this.#dispatch(id);
      } catch (e) {
        if (!this.#worker) this.#worker = { terminate() {} }; // let the next failure count
        this.#workerFailed(revive(e));
      }
    }, delay);
  }

  #toWorker(method, args, requestId, timeoutMs, firstSend = false, transfer = undefined, onProgress = undefined) {
    if (!this.#worker) return Promise.reject(new SimplySyncError('the engine worker is restarting', 'WORKER'));
    // Reads fail fast while the worker does not answer; writes wait for it (they run once it
    // is free) until their own deadline.
    if (this.#stuck && method !== 'ping' && !MUTATING.has(method)) return Promise.reject(this.#unresponsive());
    const id = randomId();
    return new Promise((resolve, reject) => {
      let timer;
      if (timeoutMs) {
        timer = setTimeout(() => {
          this.#workerCalls.delete(id);
          reject(new SimplySyncError(`the engine worker did not answer ${method} within ${timeoutMs} ms`, 'TIMEOUT'));
        }, timeoutMs);
      }
      const done = (fn) => (v) => {
        clearTimeout(timer);
        fn(v);
      };
      this.#workerCalls.set(id, { method, resolve: done(resolve), reject: done(reject), onProgress });
      this.#worker.postMessage({ id, method, args, requestId, firstSend, progress: onProgress !== undefined }, transfer ?? []);
    });
  }

  #onWorker(msg) {
    if (msg.progress !== undefined) {
      this.#workerCalls.get(msg.progress)?.onProgress?.(msg.done, msg.total);
      return;
    }
    if (msg.event) {
      if (msg.event === 'owner' && this.info) this.info.ownerId = msg.data;
      this.#emit(msg.event, msg.data);
      this.#shared?.postMessage({ type: 'event', event: msg.event, data: msg.data });
      return;
    }
    const call = this.#workerCalls.get(msg.id);
    this.#workerCalls.delete(msg.id);
    if (msg.ok) call?.resolve(msg.value);
    else call?.reject(revive(msg.error));
    // Also for a call no one waits for any more (it timed out, or was UNRESPONSIVE): the
    // worker's module trapped all the same, and must be replaced.
    if (msg.fatal) this.#workerFailed(revive(msg.error));
  }

  // ---- messages between tabs -------------------------------------------------------------

  #send(tabId, msg) {
    if (this.closed) return; // the other tab hears `closed` (or `bye`) instead
    // Closing: results may be "engine closed" errors that are not the call's own; the asking
    // tab re-sends unanswered calls to the next leader (request ids make that safe).
    if (this.#closing && msg.type === 'result') return;
    let channel = this.#outboxes.get(tabId);
    if (!channel) {
      channel = new BroadcastChannel(`${this.lockName}:tab:${tabId}`);
      this.#outboxes.set(tabId, channel);
    }
    channel.postMessage(msg);
  }

  #onShared(msg) {
    if (this.closed) return;
    switch (msg.type) {
      case 'hello':
        if (this.role === 'leader') this.#shared.postMessage({ type: 'leader', from: this.tabId });
        break;
      case 'leader': {
        if (msg.from === this.tabId) break;
        const newLeader = msg.from !== this.leaderId;
        this.leaderId = msg.from;
        if (newLeader) this.#pingSentAt = null; // a ping the previous leader left unanswered
        if (this.role !== 'leader') {
          this.role = 'follower';
          if (!this.#everReady) this.#join();
          this.#shared.postMessage({ type: 'visibility', from: this.tabId, visible: this.#isVisible() });
          if (this.#everReady && newLeader) this.#emit('refresh'); // a new leader: live queries re-run
          // Calls the previous leader did not answer go to the new one (once each).
          for (const [id] of this.#calls.unanswered()) this.#dispatch(id);
        }
        break;
      }
      case 'bye':
        this.#visible.delete(msg.from);
        this.#outboxes.get(msg.from)?.close();
        this.#outboxes.delete(msg.from);
        if (msg.from === this.leaderId) {
          this.leaderId = null; // the next leader announces itself
          this.#pingSentAt = null;
        }
        if (this.role === 'leader') this.#applyVisibility();
        break;
      case 'visibility':
        if (this.role === 'leader') {
          this.#visible.set(msg.from, msg.visible);
          this.#applyVisibility();
        }
        break;
      case 'event':
        if (this.role !== 'leader') {
          if (msg.event === 'owner' && this.info) this.info.ownerId = msg.data;
          this.#emit(msg.event, msg.data);
        }
        break;
      case 'closed':
        this.#closeLocally(closedError(msg.reason, msg.code));
        break;
      case 'upgrade':
        // A tab with a newer schema wants the database: this one steps down and closes.
        if (msg.schemaVersion > this.schemaVersion) this.#stepDown(this.#outdated());
        break;
    }
  }

  /** Closes this tab for good with `error`; a leader first closes its engine (answers go out). */
  async #stepDown(error) {
    if (this.closed) return;
    this.#closing = true;
    if (this.role === 'leader' && this.#worker) {
      const stop = this.#toWorker('close', []).catch(() => {});
      await Promise.race([stop, new Promise((r) => setTimeout(r, 2000))]);
    }
    this.#closeLocally(error);
  }

  /** A follower joins: it learns the engine's facts from the leader and checks its schema. */
  async #join() {
    try {
      const info = await this.call('info');
      if (stableJson(info.schema) !== stableJson(this.#options.schema)) {
        const running = info.schema.schemaVersion ?? 1;
        if (running > this.schemaVersion) throw this.#outdated();
        if (running === this.schemaVersion) {
          throw new SimplySyncError(
            `another tab runs ${this.#options.dbName} with a different schema of the same version ${running}: give a changed schema a higher schemaVersion`,
            'SCHEMA_MISMATCH',
          );
        }
        if (info.packageVersion === undefined) {
          // A running tab of a package before this version cannot step down for a newer one.
          throw new SimplySyncError(
            `another tab runs ${this.#options.dbName} with an older schema and an older version of simplysync that cannot hand over: reload that tab`,
            'SCHEMA_MISMATCH',
          );
        }
        // This tab's app is newer: the running tabs step down, and this one leads (its lock
        // request is waiting) once the leader let go.
        this.#shared.postMessage({ type: 'upgrade', from: this.tabId, schemaVersion: this.schemaVersion, packageVersion: PACKAGE_VERSION });
        return;
      }
      this.info = info;
      this.lastStatus = info.status ?? [];
      if (info.storage.mode !== 'memory') this.#secret = undefined; // the engine keeps it
      this.#ready();
    } catch (e) {
      // This tab gives up (and leaves the election, so another tab can take over).
      this.#failReady(revive(e));
      queueMicrotask(() => this.close());
    }
  }

  #onInbox(msg) {
    if (this.closed) return;
    if (msg.type === 'ping') {
      if (this.role === 'leader') this.#send(msg.from, { type: 'pong', from: this.tabId, nonce: msg.nonce, stuck: this.#stuck });
      return;
    }
    if (msg.type === 'progress') {
      this.#calls.get(msg.id)?.onProgress?.(msg.done, msg.total);
      return;
    }
    if (msg.type === 'pong') {
      // Only the answer to this tab's latest ping, from the leader it was sent to.
      if (msg.from !== this.leaderId || msg.nonce !== this.#pingSentAt) return;
      this.#pingSentAt = null;
      if (msg.stuck) this.#calls.rejectSentTo(this.leaderId, this.#unresponsive(), (call) => !MUTATING.has(call.method));
      return;
    }
    if (msg.type === 'call') {
      // Sent to a tab that no longer leads, or is closing: the caller re-sends to the next leader.
      if (this.role !== 'leader' || this.#closing) return;
      if (LEADER_ONLY.has(msg.method)) {
        const error = toWire(new SimplySyncError(`${msg.method} is answered only in the tab that runs the engine`, 'LEADER_ONLY'));
        this.#send(msg.from, { type: 'result', id: msg.id, ok: false, error });
        return;
      }
      const onProgress = msg.progress ? (done, total) => this.#send(msg.from, { type: 'progress', id: msg.id, done, total }) : undefined;
      this.#run(msg.method, msg.args, msg.requestId, msg.firstSend === true, undefined, onProgress).then(
        (value) => this.#send(msg.from, { type: 'result', id: msg.id, ok: true, value }),
        (e) => this.#send(msg.from, { type: 'result', id: msg.id, ok: false, error: toWire(e) }),
      );
    } else if (msg.type === 'result') {
      this.#calls.settle(msg.id, msg.ok, msg.ok ? msg.value : msg.error);
    }
  }

  // ---- calls -------------------------------------------------------------------------------

  /** Runs a call on this tab's worker (leader only). */
  async #run(method, args, requestId, firstSend, transfer, onProgress) {
    if (this.#restarting) await this.#restarting;
    if (this.closed) throw closedError();
    if (method === 'info') return this.info;
    if (method === 'storageInfo') return { ...this.info.storage };
    const value = await this.#toWorker(method, args, requestId, undefined, firstSend, transfer, onProgress);
    if (method === 'reset') this.#afterReset();
    return value;
  }

  #dispatch(id) {
    const call = this.#calls.get(id);
    if (!call) return;
    // Never sent before (to any tab): the engine need not look for its request's record. Only a
    // call the previous leader may have run is sent again, and it says so by leaving this out.
    const firstSend = call.sentTo === null && !call.keyed;
    if (this.role === 'leader') {
      if (call.sentTo === this.tabId) return;
      call.sentTo = this.tabId;
      this.#run(call.method, call.args, call.requestId, firstSend, call.transfer, call.onProgress).then(
        (v) => this.#calls.settle(id, true, v),
        (e) => this.#calls.settle(id, false, e),
      );
    } else if (this.leaderId && call.sentTo !== this.leaderId) {
      call.sentTo = this.leaderId;
      const { method, args, requestId } = call;
      const progress = call.onProgress !== undefined;
      this.#send(this.leaderId, { type: 'call', id, from: this.tabId, method, args, requestId, firstSend, progress });
    }
  }

  /**
   * Calls the engine (here or in the leader tab). `options`: `requestId` (a mutating call's own,
   * e.g. a blob's digest: then never sent as a first send), `extraMs` added to its deadline,
   * `transfer` (buffers of `args` moved to this tab's worker rather than copied), `onProgress`
   * (told `(done, total)` while the call runs: a blob's sealed bytes).
   */
  call(method, args = [], options = {}) {
    if (this.closed) return Promise.reject(closedError());
    if (LEADER_ONLY.has(method) && this.role === 'follower') {
      return Promise.reject(new SimplySyncError(`${method} is answered only in the tab that runs the engine (this tab follows it)`, 'LEADER_ONLY'));
    }
    const id = this.#calls.nextId();
    const requestId = MUTATING.has(method) ? (options.requestId ?? id) : undefined;
    const timeoutMs = (LONG.has(method) ? this.#options.longCallTimeoutMs : this.#options.callTimeoutMs) + (options.extraMs ?? 0);
    const call = { method, args, requestId, keyed: options.requestId !== undefined, transfer: options.transfer, onProgress: options.onProgress };
    const promise = this.#calls.add(id, call, timeoutMs);
    this.#dispatch(id);
    return promise;
  }

  // ---- heartbeat ---------------------------------------------------------------------------

  #unresponsive() {
    const who = this.role === 'leader' ? 'the engine worker' : 'the tab that runs the engine';
    return new SimplySyncError(
      `${who} has not answered for ${this.#options.unresponsiveMs} ms (a long-running call, or a frozen worker or tab); ` +
        'this call was not answered and may still take effect',
      'UNRESPONSIVE',
    );
  }

  /**
   * Leader: pings its worker. Follower with calls out: pings the leader's tab. An answer overdue
   * by `unresponsiveMs` is checked once more a moment later (an answer queued behind a busy page
   * arrives first), then calls waiting on it fail with UNRESPONSIVE until it answers again.
   */
  #heartbeat() {
    if (this.closed) return;
    const leading = this.role === 'leader';
    // (A leader of a package before this version has no packageVersion, and answers no ping.)
    const pingable = this.info?.packageVersion !== undefined;
    if (!leading && !(this.role === 'follower' && this.leaderId && pingable && this.#calls.size > 0)) {
      this.#pingSentAt = null;
      return;
    }
    if (leading && (!this.#worker || this.#restarting)) return;
    const now = Date.now();
    if (this.#pingSentAt === null) {
      this.#pingSentAt = now;
      if (!leading) {
        this.#send(this.leaderId, { type: 'ping', from: this.tabId, nonce: now });
        return;
      }
      const sent = now;
      this.#toWorker('ping', []).then(
        () => {
          if (this.#pingSentAt === sent) this.#pingSentAt = null;
          this.#stuck = false;
        },
        () => this.#pingSentAt === sent && (this.#pingSentAt = null),
      );
      return;
    }
    if (this.#stuck || now - this.#pingSentAt < this.#options.unresponsiveMs) return;
    const overdue = this.#pingSentAt;
    setTimeout(() => {
      if (this.closed || this.#pingSentAt !== overdue) return; // answered meanwhile
      const error = this.#unresponsive();
      if (leading) {
        this.#stuck = true;
        for (const [id, call] of this.#workerCalls) {
          if (call.method === 'ping' || MUTATING.has(call.method)) continue;
          this.#workerCalls.delete(id);
          call.reject(error);
        }
      } else {
        this.#calls.rejectSentTo(this.leaderId, error, (call) => !MUTATING.has(call.method));
        this.#pingSentAt = null; // the next call out pings afresh
      }
    }, 500);
  }

  // ---- events, visibility ------------------------------------------------------------------

  on(event, fn) {
    return this.#listeners.on(event, fn);
  }

  #emit(event, data) {
    if (event === 'status') {
      // The latest statuses, known without asking anyone (Engine.status); a leader's info
      // carries them to tabs that join.
      this.lastStatus = data;
      if (this.info) this.info.status = data;
    }
    this.#listeners.emit(event, data);
  }


  #isVisible() {
    return typeof document === 'undefined' || document.visibilityState !== 'hidden';
  }

  #watchVisibility() {
    if (typeof document === 'undefined') return;
    this.onVisibility = () => {
      if (this.role === 'leader') this.#applyVisibility();
      else this.#shared?.postMessage({ type: 'visibility', from: this.tabId, visible: this.#isVisible() });
    };
    document.addEventListener('visibilitychange', this.onVisibility);
  }

  /** A closed page says goodbye, so the leader stops counting it as visible. */
  #watchPageHide() {
    if (typeof addEventListener !== 'function') return;
    this.onPageHide = (e) => {
      if (!e.persisted) this.#shared?.postMessage({ type: 'bye', from: this.tabId });
    };
    addEventListener('pagehide', this.onPageHide);
  }

  /** Leader: polls slow down while no tab of the app is visible. */
  #applyVisibility() {
    if (this.role !== 'leader' || !this.#worker) return;
    const visible = this.#isVisible() || [...this.#visible.values()].some(Boolean);
    this.#toWorker('setVisible', [visible]).catch(() => {});
  }

  // ---- closing ---------------------------------------------------------------------------

  #afterReset() {
    this.#shared?.postMessage({ type: 'closed', reason: 'the local data of this database was deleted (resetLocalData)' });
    // After the answers to the calls in flight (the reset's own included) went out.
    setTimeout(() => this.#closeLocally(closedError('the local data of this database was deleted')));
  }

  #closeLocally(error) {
    if (this.closed) return;
    this.closed = true;
    this.closeError = error;
    clearInterval(this.#beat);
    this.#releaseSchemaLock?.();
    this.#restarted?.(); // calls waiting for a restart go on, to CLOSED
    this.#failReady(error);
    this.#calls.rejectAll(error);
    this.#election?.abort(); // a lock request still waiting
    this.#stopWorker(); // also a worker still opening
    this.#releaseLock?.();
    this.#shared?.postMessage({ type: 'bye', from: this.tabId });
    this.#shared?.close();
    this.#inbox?.close();
    for (const c of this.#outboxes.values()) c.close();
    if (this.onVisibility) document.removeEventListener('visibilitychange', this.onVisibility);
    if (this.onPageHide) removeEventListener('pagehide', this.onPageHide);
    this.#emit('closed', error);
  }

  /** Closes this tab's engine: calls still running reject with CLOSED. */
  async close() {
    if (this.closed) return;
    this.#closing = true;
    if (this.role === 'leader' && this.#worker) {
      const stop = this.#toWorker('close', []).catch(() => {});
      await Promise.race([stop, new Promise((r) => setTimeout(r, 2000))]);
    }
    this.#closeLocally(closedError());
  }
}
