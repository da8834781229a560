'use client';
// React bindings (`simplysync/react`): an engine in context, and hooks on top of live queries
// (Engine.watch / watchQuery) and the engine's status and progress events, all through
// useSyncExternalStore. React is a peer dependency: the app's own copy is used, never bundled.
// 'use client': the hooks run in the browser only (Next.js's App Router renders this module's
// importers as client components).
import { createContext, createElement, useContext, useEffect, useMemo, useSyncExternalStore } from 'react';

import { SimplySyncError } from './errors.js';
import { stableJson } from './stable-json.js';

const EngineContext = createContext(null);

/** Makes `engine` available to every hook below it. */
export function EngineProvider({ engine, children }) {
  if (!engine || typeof engine.watch !== 'function') {
    throw new SimplySyncError('<EngineProvider engine={…}> needs the engine createEngine() resolved with', 'INVALID_ARGUMENT');
  }
  return createElement(EngineContext.Provider, { value: engine }, children);
}

/** The engine of the nearest EngineProvider. */
export function useEngine() {
  const engine = useContext(EngineContext);
  if (!engine) throw new SimplySyncError('useEngine() and the query hooks need an <EngineProvider engine={…}> above them', 'INVALID_ARGUMENT');
  return engine;
}

const LOADING = Object.freeze({ data: undefined, isLoading: true, error: null });

/**
 * An external store over one live query: the query runs while a component subscribes; its last
 * state survives a resubscription (React's StrictMode subscribes twice).
 */
function liveStore(start, onIdle) {
  let state = LOADING;
  let stop = null;
  const listeners = new Set();
  const set = (next) => {
    state = next;
    for (const fn of listeners) fn();
  };
  return {
    subscribe(onChange) {
      listeners.add(onChange);
      if (!stop) {
        try {
          stop = start(
            (data) => set({ data, isLoading: false, error: null }),
            (error) => set({ data: state.data, isLoading: false, error }),
          );
        } catch (error) {
          set({ data: state.data, isLoading: false, error });
        }
      }
      return () => {
        listeners.delete(onChange);
        if (listeners.size === 0 && stop) {
          stop();
          stop = null;
          onIdle?.();
        }
      };
    },
    getSnapshot: () => state,
    /** Whether more than `others` subscriptions hold it. */
    watched: (others = 0) => listeners.size > others,
  };
}

