/**
 * SimplySync for the browser: an end-to-end-encrypted, local-first sync engine.
 *
 * The app's data lives in SQLite on OPFS inside a dedicated worker; every write becomes an
 * AES-256-GCM-encrypted event that relays store as ciphertext; other devices pull and apply
 * events with row-level last-writer-wins.
 *
 * @packageDocumentation
 */

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A column type. `blob` holds the id of a blob stored with {@link Engine.putBlob}. */
export type ColumnType = 'text' | 'integer' | 'real' | 'boolean' | 'json' | 'blob';

/** One declared column. */
export interface ColumnDef {
  /** A letter or `_`, then letters, digits or `_` (at most 64). `id`, `updatedAt`, `deleted` are reserved. */
  readonly name: string;
  readonly type: ColumnType;
  /**
   * What rows that never had the column read, and what a write that leaves it out stores
   * (default `null`). A value of the column's type. Fixed when the column is added: a database
   * refuses another default later (`SCHEMA_INVALID`).
   */
  readonly default?: JsonValue;
}

/** One declared table. */
export interface TableDef {
  readonly name: string;
  readonly columns: readonly ColumnDef[];
  /**
   * How concurrent edits of one row merge. `'row'` (default): the write with the greatest HLC
   * wins the whole row. `'column'`: each column (and the row's deletion) is its own
   * last-writer-wins register, so concurrent edits of different columns both survive; each
   * changed column is an event of its own.
   */
  readonly merge?: 'row' | 'column';
  /** Indexes, each the columns it orders by (declared columns, `id`, `updatedAt`, `deleted`; 1 to 8). */
  readonly indexes?: readonly (readonly string[])[];
}

/**
 * The app's schema. Later versions may add tables, columns and indexes; nothing is dropped or
 * retyped. A device on an older version keeps the values of columns it does not declare and
 * sends them on with its own writes. Bump `schemaVersion` only when the meaning of existing
 * data changes: older devices then defer (keep, not apply) events they do not understand.
 */
export interface Schema {
  /** Defaults to 1. */
  readonly schemaVersion?: number;
  readonly tables: readonly TableDef[];
}

/**
 * Declares the schema once, with its literal names and types kept, so that the engine's calls
 * are typed by it: table names, column names and value types are checked by the compiler. At run
 * time it returns its argument (no cost). An object literal written inline in
 * {@link createEngine}'s options is typed the same way.
 * @example
 * ```ts
 * const schema = defineSchema({ tables: [
 *   { name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }] },
 * ] });
 * const engine = await createEngine({ secret, relays, schema });
 * await engine.insert('todos', { id: 'a', title: 'Milk', done: false }); // checked
 * const open: RowOf<typeof schema, 'todos'>[] = await engine.list('todos', { where: { done: false } });
 * ```
 */
export declare function defineSchema<const S extends Schema>(schema: S): S;

/** The TypeScript type of a column type's values (every column may also be null). */
export type ColumnValue<T extends ColumnType> = T extends 'text' | 'blob'
  ? string
  : T extends 'integer' | 'real'
    ? number
    : T extends 'boolean'
      ? boolean
      : JsonValue;

/** The names of a schema's tables. */
export type TableName<S extends Schema> = S['tables'][number]['name'];

type IsUnion<T, U = T> = T extends unknown ? ([U] extends [T] ? false : true) : never;

/** `T` when it names one table; never for a union of names (whose columns would mix). */
type OneTable<T extends string> = [IsUnion<T>] extends [false] ? T : never;

type TableOf<S extends Schema, T extends string> = Extract<S['tables'][number], { readonly name: OneTable<T> }>;

/** True for a schema whose names are plain strings (not declared with literal types): calls are then untyped. */
type Loose<S extends Schema> = string extends TableName<S> ? true : false;

type Flat<T> = { [K in keyof T]: T[K] } & {};

/** The declared columns of table `T`, each a value of its type or null. */
export type Columns<S extends Schema, T extends string> = {
  -readonly [C in TableOf<S, T>['columns'][number] as C['name']]: ColumnValue<C['type']> | null;
};

/** A stored row of table `T`: system columns plus its declared columns ({@link Row} for an untyped schema). */
export type RowOf<S extends Schema, T extends string> = Loose<S> extends true
  ? Row
  : Flat<{ id: string; updatedAt: string; deleted: boolean } & Columns<S, T>>;

/** What to insert or upsert into table `T`: `id` plus any of its columns ({@link RowInput} for an untyped schema). */
export type InsertOf<S extends Schema, T extends string> = Loose<S> extends true
  ? RowInput
  : Flat<{ id: string } & Partial<Columns<S, T>>>;

/** A patch of table `T`'s columns. */
export type PatchOf<S extends Schema, T extends string> = Loose<S> extends true
  ? { [column: string]: JsonValue }
  : Partial<Columns<S, T>>;

type OrderColumn<S extends Schema, T extends string> = 'id' | 'updatedAt' | (keyof Columns<S, T> & string);

/** {@link ListOptions} of table `T`: filters and ordering by its own columns. */
export type ListOptionsOf<S extends Schema, T extends string> = Loose<S> extends true
  ? ListOptions
  : {
      where?: Partial<Columns<S, T>> & { id?: string };
      orderBy?: OrderColumn<S, T> | `${OrderColumn<S, T>} asc` | `${OrderColumn<S, T>} desc`;
      limit?: number;
      includeDeleted?: boolean;
    };

