// Live queries: a query that calls back at once with its result, and again whenever a committed
// change could alter it — a local batch or an applied remote page that touched one of the tables
// it reads. Runs are coalesced: at most one runs at a time, and changes that arrive meanwhile
// cause one more run after it, however many they are — started after a pause as long as the
// last run took (at most 1 s), so that a large live query leaves the engine at least half its
// time while a restore applies page after page. A result equal to the last one delivered is not
// delivered again. Knows nothing about workers or tabs: it hears change events and runs
// queries through the functions it is given (tested on its own in Node: units.test.mjs).
import { invalid, revive } from './errors.js';
import { stableJson } from './stable-json.js';

/** Errors a re-run will not fix: the watch reports them once and ends. */
const FINAL = new Set(['INVALID_QUERY', 'UNKNOWN_TABLE', 'UNKNOWN_COLUMN', 'INVALID_ARGUMENT', 'INVALID_VALUE', 'CLOSED']);

/** Reports an error no one listens for where the app's developer sees it. */
const uncaught = (e) =>
  queueMicrotask(() => {
    throw e;
  });

class Watch {
  #run;
  #findTables;
  #callback;
  #onError;
  #tables = null; // Set of table names, or null while not known
  #running = false;
  #dirty = false;
  #last; // the stable JSON of the result last delivered
  #onEnd;
  #paced;
  stopped = false;
  runs = 0;

  constructor({ tables, findTables, run, callback, onError, onEnd, paced }) {
    this.#paced = paced;
    this.#tables = tables ? new Set(tables) : null;
    this.#findTables = findTables;
    this.#run = run;
    this.#callback = callback;
    this.#onError = onError;
    this.#onEnd = onEnd;
  }

  /** A change touched `tables` (null: anything may have changed, e.g. a new leader). */
  changed(tables) {
    if (this.stopped) return;
    if (tables && this.#tables && !tables.some((t) => this.#tables.has(t))) return;
    if (this.#running) {
      this.#dirty = true;
      return;
    }
    this.run();
  }

  async run() {
    this.#running = true;
    this.#dirty = false;
    this.runs++;
    const started = Date.now();
    try {
      if (!this.#tables && this.#findTables) this.#tables = new Set(await this.#findTables());
      const result = await this.#run();
      if (this.stopped) return;
      const key = stableJson(result);
      if (key !== this.#last) {
        this.#last = key;
        try {
          this.#callback(result);
        } catch (e) {
          uncaught(e);
        }
      }
    } catch (e) {
      if (this.stopped) return;
      const error = revive(e);
      if (FINAL.has(error.code)) this.stop();
      // After a passing failure the next result is delivered even if it equals the last one:
      // it tells the app (and useQuery's error state) that the query works again.
      else this.#last = undefined;
      if (error.code === 'CLOSED') return; // the engine closed: onClose tells the app
      if (this.#onError) {
        try {
          this.#onError(error);
        } catch (thrown) {
          uncaught(thrown);
        }
      } else {
        uncaught(error);
      }
    } finally {
      if (this.#dirty && !this.stopped) {
        const again = () => (this.stopped ? (this.#running = false) : this.run());
        if (this.#paced) setTimeout(again, Math.min(1000, Date.now() - started));
        else again();
      } else {
        this.#running = false;
      }
    }
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    this.#onEnd(this);
  }
}

/** The live queries of one engine handle. */
export class Watches {
  #active = new Set();
  #paced;

  /**
   * `events.on(name, fn)` subscribes to `change` ({tables}), `refresh` (anything may have
   * changed) and `closed`. `paced: false` re-runs at once (for tests of the coalescing alone).
   */
  constructor(events, { paced = true } = {}) {
    this.#paced = paced;
    events.on('change', (event) => {
      for (const w of [...this.#active]) w.changed(event.tables ?? null);
    });
    events.on('refresh', () => {
      for (const w of [...this.#active]) w.changed(null);
    });
    events.on('closed', () => {
      for (const w of [...this.#active]) w.stop();
    });
  }

  /**
   * Starts a live query: `run()` resolves with its result; `tables` (or `findTables()`, asked
   * before the first run) names the tables it reads. Returns the function that stops it.
   */
  add({ tables, findTables, run, callback, onError }) {
    if (typeof callback !== 'function') throw invalid('the callback of a live query must be a function');
    if (onError !== undefined && typeof onError !== 'function') throw invalid('onError must be a function when given');
    const onEnd = (w) => this.#active.delete(w);
    const watch = new Watch({ tables, findTables, run, callback, onError, onEnd, paced: this.#paced });
    this.#active.add(watch);
    watch.run();
    const stop = () => watch.stop();
    Object.defineProperty(stop, 'runs', { get: () => watch.runs }); // how many times it ran (for tests)
    return stop;
  }

  get size() {
    return this.#active.size;
  }
}
