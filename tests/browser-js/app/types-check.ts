// Compiled with `tsc --noEmit --strict` against the installed package: the declarations must
// type every call an app makes, with no `any` leaking into app code.
import {
  createEngine, createMnemonic, createRecoveryKey, decryptBlob, decryptEnvelope, deriveIdentity, encryptBlob,
  encryptPayload, hasStoredSecret, validateSecret, deleteDatabase, SimplySyncError,
  type ChangeEvent, type Engine, type ErrorCode, type Progress, type RelayStatus, type Row, type Schema, type StorageInfo,
  type SyncReport,
} from 'simplysync';

const schema: Schema = { tables: [{ name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }] }] };

export async function app(): Promise<void> {
  const secret: string = await createMnemonic();
  const key: string = await createRecoveryKey();
  const check = await validateSecret(key);
  if (!check.ok) {
    const code: 'SECRET_EMPTY' | 'SECRET_WORD_COUNT' | 'SECRET_UNKNOWN_WORD' | 'SECRET_CHECKSUM' | 'SECRET_INVALID_KEY' | 'SECRET_INVALID_PHRASE' = check.code;
    console.log(code, check.message);
  }
  const stored: boolean = await hasStoredSecret('todos.db');
  if (stored) {
    const reopened: Engine = await createEngine({ relays: [], schema, dbName: 'todos.db' });
    await reopened.close();
  }
  const engine: Engine = await createEngine({ secret, relays: ['http://127.0.0.1:8787'], schema, autoSync: false, storage: 'idb', maxEventBytes: 262144, maxBlobBytes: 1048576, requestTimeoutMs: 30000, unresponsiveMs: 15000, persist: false });
  const row: Row = await engine.insert('todos', { id: 'a', title: 'milk', done: false });
  const updated: Row = await engine.update('todos', row.id, { done: true });
  await engine.upsert('todos', { id: 'b', title: null });
  await engine.delete('todos', 'b');
  const rows: Row[] = await engine.transaction([
    { op: 'insert', table: 'todos', row: { id: 'c', title: 'x' } },
    { op: 'update', table: 'todos', id: 'c', patch: { done: true } },
    { op: 'delete', table: 'todos', id: 'c' },
  ]);
  const one: Row | null = await engine.get('todos', 'a');
  const list: Row[] = await engine.list('todos', { where: { done: false }, orderBy: 'title desc', limit: 10, includeDeleted: false });
  const counted = await engine.query('SELECT count(*) AS n FROM todos', []);
  const stop: () => void = engine.subscribe(['todos'], (e: ChangeEvent) => console.log(e.source, e.rows.length));
  stop();
  engine.onStatus((s: RelayStatus[]) => console.log(s[0]?.state, s[0]?.account?.usedPct, s[0]?.error?.terminal, s[0]?.setAside.events, s[0]?.forged, s[0]?.pushError?.status, s[0]?.pullError?.message));
  engine.onProgress((p: Progress) => console.log(p.eventsApplied, p.headSeq));
  const report: SyncReport = await engine.sync();
  console.log(report.relays.map((r) => r.pushed), updated.updatedAt, rows.length, one?.deleted, list.length, counted[0]?.n);
  const statuses: RelayStatus[] = await engine.getRelayStatuses();
  const refreshed: RelayStatus[] = await engine.getRelayStatuses({ refresh: true });
  const known: RelayStatus[] = engine.status;
  const synced: boolean = engine.hasSynced;
  await engine.waitForFirstSync();
  const raw = await engine.query('SELECT done FROM todos', [], { raw: true });
  console.log(refreshed.length, known.length, synced, raw.length);
  await engine.addRelay('http://127.0.0.1:9999');
  await engine.removeRelay('http://127.0.0.1:9999');
  const purged: number = (await engine.purgeDeleted()) + (await engine.purgeRows('todos', ['a']));
  const manifest = await engine.putBlob(new Uint8Array([1, 2, 3]), { mimeType: 'image/png' });
  const bytes: Uint8Array = await engine.getBlob(manifest.blobId);
  const chunk: Uint8Array = await engine.getBlobChunk(manifest.blobId, 0);
  const url: string = await engine.getBlobUrl(manifest.blobId);
  const phrase: string = await engine.showRecoveryPhrase();
  const storage = await engine.storage();
  const mode: 'opfs' | 'idb' | 'memory' = storage.mode;
  console.log(statuses.length, purged, bytes.length, chunk.length, url, phrase, mode, await engine.quarantined(), await engine.deferred());
  await engine.retryQuarantined();
  await engine.rekey(await createMnemonic());
  const waiting: string | null = await engine.pendingRekey();
  if (waiting) await engine.confirmRekey();
  const retried: number = await engine.retrySetAside();
  void retried;
  try {
    await engine.get('nope', 'x');
  } catch (e) {
    if (e instanceof SimplySyncError) {
      const code: ErrorCode = e.code;
      console.log(code === 'UNKNOWN_TABLE' || code === 'OUTDATED' || code === 'UNRESPONSIVE' || code === 'DELETED' || code === 'NOT_SYNCED');
    }
  }
  const info: StorageInfo = await engine.storage();
  console.log(info.persisted);
  engine.onClose((e: SimplySyncError) => console.log(e.code));
  const revoked: boolean = engine.revokeBlobUrl(url);
  console.log(revoked);
  await engine.resetLocalData({ requireSynced: true });
  await engine.close();
  await deleteDatabase('todos.db');
  const id = await deriveIdentity(secret);
  const env = await encryptPayload(id, { eventId: 'e', deviceId: 'd' }, { hello: 'world' });
  console.log(await decryptEnvelope(id, env), id.ownerId, id.streamId('todos', 'a'));
  const sealed = await encryptBlob(id, new Uint8Array([9]), { mimeType: 'text/plain' });
  const opened: Uint8Array = await decryptBlob(id, sealed.manifest, sealed.chunks.map((c) => c.bytes));
  console.log(opened.length);
  try {
    await engine.get('todos', 'a');
  } catch (e) {
    if (e instanceof SimplySyncError) console.log(e.code);
  }
}