/** One operation of {@link Engine.transaction}, typed by the schema. */
export type OperationOf<S extends Schema> = Loose<S> extends true
  ? Operation
  : {
      [T in TableName<S>]:
        | { op: 'insert'; table: T; row: InsertOf<S, T> }
        | { op: 'upsert'; table: T; row: InsertOf<S, T> }
        | { op: 'update'; table: T; id: string; patch: PatchOf<S, T> }
        | { op: 'delete'; table: T; id: string };
    }[TableName<S>];

/**
 * A running live query ({@link Engine.watch}, {@link Engine.watchQuery}): call it to stop it.
 * `runs` counts how many times the query ran (changes that arrive while it runs cause one more run, not one each).
 */
export interface LiveQuery {
  (): void;
  readonly runs: number;
}

/** Options of {@link createEngine}. */
export interface EngineOptions<S extends Schema = Schema> {
  /**
   * A recovery phrase (12–24 words) or an `sf1_` key — for a new device (a phrase the user just
   * wrote down, or typed to restore). Leave it out to reopen a database that already holds its
   * secret ({@link hasStoredSecret}): the engine keeps the secret itself, sealed at rest.
   */
  secret?: string;
  /** Relay base URLs. Each URL is an opaque key: a trailing slash makes a different relay. */
  relays: string[];
  /** The tables and columns ({@link defineSchema} types every call by it). */
  schema: S;
  /** The database's name (its OPFS directory or IndexedDB store). Default `simplysync.db`. Tabs with the same name share one engine. */
  dbName?: string;
  /**
   * Poll interval in ms. Default 5000. While every relay's live channel is healthy (see
   * {@link RelayStatus.live}) the poll runs only once a minute, as a safety net.
   */
  syncIntervalMs?: number;
  /** `false` turns off every automatic pass (timer, after writes, at boot, on focus/online, live notices); {@link Engine.sync} still works. Default true. */
  autoSync?: boolean;
  /**
   * Keep one live channel (a long-poll) open to each relay that offers live notices, and pull
   * as soon as another device writes. Relays without them are polled. Needs `autoSync`.
   * Default true.
   */
  live?: boolean;
  /**
   * Where the database lives. `auto` (default) tries OPFS, then IndexedDB, then memory, and
   * reports what it picked and why in {@link Engine.storage}; `opfs` and `idb` fail with
   * `STORAGE` instead of falling back; `memory` is not durable.
   */
  storage?: 'auto' | 'opfs' | 'idb' | 'memory';
  /**
   * The largest event (sealed row version, as stored JSON) your relays accept: their
   * `MAX_EVENT_BYTES`. A write whose event would be larger fails with `ROW_TOO_LARGE`.
   * Default 262144.
   */
  maxEventBytes?: number;
  /**
   * The largest stored blob chunk your relays accept (`MAX_BLOB_BYTES`); a `chunkSize` above
   * `maxBlobBytes - 28` fails with `CHUNK_TOO_LARGE`. Default 1048576.
   */
  maxBlobBytes?: number;
  /** Each relay request's deadline in ms, body included; a relay that does not answer in time is `offline`. Default 30000. */
  requestTimeoutMs?: number;
  /**
   * Registration tokens by relay URL, for relays run with `REGISTRATION=token`: such a relay
   * registers a new owner only with a token its operator signed (your server hands it to a
   * signed-in user; docs/relay.md). Each token goes to its own relay only, with writes, and
   * is kept in memory only. Without one, that relay's status is `error` with reason code
   * `registration_token`; give one later with {@link Engine.setRegistrationToken}.
   */
  registrationTokens?: Record<string, string>;
  /** How long a call waits for the engine before it rejects with `TIMEOUT`. Default 60000. */
  callTimeoutMs?: number;
  /** The same for calls that may take long (`sync`, `rekey`, `getBlob`, …). Default 600000. */
  longCallTimeoutMs?: number;
  /** How long {@link createEngine} waits for the engine to open (or for the tab that runs it). Default 60000. */
  openTimeoutMs?: number;
  /**
   * How long the engine's worker (or, from another tab, the tab that runs it) may go without
   * answering a heartbeat before the calls waiting on it reject with `UNRESPONSIVE` — a call
   * that runs long itself, or a frozen worker. Default 15000.
   */
  unresponsiveMs?: number;
  /**
   * Whether to ask `navigator.storage.persist()` when a durable engine opens (Firefox shows a
   * permission prompt). Default true; never awaited.
   */
  persist?: boolean;
}

