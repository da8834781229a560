/**
 * React bindings for SimplySync: `import { EngineProvider, useQuery } from 'simplysync/react'`.
 * React (≥ 18) is a peer dependency: the app's own copy is used.
 *
 * @packageDocumentation
 */
import type { ReactElement, ReactNode } from 'react';

import type {
  Engine, JsonValue, ListOptionsOf, Progress, RelayStatus, RowOf, Schema, SimplySyncError, TableName,
} from './index.js';

/** The state of a live query in a component. */
export interface QueryState<T> {
  /** The latest result; `undefined` until the first one arrives. */
  data: T | undefined;
  /** True until the first result (or error). */
  isLoading: boolean;
  /** The last error (the previous `data` is kept), or null. */
  error: SimplySyncError | null;
}

/**
 * Makes `engine` available to the hooks below it.
 * @example
 * ```tsx
 * const engine = await createEngine({ secret, relays, schema });
 * createRoot(el).render(<EngineProvider engine={engine}><App /></EngineProvider>);
 * ```
 */
export declare function EngineProvider<S extends Schema>(props: { engine: Engine<S>; children?: ReactNode }): ReactElement;

/** The engine of the nearest {@link EngineProvider} (throws `INVALID_ARGUMENT` without one). */
export declare function useEngine<S extends Schema = Schema>(): Engine<S>;

/**
 * Rows of `table`, kept current by {@link Engine.watch}: the component re-renders when a local
 * write, another tab's write or a pulled page changes them.
 * @example
 * ```tsx
 * const { data: todos = [], isLoading } = useQuery('todos', { where: { done: false }, orderBy: 'title' });
 * ```
 */
export declare function useQuery<T extends string>(table: T, options?: ListOptionsOf<Schema, T>): QueryState<RowOf<Schema, T>[]>;

/**
 * The result of read-only SQL, kept current by {@link Engine.watchQuery}.
 * @example
 * ```tsx
 * const { data } = useSqlQuery<{ n: number }>('SELECT count(*) AS n FROM todos WHERE NOT deleted');
 * ```
 */
export declare function useSqlQuery<R extends object = { [column: string]: JsonValue }>(
  sql: string,
  params?: JsonValue[],
): QueryState<R[]>;

/** Every relay's status, re-rendered whenever one changes (empty until first known). */
export declare function useRelayStatuses(): RelayStatus[];

/** The latest pull progress (a restore's progress bar), or null before the first report. */
export declare function useSyncProgress(): Progress | null;

/** What {@link useStatus} returns. */
export interface EngineStatus {
  /** Every relay's status as last known (no request). */
  relays: RelayStatus[];
  /** Whether a relay was ever read from on this device. */
  hasSynced: boolean;
  /** The error the engine closed with (its `code` says why: `OUTDATED`, `DELETED`, `SECRET_LOST`, …), or null while open. */
  closed: SimplySyncError | null;
}

/**
 * The engine's state without a request, re-rendered on each status change and when the engine
 * closes — the place to show "syncing…", "offline", or a reload prompt after an app update.
 * @example
 * ```tsx
 * const { hasSynced, closed } = useStatus();
 * if (closed?.code === 'OUTDATED') return <p>A newer version is open in another tab. <button onClick={() => location.reload()}>Reload</button></p>;
 * ```
 */
export declare function useStatus(): EngineStatus;

/**
 * Rows of `table`, kept current, for `<Suspense>`: suspends until the first result, then
 * returns the rows; an error before any result goes to the nearest error boundary.
 * @example
 * ```tsx
 * <Suspense fallback={<Spinner />}><TodoList /></Suspense> // TodoList: const todos = useSuspenseQuery('todos');
 * ```
 */
export declare function useSuspenseQuery<T extends string>(table: T, options?: ListOptionsOf<Schema, T>): RowOf<Schema, T>[];

/** The result of read-only SQL, kept current, for `<Suspense>` (see {@link useSuspenseQuery}). */
export declare function useSuspenseSqlQuery<R extends object = { [column: string]: JsonValue }>(sql: string, params?: JsonValue[]): R[];

/** The hooks, typed by one schema (see {@link createHooks}). */
export interface TypedHooks<S extends Schema> {
  useEngine(): Engine<S>;
  useQuery<T extends TableName<S>>(table: T, options?: ListOptionsOf<S, T>): QueryState<RowOf<S, T>[]>;
  useSqlQuery<R extends object = { [column: string]: JsonValue }>(sql: string, params?: JsonValue[]): QueryState<R[]>;
  useSuspenseQuery<T extends TableName<S>>(table: T, options?: ListOptionsOf<S, T>): RowOf<S, T>[];
  useSuspenseSqlQuery<R extends object = { [column: string]: JsonValue }>(sql: string, params?: JsonValue[]): R[];
  useRelayStatuses(): RelayStatus[];
  useStatus(): EngineStatus;
  useSyncProgress(): Progress | null;
}

/**
 * The hooks typed by the app's schema: table names, columns and row types are checked. No
 * run-time cost (they are the same functions).
 * @example
 * ```ts
 * export const { useQuery, useEngine } = createHooks(schema); // or createHooks<typeof schema>()
 * ```
 */
export declare function createHooks<const S extends Schema>(schema?: S): TypedHooks<S>;