function useLive(engine, key, start) {
  // A new store only when the query itself changes (not on every render's new options object).
  const store = useMemo(() => liveStore(start), [engine, key]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

/** Rows of `table` ({@link Engine.list} options), kept current: `{data, isLoading, error}`. */
export function useQuery(table, options = {}) {
  const engine = useEngine();
  return useLive(engine, stableJson(['list', table, options]), (onData, onError) => engine.watch(table, options, onData, onError));
}

/** The result of a read-only SQL query, kept current: `{data, isLoading, error}`. */
export function useSqlQuery(sql, params = []) {
  const engine = useEngine();
  return useLive(engine, stableJson(['sql', sql, params]), (onData, onError) => engine.watchQuery(sql, params, onData, onError));
}

/**
 * Live queries for Suspense: one store per engine and query, kept across the render that
 * suspended (React keeps no state of a component that suspends before it mounts). A pending
 * query holds its own subscription until a component subscribes, or 30 s at most.
 */
const suspended = new WeakMap(); // engine -> Map(key -> {store, ready, hold})

function suspenseEntry(engine, key, start) {
  let byKey = suspended.get(engine);
  if (!byKey) suspended.set(engine, (byKey = new Map()));
  let entry = byKey.get(key);
  if (!entry) {
    const store = liveStore(start, () => {
      // No component shows it any more: forgotten a while later unless one comes back.
      clearTimeout(entry.evict);
      entry.evict = setTimeout(() => !store.watched() && byKey.get(key) === entry && byKey.delete(key), 60000);
    });
    entry = { store, hold: null, evict: null };
    let settle;
    entry.ready = new Promise((resolve) => {
      settle = resolve;
      entry.hold = store.subscribe(() => !store.getSnapshot().isLoading && resolve());
    });
    // A suspended render that never mounts (the user went elsewhere) lets go of the query after
    // five minutes; a render still waiting then starts it afresh.
    const timer = setTimeout(() => {
      if (byKey.get(key) === entry && !store.watched(1)) byKey.delete(key);
      release(entry);
      settle();
    }, 300000);
    entry.release = () => {
      clearTimeout(timer);
      entry.hold?.();
      entry.hold = null;
    };
    byKey.set(key, entry);
  }
  return { entry, forget: () => byKey.get(key) === entry && byKey.delete(key) };
}

const release = (entry) => entry.release();

function useSuspenseLive(engine, key, start) {
  const { entry, forget } = suspenseEntry(engine, key, start);
  const state = useSyncExternalStore(entry.store.subscribe, entry.store.getSnapshot, entry.store.getSnapshot);
  // Subscribed now: the entry's own hold is no longer needed.
  useEffect(() => release(entry), [entry]);
  if (state.isLoading) throw entry.ready;
  if (state.error && state.data === undefined) {
    forget(); // a retry (an error boundary's reset) starts the query afresh
    release(entry);
    throw state.error;
  }
  return state.data;
}

/**
 * Rows of `table`, kept current, for `<Suspense>`: suspends until the first result and returns
 * the rows (an error before any result goes to the nearest error boundary).
 */
export function useSuspenseQuery(table, options = {}) {
  const engine = useEngine();
  return useSuspenseLive(engine, stableJson(['list', table, options]), (onData, onError) => engine.watch(table, options, onData, onError));
}

/** The result of a read-only SQL query, kept current, for `<Suspense>` (see {@link useSuspenseQuery}). */
export function useSuspenseSqlQuery(sql, params = []) {
  const engine = useEngine();
  return useSuspenseLive(engine, stableJson(['sql', sql, params]), (onData, onError) => engine.watchQuery(sql, params, onData, onError));
}

/**
 * The engine's state without a request: `{relays, hasSynced, closed}` — every relay's status,
 * whether a relay was ever read from, and the error the engine closed with (null while open).
 * Re-rendered on each status and on close.
 */
export function useStatus() {
  const engine = useEngine();
  const store = useMemo(() => statusStore(engine), [engine]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

function statusStore(engine) {
  let closed = engine.closed ?? null; // closed before this store was made
  const read = () => Object.freeze({ relays: engine.status, hasSynced: engine.hasSynced, closed });
  let value = read();
  return {
    subscribe(onChange) {
      const changed = () => {
        value = read();
        onChange();
      };
      closed ??= engine.closed ?? null;
      value = read(); // what changed before this subscription
      const offStatus = engine.onStatus(changed);
      const offClose = engine.onClose((e) => {
        closed = e;
        changed();
      });
      return () => {
        offStatus();
        offClose();
      };
    },
    getSnapshot: () => value,
  };
}

/** A store of the latest value an engine event carried (`initial` until the first). */
function eventStore(engine, listen, first) {
  let value = null;
  const listeners = new Set();
  const set = (next) => {
    value = next;
    for (const fn of listeners) fn();
  };
  let off = null;
  return {
    subscribe(onChange) {
      listeners.add(onChange);
      if (!off) {
        off = listen(set);
        first?.().then((v) => value === null && off && set(v), () => {});
      }
      return () => {
        listeners.delete(onChange);
        if (listeners.size === 0 && off) {
          off();
          off = null;
        }
      };
    },
    getSnapshot: () => value,
  };
}

const NO_STATUSES = Object.freeze([]);

/** Every relay's status ({@link Engine.getRelayStatuses}), re-rendered on each change. */
export function useRelayStatuses() {
  const engine = useEngine();
  const store = useMemo(() => eventStore(engine, (set) => engine.onStatus(set), () => engine.getRelayStatuses()), [engine]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot) ?? NO_STATUSES;
}

/** The latest pull progress report (for a restore's progress bar), or null before the first. */
export function useSyncProgress() {
  const engine = useEngine();
  const store = useMemo(() => eventStore(engine, (set) => engine.onProgress(set)), [engine]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

/**
 * The hooks, typed by the app's schema (index.d.ts / react.d.ts): `createHooks(schema)` or
 * `createHooks<typeof schema>()`. At run time they are the same functions.
 */
export function createHooks() {
  return { useEngine, useQuery, useSqlQuery, useSuspenseQuery, useSuspenseSqlQuery, useRelayStatuses, useStatus, useSyncProgress };
}