/**
 * Every error code a {@link SimplySyncError} can carry.
 * - Writes and reads: `UNKNOWN_TABLE`, `UNKNOWN_COLUMN`, `INVALID_VALUE`, `INVALID_ROW`, `ALREADY_EXISTS`, `NOT_FOUND`, `INVALID_QUERY`, `ROW_TOO_LARGE`.
 * - Blobs: `BLOB_NOT_FOUND`, `BLOB_UNAVAILABLE`, `BLOB_INVALID`, `CHUNK_TOO_LARGE`.
 * - Secrets: `SECRET_EMPTY`, `SECRET_WORD_COUNT`, `SECRET_UNKNOWN_WORD`, `SECRET_CHECKSUM`, `SECRET_INVALID_KEY`, `SECRET_INVALID_PHRASE`, `NO_SECRET` (nothing stored: pass `secret`), `SECRET_LOST` (stored but its key is gone: ask for the phrase), `OWNER_MISMATCH`, `REKEY_REFUSED`, `NO_PENDING_REKEY`, `CRYPTO`, `ENTROPY_UNAVAILABLE`.
 * - Setup: `SCHEMA_INVALID`, `SCHEMA_MISMATCH` (another tab runs another schema of the same `schemaVersion`), `INVALID_RELAY`, `INVALID_ARGUMENT`, `STORAGE`.
 * - Tabs and calls: `CLOSED`, `TIMEOUT`, `LEADER_ONLY` (asked in a tab that does not run the engine), `WORKER`, `PANIC`, `INTERNAL`,
 *   `UNRESPONSIVE` (the engine's worker or tab did not answer its heartbeat: the call may still take effect),
 *   `OUTDATED` (a tab with a newer schema took the database over: reload the page),
 *   `DELETED` (the database was deleted by {@link deleteDatabase}), `NOT_SYNCED` (`resetLocalData({ requireSynced: true })` refused).
 */
export type ErrorCode =
  | 'UNKNOWN_TABLE' | 'UNKNOWN_COLUMN' | 'INVALID_VALUE' | 'INVALID_ROW' | 'ALREADY_EXISTS' | 'NOT_FOUND'
  | 'INVALID_QUERY' | 'ROW_TOO_LARGE' | 'BLOB_NOT_FOUND' | 'BLOB_UNAVAILABLE' | 'BLOB_INVALID' | 'CHUNK_TOO_LARGE'
  | 'SECRET_EMPTY' | 'SECRET_WORD_COUNT' | 'SECRET_UNKNOWN_WORD' | 'SECRET_CHECKSUM' | 'SECRET_INVALID_KEY'
  | 'SECRET_INVALID_PHRASE' | 'NO_SECRET' | 'SECRET_LOST' | 'OWNER_MISMATCH' | 'REKEY_REFUSED' | 'NO_PENDING_REKEY'
  | 'CRYPTO' | 'ENTROPY_UNAVAILABLE' | 'SCHEMA_INVALID' | 'SCHEMA_MISMATCH' | 'INVALID_RELAY' | 'INVALID_ARGUMENT'
  | 'STORAGE' | 'CLOSED' | 'TIMEOUT' | 'LEADER_ONLY' | 'WORKER' | 'PANIC' | 'INTERNAL' | 'UNRESPONSIVE' | 'OUTDATED'
  | 'DELETED' | 'NOT_SYNCED';

/** A row as stored: system columns plus the table's columns. */
export interface Row {
  id: string;
  /** The row's HLC (also its last event id). */
  updatedAt: string;
  deleted: boolean;
  [column: string]: JsonValue;
}

/** The columns of a row to write: `id` plus any declared columns. */
export interface RowInput {
  id: string;
  [column: string]: JsonValue;
}

/** One operation of {@link Engine.transaction}. */
export type Operation =
  | { op: 'insert'; table: string; row: RowInput }
  | { op: 'upsert'; table: string; row: RowInput }
  | { op: 'update'; table: string; id: string; patch: { [column: string]: JsonValue } }
  | { op: 'delete'; table: string; id: string };

/** Options of {@link Engine.list}. */
export interface ListOptions {
  /** Equality filters: `{column: value}`; `null` matches null. */
  where?: { [column: string]: JsonValue };
  /** `"column"`, `"column asc"` or `"column desc"`. Default: by id. */
  orderBy?: string;
  limit?: number;
  includeDeleted?: boolean;
}

/** One changed row. */
export interface RowChange {
  table: string;
  id: string;
}

/** A committed batch of changes: one per local write batch, one per applied remote page. */
export interface ChangeEvent {
  source: 'local' | 'remote';
  tables: string[];
  rows: RowChange[];
}

/** Pull progress of one relay (for a restore's progress bar). */
export interface Progress {
  relay: string;
  pages: number;
  eventsReceived: number;
  eventsApplied: number;
  bytes: number;
  /** The relay's newest seq, when reported: compare with `cursor` for a percentage. */
  headSeq: number | null;
  cursor: string;
  done: boolean;
}

/** A relay's state. `reseeding`: it lost its data and this device re-uploads its rows. `closed`: the owner was closed there (410). */
export type RelayState = 'synced' | 'syncing' | 'pending' | 'offline' | 'reseeding' | 'error' | 'closed';

/** The last failure of a relay. */
export interface RelayErrorInfo {
  status: number | null;
  /**
   * The relay's error code (`quota_exceeded`, `unauthorized`, …) or one the engine detected:
   * `relay_cursor_loop`, `relay_cursor_backwards`, `pull_incomplete`, `push_mismatch`,
   * `foreign_404`, `unconfirmed_404`, `relay_unstable`, `bad_response`, `local_storage`. A relay run
   * with `REGISTRATION=token` answers `registration_token` until the app gives its token
   * ({@link EngineOptions.registrationTokens}, {@link Engine.setRegistrationToken}).
   */
  code: string | null;
  message: string;
  /** True for failures that will not fix themselves (400/401/403/404/413/410). */
  terminal: boolean;
}

/** Items a relay refused on their own (413 for one event or chunk), kept locally. */
export interface SetAsideInfo {
  events: number;
  chunks: number;
  /** The latest reason. */
  reason: string | null;
}

