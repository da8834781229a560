// The app's event listeners (change, status, progress, …) and the events the engine raises
// before the app could attach any: the engine's first pass starts while it opens, so its
// progress and statuses may come before `createEngine` resolves. Those are held and delivered,
// in order, one task after the engine is ready — after the app's code that awaited
// `createEngine` attached its listeners — and every later event goes out at once.

export class Listeners {
  #sets = {};
  /** Events raised before the engine was ready, until they are delivered (then null). */
  #held = [];
  #opening = false;

  constructor(events) {
    for (const event of events) this.#sets[event] = new Set();
  }

  on(event, fn) {
    this.#sets[event].add(fn);
    return () => this.#sets[event].delete(fn);
  }

  emit(event, data) {
    if (this.#held) {
      this.#held.push([event, data]);
      return;
    }
    this.#deliver(event, data);
  }

  /** The engine is ready: what was held goes out one task from now (once). */
  open() {
    if (!this.#held || this.#opening) return;
    this.#opening = true;
    setTimeout(() => {
      // Events raised while these are delivered join the end of the queue, so order holds.
      const held = this.#held;
      for (let i = 0; i < held.length; i++) this.#deliver(...held[i]);
      this.#held = null;
    }, 0);
  }

  #deliver(event, data) {
    for (const fn of this.#sets[event] ?? []) {
      try {
        fn(data);
      } catch (e) {
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }
}
