// Calls in flight, each with a deadline: every call settles — with its answer, its error, a
// TIMEOUT, or CLOSED when the engine closes. Knows nothing about workers or tabs (tested on its
// own in Node: tests/browser-js/units.test.mjs).
import { SimplySyncError, closedError, revive } from './errors.js';

export class Calls {
  #pending = new Map(); // id -> {method, args, requestId, resolve, reject, timer, sentTo}
  #seq = 0;
  #prefix;

  constructor(prefix) {
    this.#prefix = prefix;
  }

  /** A fresh call id (also used as the request id of a mutating call). */
  nextId() {
    return `${this.#prefix}:${++this.#seq}`;
  }

  /** Registers a call; it rejects with TIMEOUT after `timeoutMs`. */
  add(id, call, timeoutMs) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        if (!this.#pending.has(id)) return;
        this.#pending.delete(id);
        reject(new SimplySyncError(`${call.method} did not answer within ${timeoutMs} ms`, 'TIMEOUT'));
      }, timeoutMs);
      this.#pending.set(id, { ...call, resolve, reject, timer, sentTo: null });
    });
  }

  has(id) {
    return this.#pending.has(id);
  }

  get(id) {
    return this.#pending.get(id);
  }

  /** Settles call `id` (unknown or already settled ids are ignored). */
  settle(id, ok, valueOrError) {
    const call = this.#pending.get(id);
    if (!call) return false;
    this.#pending.delete(id);
    clearTimeout(call.timer);
    if (ok) call.resolve(valueOrError);
    else call.reject(revive(valueOrError));
    return true;
  }

  /** Rejects every call with `error` (default: CLOSED). */
  rejectAll(error = closedError()) {
    for (const id of [...this.#pending.keys()]) this.settle(id, false, error);
  }

  /** Rejects the calls last sent to tab `tabId` (those `which` picks) with `error`. */
  rejectSentTo(tabId, error, which = () => true) {
    for (const [id, call] of [...this.#pending.entries()]) {
      if (call.sentTo === tabId && which(call)) this.settle(id, false, error);
    }
  }

  /** Calls not answered yet, oldest first: `[id, call]`. */
  unanswered() {
    return [...this.#pending.entries()];
  }

  get size() {
    return this.#pending.size;
  }
}