/** Account figures from the relay's `/v1/status`. */
export interface AccountInfo {
  ownerId: string;
  quotaBytes: number;
  usedBytes: number;
  usedPct: number;
  headSeq: number;
  streams: number;
  events: number;
  createdAt: string;
}

/** One relay's status. */
export interface RelayStatus {
  url: string;
  state: RelayState;
  lastSyncAt: number | null;
  /** Local events the relay has not acknowledged. */
  pending: number;
  /** The last failure, of its reads or its writes, while it lasts. */
  error: RelayErrorInfo | null;
  /**
   * The last failure of its writes (pushes, blob chunks, compaction requests) while they fail:
   * the relay may still deliver other devices' changes.
   */
  pushError: RelayErrorInfo | null;
  /** The last failure of its reads (pulls) while they fail. */
  pullError: RelayErrorInfo | null;
  backoffUntil: number | null;
  /** `null` until known, or when the relay has no data for this owner yet. */
  account: AccountInfo | null;
  reseedReason: string | null;
  /** What this relay refused on its own; retried at the next start or with {@link Engine.retrySetAside}. */
  setAside: SetAsideInfo;
  /** Pushed events the relay already held with other bytes (it kept its copy), since the engine opened. */
  forged: number;
  /** Events from this relay held in quarantine. */
  quarantined: number;
  /** Quarantined events dropped over the per-relay cap of 1000 (the newest are kept). */
  quarantineDropped: number;
  /** The relay's live channel: whether other devices' writes arrive at once, or why not. */
  live: LiveInfo;
}

/**
 * A relay's live channel: `live` (a wait is open; changes arrive at once), `connecting`,
 * `polling` (the relay offers no live notices, or does not know this owner yet), `reconnecting`
 * (the last wait failed; polled meanwhile), `off` (`autoSync` or `live` is off, or the engine
 * closed).
 */
export type LiveState = 'off' | 'connecting' | 'live' | 'polling' | 'reconnecting';

/** A relay's live channel in its status. */
export interface LiveInfo {
  state: LiveState;
  /** Why it is not `live`. */
  reason: string | null;
  /** When the next wait is tried (ms since the epoch). */
  retryAt: number | null;
}

/** Where a pull's time went, in ms. */
export interface PullTimings {
  /** Waiting for the relay (request and transfer). */
  httpMs: number;
  /** Parsing pages' JSON. */
  parseMs: number;
  /**
   * Decrypting, authenticating and validating events: an estimate, one event in eight timed
   * (from each page's first) and their mean counted for every event of the page, so the clock
   * is not read twice per event.
   */
  decryptMs: number;
  /** Writing rows, seen markers and cursors to SQLite (a page's time less its `decryptMs`). */
  applyMs: number;
  /**
   * Events the engine's opener worker fetched and decrypted while the page before them
   * applied, whose checks used its opening (applied, stale or deferred; their wait is in
   * `httpMs`); 0 without the worker (memory storage, no IndexedDB key custody, no nested
   * workers) and while it starts.
   */
  openedAhead: number;
}

/** What one sync pass did with one relay. */
export interface RelayPassReport {
  url: string;
  skipped: string | null;
  pushed: number;
  received: number;
  applied: number;
  deferred: number;
  quarantined: number;
  /**
   * This device's own events it sent back unchanged (counted in `received`): a device pulls
   * what it pushed, and a copy whose every field is as it was sealed is not opened again. One
   * that differs is opened like any other event (and quarantined when it fails).
   */
  ownEchoes: number;
  reseeded: string | null;
  /** Events and chunks it refused on their own in this pass (set aside). */
  setAside: number;
  /** Pushed events it answered as forged duplicates. */
  forged: number;
  error: RelayErrorInfo | null;
  timings: PullTimings;
}

/** What one sync pass did. */
export interface SyncReport {
  sealed: number;
  deferredApplied: number;
  relays: RelayPassReport[];
}

/** A deferred or quarantined event. */
export interface HeldEvent {
  eventId: string;
  relay: string;
  /** e.g. `FUTURE_SCHEMA`, `UNKNOWN_TABLE`, `FUTURE_HLC`, `AUTH_FAILED`, `MALFORMED_PAYLOAD`. */
  reason: string;
  detail: string;
  at: number | null;
}

/**
 * Where the database lives: `opfs` (OPFS sync access handles), `idb` (IndexedDB: held in memory
 * and saved after each write; durable, except in a private window, whose IndexedDB lasts for the
 * session) or `memory` (not durable). `reason` says why a fallback was used (null on OPFS).
 */
export interface StorageInfo {
  mode: 'opfs' | 'idb' | 'memory';
  durable: boolean;
  reason: string | null;
  /**
   * The answer to `navigator.storage.persist()`, asked in the background when a durable engine
   * opens (never awaited): `granted` (the browser will not evict the data), `denied`,
   * `unanswered` (no answer within 3 s, e.g. a permission prompt), `unsupported`, `pending`
   * (asked, no answer yet) or `not-asked` (`persist: false`). Absent when the storage is not durable.
   */
  persisted?: 'granted' | 'denied' | 'unanswered' | 'unsupported' | 'pending' | 'not-asked';
}

/** How far {@link Engine.putBlob} is: bytes encrypted so far, of all; `stored` once committed. */
export interface BlobProgress {
  sealedBytes: number;
  totalBytes: number;
  stored: boolean;
}

/** One chunk of a blob as the manifest lists it. */
export interface BlobChunkRef {
  hash: string;
  size: number;
  plaintextSize: number;
}

/** A blob's manifest (synced as a row of table `blob`). */
export interface BlobManifest {
  version: number;
  ownerId: string;
  blobId: string;
  mimeType: string;
  byteSize: number;
  chunkSize: number;
  chunks: BlobChunkRef[];
  sha256: string;
  createdAt: string;
}

/** The encrypted envelope of an event. */
export interface SyncEnvelope {
  version: number;
  ownerId: string;
  eventId: string;
  deviceId: string;
  createdAt: string;
  streamId?: string;
  nonce: string;
  ciphertext: string;
}

/** An error with a stable `code` (see {@link ErrorCode}). */
export declare class SimplySyncError extends Error {
  readonly code: ErrorCode;
}

/**
 * A SimplySync engine.
 *
 * @example
 * ```ts
 * const engine = await createEngine({ secret, relays: ['https://relay.example'], schema });
 * await engine.insert('todos', { id: crypto.randomUUID(), title: 'Milk', done: false });
 * const open = await engine.list('todos', { where: { done: false }, orderBy: 'title' });
 * ```
 */
export declare class Engine<S extends Schema = Schema> {
  /** The public, pseudonymous owner id. */
  readonly ownerId: string;
  /** This device's id. */
  readonly deviceId: string;
  /** `leader` if this tab runs the engine, `follower` if another tab does. */
  readonly role: 'leader' | 'follower' | 'starting';
  /** The error the engine closed with (its `code` says why: `OUTDATED`, `DELETED`, …), or null while open. */
  readonly closed: SimplySyncError | null;
  /**
   * Every relay's status as last known in this tab, without a request: what {@link onStatus}
   * last told (at first, what the engine had when it opened).
   */
  readonly status: RelayStatus[];
  /** Whether any relay has ever been read from on this device (its `lastSyncAt` is set). */
  readonly hasSynced: boolean;
  /**
   * Resolves once {@link hasSynced} is true — at once if it is; rejects with the close's error
   * if the engine closes first.
   * @example
   * ```ts
   * await engine.waitForFirstSync(); // a restored device shows its data, not an empty list
   * ```
   */
  waitForFirstSync(): Promise<void>;

  /**
   * Logs out on this device: closes the engine and deletes its database, its files and the
   * stored secret. Every tab of the database sees its engine closed (`CLOSED`). Data not yet
   * synced is lost — sync first, or pass `requireSynced: true`: then it rejects with
   * `NOT_SYNCED` (and deletes nothing) while a change has not reached every relay, or there is
   * no relay.
   * @example
   * ```ts
   * await engine.sync();
   * await engine.resetLocalData({ requireSynced: true });
   * ```
   */
  resetLocalData(options?: { requireSynced?: boolean }): Promise<void>;
  /**
   * Calls `callback(error)` once when the engine closes (by {@link Engine.close}, by
   * {@link Engine.resetLocalData} in any tab, or for good after a failure); returns an unsubscribe function.
   * @example
   * ```ts
   * engine.onClose((e) => showLogin(e.message));
   * ```
   */
  onClose(callback: (error: SimplySyncError) => void): () => void;
  /**
   * Revokes a URL made by {@link Engine.getBlobUrl} (frees its memory); returns whether it was one.
   * {@link Engine.close} revokes the ones left.
   * @example
   * ```ts
   * img.onload = () => engine.revokeBlobUrl(img.src);
   * ```
   */
  revokeBlobUrl(url: string): boolean;

  /**
   * Creates a row (or revives a soft-deleted id).
   * @example
   * ```ts
   * await engine.insert('todos', { id: 't1', title: 'Milk' });
   * ```
   */
  insert<T extends TableName<S>>(table: T, row: InsertOf<S, T>): Promise<RowOf<S, T>>;
  /**
   * Changes the given columns of a live row; the whole new row syncs.
   * @example
   * ```ts
   * await engine.update('todos', 't1', { done: true });
   * ```
   */
  update<T extends TableName<S>>(table: T, id: string, patch: PatchOf<S, T>): Promise<RowOf<S, T>>;
  /**
   * Writes the whole row (absent columns become null), creating it if needed.
   * @example
   * ```ts
   * await engine.upsert('todos', { id: 't1', title: 'Oat milk', done: false });
   * ```
   */
  upsert<T extends TableName<S>>(table: T, row: InsertOf<S, T>): Promise<RowOf<S, T>>;
  /**
   * Soft-deletes a live row (values kept until purged).
   * @example
   * ```ts
   * await engine.delete('todos', 't1');
   * ```
   */
  delete<T extends TableName<S>>(table: T, id: string): Promise<RowOf<S, T>>;
  /**
   * Applies operations atomically: all or none.
   * @example
   * ```ts
   * await engine.transaction([
   *   { op: 'insert', table: 'todos', row: { id: 'a', title: 'A' } },
   *   { op: 'delete', table: 'todos', id: 'b' },
   * ]);
   * ```
   */
  transaction(ops: OperationOf<S>[]): Promise<RowOf<S, TableName<S>>[]>;
  /**
   * A live row, or `null`.
   * @example
   * ```ts
   * const todo = await engine.get('todos', 't1');
   * ```
   */
  get<T extends TableName<S>>(table: T, id: string): Promise<RowOf<S, T> | null>;
  /**
   * Rows of a table.
   * @example
   * ```ts
   * const rows = await engine.list('todos', { where: { done: false }, orderBy: 'title desc', limit: 50 });
   * ```
   */
  list<T extends TableName<S>>(table: T, options?: ListOptionsOf<S, T>): Promise<RowOf<S, T>[]>;
  /**
   * One read-only SQL statement — a `SELECT`, `WITH` or `VALUES`, or a `PRAGMA` without an
   * argument, with a `;` at most at its end; each row is an object keyed by column name.
   * Anything else rejects with `INVALID_QUERY`, and so does a read that would write underneath
   * (`SELECT * FROM pragma_optimize`, which runs ANALYZE) or that names the engine's own tables
   * (`_sync_*`), SQLite's (`sqlite_*`) or a pragma other than `table_info`, `table_xinfo`,
   * `index_list`, `index_info`, `index_xinfo`, `foreign_key_list`, `integrity_check`,
   * `quick_check`, `user_version`, `data_version`, `page_count` and `page_size`.
   * A result column that is a `boolean` or `json` column of the schema comes as {@link list}
   * gives it (a boolean, the parsed value); `{ raw: true }` gives SQLite's values (0 or 1, the
   * JSON text). Expressions come as SQLite computes them.
   * @example
   * ```ts
   * const [{ n }] = await engine.query('SELECT count(*) AS n FROM todos WHERE deleted = 0');
   * ```
   */
  query<R extends object = { [column: string]: JsonValue }>(sql: string, params?: JsonValue[], options?: { raw?: boolean }): Promise<R[]>;
  /**
   * Calls `callback` after each committed batch touching `tables` (all tables when null).
   * Returns a function that unsubscribes.
   * @example
   * ```ts
   * const stop = engine.subscribe(['todos'], (e) => render());
   * ```
   */
  subscribe(tables: TableName<S>[] | TableName<S> | null, callback: (event: ChangeEvent) => void): () => void;
  /**
   * A live query over {@link Engine.list}: calls `callback` at once with the rows, and again with
   * the new rows whenever a committed local batch or an applied remote page touches `table` and
   * the rows differ from the last ones delivered. Runs are coalesced (one at a time; changes
   * meanwhile cause one more run). Works in every tab. Errors go to `onError` (without it they
   * are thrown as uncaught errors); an invalid table, column or option ends the live query.
   * @example
   * ```ts
   * const stop = engine.watch('todos', { where: { done: false }, orderBy: 'title' }, (rows) => render(rows));
   * stop(); // when the view goes away
   * ```
   */
  watch<T extends TableName<S>>(
    table: T,
    options: ListOptionsOf<S, T> | undefined,
    callback: (rows: RowOf<S, T>[]) => void,
    onError?: (error: SimplySyncError) => void,
  ): LiveQuery;
  watch<T extends TableName<S>>(table: T, callback: (rows: RowOf<S, T>[]) => void, onError?: (error: SimplySyncError) => void): LiveQuery;
  /**
   * A live query over read-only SQL ({@link Engine.query}): re-runs when a change touches a table
   * the statement reads (SQLite reports which: joins, subqueries and CTEs included), and calls
   * back when the result differs.
   * @example
   * ```ts
   * const stop = engine.watchQuery<{ open: number }>(
   *   'SELECT count(*) AS open FROM todos WHERE NOT done AND NOT deleted', [], ([r]) => showCount(r.open));
   * ```
   */
  watchQuery<R extends object = { [column: string]: JsonValue }>(
    sql: string,
    params: JsonValue[] | undefined,
    callback: (rows: R[]) => void,
    onError?: (error: SimplySyncError) => void,
  ): LiveQuery;
  /** {@link Engine.watchQuery} of a statement without parameters. */
  watchQuery<R extends object = { [column: string]: JsonValue }>(
    sql: string,
    callback: (rows: R[]) => void,
    onError?: (error: SimplySyncError) => void,
  ): LiveQuery;
  /**
   * Runs a full sync pass now (also with `autoSync: false`).
   * @example
   * ```ts
   * const report = await engine.sync();
   * ```
   */
  sync(): Promise<SyncReport>;
  /**
   * Every relay's status as this device knows it — no request, so it answers offline too. With
   * `refresh: true`, each relay's account (`/v1/status`) is asked first.
   * @example
   * ```ts
   * for (const s of await engine.getRelayStatuses({ refresh: true })) console.log(s.url, s.state, s.account?.usedPct);
   * ```
   */
  getRelayStatuses(options?: { refresh?: boolean }): Promise<RelayStatus[]>;
  /**
   * Calls `callback` whenever a relay's status changes. Returns an unsubscribe function.
   * @example
   * ```ts
   * engine.onStatus((statuses) => showBadge(statuses[0].state));
   * ```
   */
  onStatus(callback: (statuses: RelayStatus[]) => void): () => void;
  /**
   * Calls `callback` with pull progress (e.g. during a restore). The engine's first pass starts
   * while it opens: its events (progress, statuses, changes) are held until a task after
   * `createEngine` resolved, so listeners attached right after it hear them from the start.
   * @example
   * ```ts
   * engine.onProgress((p) => (bar.value = p.headSeq ? Number(p.cursor) / p.headSeq : 0));
   * ```
   */
  onProgress(callback: (progress: Progress) => void): () => void;
  /**
   * Adds a relay; it receives every current row on its first pass.
   * @example
   * ```ts
   * await engine.addRelay('https://backup-relay.example');
   * ```
   */
  addRelay(url: string): Promise<void>;
  /**
   * Gives (or with `null` drops) the registration token for the relay at `url` (one run with
   * `REGISTRATION=token`), then syncs. Kept in memory only, in the tab that runs the engine.
   * @example
   * ```ts
   * const { token } = await (await fetch('/api/sync-registration')).json();
   * await engine.setRegistrationToken('https://relay.example', token);
   * ```
   */
  setRegistrationToken(url: string, token: string | null): Promise<void>;
  /**
   * Removes a relay and what this device knew about it.
   * @example
   * ```ts
   * await engine.removeRelay('https://backup-relay.example');
   * ```
   */
  removeRelay(url: string): Promise<void>;
  /**
   * Hard-deletes every soft-deleted row, here and (on the next syncs) on every relay.
   * @example
   * ```ts
   * const purged = await engine.purgeDeleted();
   * ```
   */
  purgeDeleted(): Promise<number>;
  /**
   * Hard-deletes the given rows, here and on every relay.
   * @example
   * ```ts
   * await engine.purgeRows('todos', ['t1', 't2']);
   * ```
   */
  purgeRows(table: TableName<S>, ids: string[]): Promise<number>;
  /**
   * Stores bytes as an encrypted blob (works offline; uploads on sync). Returns its manifest.
   * A `Blob`'s bytes move to the worker (not copied); the deadline grows 2 s per MiB; the same
   * bytes, type and chunk size put again within a day — a retry after `TIMEOUT` — return the
   * blob stored the first time. `onProgress` is told as each chunk is sealed, then once with
   * `stored: true`.
   * @example
   * ```ts
   * const { blobId } = await engine.putBlob(file, { onProgress: (p) => (bar.value = p.sealedBytes / p.totalBytes) });
   * await engine.update('todos', 't1', { image: blobId });
   * ```
   */
  putBlob(
    data: Uint8Array | ArrayBuffer | Blob,
    options?: { mimeType?: string; chunkSize?: number; onProgress?: (progress: BlobProgress) => void },
  ): Promise<BlobManifest>;
  /**
   * A blob's bytes (verified, decrypted, cached).
   * @example
   * ```ts
   * const bytes = await engine.getBlob(blobId);
   * ```
   */
  getBlob(blobId: string): Promise<Uint8Array>;
  /**
   * One chunk's bytes (only that chunk is fetched).
   * @example
   * ```ts
   * const first = await engine.getBlobChunk(blobId, 0);
   * ```
   */
  getBlobChunk(blobId: string, index: number): Promise<Uint8Array>;
  /**
   * A blob's manifest.
   * @example
   * ```ts
   * const { mimeType, byteSize } = await engine.getBlobManifest(blobId);
   * ```
   */
  getBlobManifest(blobId: string): Promise<BlobManifest>;
  /**
   * An object URL for a blob; revoke it with {@link Engine.revokeBlobUrl} when the image no longer
   * needs it (close() revokes the rest).
   * @example
   * ```ts
   * img.src = await engine.getBlobUrl(todo.image as string);
   * ```
   */
  getBlobUrl(blobId: string): Promise<string>;
  /**
   * The recovery phrase (or key), to show to its owner. Answered only in the tab that runs the
   * engine (`LEADER_ONLY` in another tab): the secret never crosses tabs.
   * @example
   * ```ts
   * alert(await engine.showRecoveryPhrase());
   * ```
   */
  showRecoveryPhrase(): Promise<string>;
  /**
   * Moves all data to a new secret and pushes it (for a leaked phrase); the engine stores the
   * new secret at once, so a takeover or a restart continues with it. Leader tab only. The old owner stays
   * open until {@link Engine.confirmRekey}: store the new secret first, then confirm. Until
   * then, reopening with the old secret undoes the re-key; reopening with the new one confirms it.
   * @example
   * ```ts
   * const fresh = await createMnemonic();
   * await engine.rekey(fresh);
   * await saveSecretSomewhereSafe(fresh);
   * await engine.confirmRekey(); // the old phrase now gets 410 everywhere
   * ```
   */
  rekey(newSecret: string): Promise<SyncReport>;
  /**
   * Finishes a re-key: closes the old owner on every relay (a relay that is down gets it later).
   * Fails with `NO_PENDING_REKEY` when no re-key waits.
   * @example
   * ```ts
   * await engine.confirmRekey();
   * ```
   */
  confirmRekey(): Promise<SyncReport>;
  /**
   * The owner id a re-key moved to while it waits for {@link Engine.confirmRekey}, else `null`.
   * @example
   * ```ts
   * if (await engine.pendingRekey()) await engine.confirmRekey();
   * ```
   */
  pendingRekey(): Promise<string | null>;
  /**
   * Puts everything relays refused on their own (see {@link RelayStatus.setAside}) back in line
   * for the next pass; returns how many items.
   * @example
   * ```ts
   * await engine.retrySetAside();
   * ```
   */
  retrySetAside(): Promise<number>;
  /**
   * Re-processes quarantined events; returns how many were released.
   * @example
   * ```ts
   * await engine.retryQuarantined();
   * ```
   */
  retryQuarantined(): Promise<number>;
  /**
   * Events that failed authentication or validation, kept for inspection.
   * @example
   * ```ts
   * console.table(await engine.quarantined());
   * ```
   */
  quarantined(): Promise<HeldEvent[]>;
  /**
   * Events waiting for a newer schema or for local time to catch up.
   * @example
   * ```ts
   * console.table(await engine.deferred());
   * ```
   */
  deferred(): Promise<HeldEvent[]>;
  /**
   * Where the database lives and whether it is durable.
   * @example
   * ```ts
   * const { mode, durable, reason } = await engine.storage();
   * if (!durable) warn(reason);
   * ```
   */
  storage(): Promise<StorageInfo>;
  /**
   * Closes this tab's handle (the leader tab also stops the worker and hands over).
   * @example
   * ```ts
   * await engine.close();
   * ```
   */
  close(): Promise<void>;
}

/**
 * Opens the engine — or joins it, when another tab of the app already runs it. The engine
 * keeps the secret itself: pass `secret` once (a new phrase the user wrote down, or one typed
 * to restore); later opens leave it out.
 * @example
 * ```ts
 * const options = { relays: ['http://127.0.0.1:8787'], schema, dbName: 'todos.db' };
 * const engine = (await hasStoredSecret('todos.db'))
 *   ? await createEngine(options) // welcome back
 *   : await createEngine({ ...options, secret: await askUserToWriteDown(await createMnemonic()) });
 * ```
 */
export declare function createEngine<const S extends Schema = Schema>(options: EngineOptions<S>): Promise<Engine<S>>;

/**
 * Whether this browser keeps the secret of database `dbName` (default `simplysync.db`), so that
 * {@link createEngine} without `secret` reopens it — "welcome back" rather than "create or
 * restore".
 * @example
 * ```ts
 * if (await hasStoredSecret('todos.db')) showApp(); else showOnboarding();
 * ```
 */
export declare function hasStoredSecret(dbName?: string): Promise<boolean>;

/**
 * Deletes database `dbName` from this browser — its files and its stored key — without opening
 * it: for a database whose key or phrase is lost (`SECRET_LOST`, `OWNER_MISMATCH`), or to log
 * out where no engine is open. Tabs that have it open close first, with `DELETED`; one that
 * does not let go within `timeoutMs` (30000) makes it reject with `TIMEOUT`, nothing deleted.
 * Changes not yet synced are lost.
 * @example
 * ```ts
 * await deleteDatabase('todos.db');
 * ```
 */
export declare function deleteDatabase(dbName: string, options?: { timeoutMs?: number }): Promise<void>;

/**
 * Mints a new 12-word recovery phrase.
 * @example
 * ```ts
 * const phrase = await createMnemonic();
 * ```
 */
export declare function createMnemonic(): Promise<string>;

/**
 * Mints a new `sf1_` recovery key (for CLIs, CI and fixtures).
 * @example
 * ```ts
 * const key = await createRecoveryKey();
 * ```
 */
export declare function createRecoveryKey(): Promise<string>;

/** The result of {@link validateSecret}. */
export type SecretCheck =
  | { ok: true; kind: 'mnemonic' | 'sf1' }
  | { ok: false; code: 'SECRET_EMPTY' | 'SECRET_WORD_COUNT' | 'SECRET_UNKNOWN_WORD' | 'SECRET_CHECKSUM' | 'SECRET_INVALID_KEY' | 'SECRET_INVALID_PHRASE'; message: string };

/**
 * Checks a secret without throwing; the message says which word or rule is wrong.
 * @example
 * ```ts
 * const check = await validateSecret(input.value);
 * if (!check.ok) showError(check.message);
 * ```
 */
export declare function validateSecret(secret: string): Promise<SecretCheck>;

/** An identity handle: key material stays inside the wasm module. */
export declare class Identity {
  readonly ownerId: string;
  streamId(table: string, rowId: string): string;
  free(): void;
}

/**
 * Derives an identity (advanced use).
 * @example
 * ```ts
 * const id = await deriveIdentity(phrase);
 * console.log(id.ownerId);
 * ```
 */
export declare function deriveIdentity(secret: string): Promise<Identity>;

/**
 * Seals a payload into an envelope (advanced use).
 * @example
 * ```ts
 * const env = await encryptPayload(id, { eventId: 'e1', deviceId: 'd1' }, { hello: 'world' });
 * ```
 */
export declare function encryptPayload(
  identity: Identity,
  meta: { eventId: string; deviceId: string; createdAt?: string; streamId?: string },
  payload: JsonValue,
): Promise<SyncEnvelope>;

/**
 * Opens an envelope; rejects with code `CRYPTO` for a foreign owner or tampering.
 * @example
 * ```ts
 * const payload = await decryptEnvelope(id, env);
 * ```
 */
export declare function decryptEnvelope(identity: Identity, envelope: SyncEnvelope): Promise<JsonValue>;

/**
 * Seals bytes as a blob (advanced use).
 * @example
 * ```ts
 * const { manifest, chunks } = await encryptBlob(id, bytes, { mimeType: 'image/png' });
 * ```
 */
export declare function encryptBlob(
  identity: Identity,
  bytes: Uint8Array | ArrayBuffer,
  options?: { mimeType?: string; chunkSize?: number },
): Promise<{ manifest: BlobManifest; chunks: { hash: string; bytes: Uint8Array }[] }>;

/**
 * Verifies and decrypts a blob from its manifest and stored chunks, in order.
 * @example
 * ```ts
 * const bytes = await decryptBlob(id, manifest, chunks.map((c) => c.bytes));
 * ```
 */
export declare function decryptBlob(identity: Identity, manifest: BlobManifest, chunks: Uint8Array[]): Promise<Uint8Array>;
