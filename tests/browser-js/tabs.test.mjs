// The packed package in real Chromium, about what users trust it with: the secret kept by the
// engine (sealed at rest, never in a follower tab), several tabs and several databases, calls
// that always settle, and restarts.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { buildApp, engineWorker, eventually, launch, openApp, pageErrors, RELAY, SCHEMA, serve } from './harness.mjs';

const STALLED = process.env.SIMPLYSYNC_TEST_STALLED;

let server;
let browser;

before(async () => {
  server = await serve(buildApp());
  browser = await launch();
});

after(async () => {
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
  await browser?.close();
  await server?.close();
});

/** Opens an engine in `page` as `window.engine`; resolves to what the page saw, error included. */
const open = (page, opts) =>
  page.evaluate(async (o) => {
    try {
      window.engine = await window.simplysync.createEngine(o);
      return { ownerId: window.engine.ownerId, role: window.engine.role, storage: await window.engine.storage() };
    } catch (e) {
      return { error: { code: e.code, message: e.message } };
    }
  }, opts);

const attempt = (page, fn, arg) =>
  page.evaluate(
    async ({ src, arg }) => {
      try {
        return { value: await (0, eval)(src)(window.engine, arg) };
      } catch (e) {
        return { error: { code: e.code, message: e.message } };
      }
    },
    { src: fn.toString(), arg },
  );

const phraseIn = (page) => page.evaluate(() => window.simplysync.createMnemonic());

/** The browser evicts database `dbName`'s custody key (the key that seals its secret). */
const evictCustodyKey = (page, dbName) =>
  page.evaluate(
    (name) =>
      new Promise((resolve, reject) => {
        const req = indexedDB.open('simplysync-custody', 1);
        req.onsuccess = () => {
          const tx = req.result.transaction('keys', 'readwrite');
          tx.objectStore('keys').delete(name);
          tx.oncomplete = () => resolve(req.result.close());
          tx.onerror = () => reject(tx.error);
        };
        req.onerror = () => reject(req.error);
      }),
    dbName,
  );

test('the engine keeps the secret, sealed with a non-extractable key: reopening needs no secret, another one changes nothing', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const phrase = await phraseIn(page);
  const base = { relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'custody.db' };
  assert.equal(await page.evaluate(() => window.simplysync.hasStoredSecret('custody.db')), false);
  const none = await open(page, base);
  assert.equal(none.error.code, 'NO_SECRET', 'nothing stored yet: the app must give a secret');
  const first = await open(page, { ...base, secret: phrase });
  assert.equal(first.storage.mode, 'opfs');
  assert.ok(['granted', 'denied', 'unanswered', 'unsupported', 'pending'].includes(first.storage.persisted), first.storage.persisted);
  await attempt(page, (e) => e.insert('todos', { id: 'a', title: 'kept' }));
  // App SQL cannot read the engine's tables (the sealed secret among them) nor SQLite's.
  for (const sql of ["SELECT value FROM _sync_meta WHERE key = 'wrapped_secret'", 'SELECT * FROM sqlite_master', 'PRAGMA table_list']) {
    const refused = await attempt(page, (e, q) => e.query(q), sql);
    assert.equal(refused.error?.code, 'INVALID_QUERY', sql);
  }
  await attempt(page, (e) => e.close());
  // The database's files on disk hold the secret only sealed: not the phrase, in any encoding.
  const files = await page.evaluate(async (words) => {
    const dir = await (await (await navigator.storage.getDirectory()).getDirectoryHandle('simplysync')).getDirectoryHandle('custody.db');
    let bytes = 0;
    let found = false;
    const scan = async (d) => {
      for await (const handle of d.values()) {
        if (handle.kind === 'directory') {
          await scan(handle);
          continue;
        }
        const text = new TextDecoder('latin1').decode(await (await handle.getFile()).arrayBuffer());
        bytes += text.length;
        found ||= text.includes(words) || text.includes(JSON.stringify(words));
      }
    };
    await scan(dir);
    return { bytes, found };
  }, phrase);
  assert.ok(files.bytes > 0 && !files.found, `the phrase is not in the ${files.bytes} bytes of the database's files`);
  assert.equal(await page.evaluate(() => window.simplysync.hasStoredSecret('custody.db')), true);

  // The sealing key is a non-extractable CryptoKey in IndexedDB, and nothing is in localStorage.
  const key = await page.evaluate(async () => {
    const db = await new Promise((r) => { const o = indexedDB.open('simplysync-custody'); o.onsuccess = () => r(o.result); });
    const record = await new Promise((r) => { const q = db.transaction('keys').objectStore('keys').get('custody.db'); q.onsuccess = () => r(q.result); });
    let exported = true;
    await crypto.subtle.exportKey('raw', record.key).catch(() => (exported = false));
    return { extractable: record.key.extractable, exported, localStorage: localStorage.length };
  });
  assert.deepEqual(key, { extractable: false, exported: false, localStorage: 0 });

  const again = await open(page, base);
  assert.equal(again.ownerId, first.ownerId, 'reopened without a secret');
  assert.deepEqual((await attempt(page, (e) => e.list('todos'))).value.map((r) => r.title), ['kept']);
  assert.equal((await attempt(page, (e) => e.showRecoveryPhrase())).value, phrase);
  await attempt(page, (e) => e.close());

  const other = await open(page, { ...base, secret: await phraseIn(page) });
  assert.equal(other.error.code, 'OWNER_MISMATCH');
  const still = await open(page, base);
  assert.equal(still.ownerId, first.ownerId, 'the wrong secret changed nothing');

  // Log out on this device: the database and the secret are gone.
  await attempt(page, (e) => e.resetLocalData());
  assert.equal(await page.evaluate(() => window.simplysync.hasStoredSecret('custody.db')), false);
  const fresh = await open(page, { ...base, secret: await phraseIn(page) });
  assert.notEqual(fresh.ownerId, first.ownerId);
  assert.deepEqual((await attempt(page, (e) => e.list('todos'))).value, [], 'a fresh, empty database');
  await context.close();
});

test('two tabs with different databases work at once', async () => {
  const context = await browser.newContext();
  const [a, b] = [await openApp(context, server.url), await openApp(context, server.url)];
  const phrase = await phraseIn(a);
  const ia = await open(a, { secret: phrase, relays: [], schema: SCHEMA, autoSync: false, dbName: 'one.db', openTimeoutMs: 8000 });
  const ib = await open(b, { secret: phrase, relays: [], schema: SCHEMA, autoSync: false, dbName: 'two.db', openTimeoutMs: 8000 });
  assert.deepEqual([ia.role, ia.storage.mode, ib.role, ib.storage.mode], ['leader', 'opfs', 'leader', 'opfs']);
  await attempt(a, (e) => e.insert('todos', { id: 'x', title: 'in one' }));
  await attempt(b, (e) => e.insert('todos', { id: 'y', title: 'in two' }));
  assert.deepEqual((await attempt(a, (e) => e.list('todos'))).value.map((r) => r.id), ['x']);
  assert.deepEqual((await attempt(b, (e) => e.list('todos'))).value.map((r) => r.id), ['y']);
  await context.close();
});

test('followers never see the secret: LEADER_ONLY, and results go to the asking tab only', async () => {
  const context = await browser.newContext();
  const [leader, follower, spy] = [await openApp(context, server.url), await openApp(context, server.url), await openApp(context, server.url)];
  const phrase = await phraseIn(leader);
  const opts = { relays: [], schema: SCHEMA, autoSync: false, dbName: 'secret-tabs.db' };
  await open(leader, { ...opts, secret: phrase });
  // A third tab listens on the database's shared channel: it must never hear a call or a result.
  await spy.evaluate(() => {
    window.heard = [];
    new BroadcastChannel('simplysync:secret-tabs.db').onmessage = (e) => window.heard.push(e.data);
  });
  const joined = await open(follower, opts);
  assert.equal(joined.role, 'follower', 'a follower joins without the secret');
  for (const call of [(e) => e.showRecoveryPhrase(), (e, p) => e.rekey(p), (e) => e.confirmRekey()]) {
    const r = await attempt(follower, call, await phraseIn(follower));
    assert.equal(r.error?.code, 'LEADER_ONLY', String(call));
  }
  await attempt(follower, (e) => e.insert('todos', { id: 'f', title: 'from the follower' }));
  const blob = await attempt(follower, async (e) => {
    const m = await e.putBlob(new Uint8Array([1, 2, 3]), { mimeType: 'text/plain' });
    return Array.from(await e.getBlob(m.blobId));
  });
  assert.deepEqual(blob.value, [1, 2, 3]);
  const leaks = await follower.evaluate((p) => JSON.stringify(window.engine).includes(p) || Object.keys(window.engine).length, phrase);
  assert.equal(leaks, 0, 'the engine object exposes no fields (the hub and the secret are private)');
  const heard = await spy.evaluate(() => window.heard.map((m) => m.type));
  assert.ok(!heard.includes('call') && !heard.includes('result'), `broadcast: ${heard}`);
  assert.ok(!JSON.stringify(await spy.evaluate(() => window.heard)).includes(phrase));

  // Log out from the follower: the database goes, and every tab's engine closes.
  const closedSeen = follower.evaluate(() => new Promise((resolve) => window.engine.onClose((e) => resolve(e.code))));
  await attempt(follower, (e) => e.resetLocalData());
  assert.equal(await closedSeen, 'CLOSED');
  assert.equal((await attempt(leader, (e) => e.list('todos'))).error.code, 'CLOSED', 'the leader tab sees CLOSED too');
  assert.equal(await leader.evaluate(() => window.simplysync.hasStoredSecret('secret-tabs.db')), false);
  await context.close();
});

test('a tab with a newer schema takes over: older tabs close with OUTDATED and stay out while it runs; relays added at run time survive', async () => {
  const context = await browser.newContext();
  const [t1, t2, t3] = [await openApp(context, server.url), await openApp(context, server.url), await openApp(context, server.url)];
  const phrase = await phraseIn(t1);
  const opts = { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'schema-tabs.db' };
  await open(t1, opts);
  assert.equal((await open(t3, opts)).role, 'follower');
  await attempt(t1, (e) => e.insert('todos', { id: 'old', title: 'written by the old app' }));
  await attempt(t1, (e) => e.addRelay('http://127.0.0.1:9'));
  const closes = [t1, t3].map((t) => t.evaluate(() => new Promise((resolve) => window.engine.onClose((e) => resolve(e.code)))));
  // The app is deployed again: a new tab opens with schema version 2.
  const newer = { schemaVersion: 2, tables: [...SCHEMA.tables, { name: 'notes', columns: [{ name: 'body', type: 'text' }] }] };
  const upgraded = await open(t2, { ...opts, schema: newer });
  assert.equal(upgraded.role, 'leader', JSON.stringify(upgraded));
  assert.deepEqual(await Promise.all(closes), ['OUTDATED', 'OUTDATED'], 'the older tabs close with a code of their own');
  assert.equal((await attempt(t1, (e) => e.insert('todos', { id: 'late', title: 'x' }))).error.code, 'CLOSED', 'and never write again');
  const after = await attempt(t2, async (e) => {
    await e.insert('notes', { id: 'n', body: 'the new table' });
    return { todos: (await e.list('todos')).map((r) => r.id), notes: (await e.list('notes')).length, urls: (await e.getRelayStatuses()).map((s) => s.url) };
  });
  assert.deepEqual(after.value, { todos: ['old'], notes: 1, urls: [RELAY, 'http://127.0.0.1:9'] });
  // An old tab opening while the newer one runs is refused; so is another schema of the same version.
  const t4 = await openApp(context, server.url);
  assert.equal((await open(t4, opts)).error?.code, 'OUTDATED');
  const sameVersion = { schemaVersion: 2, tables: [...SCHEMA.tables, { name: 'other', columns: [{ name: 'x', type: 'text' }] }] };
  assert.equal((await open(t4, { ...opts, schema: sameVersion })).error?.code, 'SCHEMA_MISMATCH');
  // Once no newer tab runs, the old app opens again (a deploy rolled back loses nothing).
  await t2.close();
  const rolledBack = await open(t4, opts);
  assert.equal(rolledBack.role, 'leader', JSON.stringify(rolledBack));
  assert.deepEqual((await attempt(t4, async (e) => (await e.list('todos')).map((r) => r.id))).value, ['old']);
  await context.close();
});

test('after a re-key, a takeover opens with the new owner and nothing hangs', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const [old, fresh] = [await phraseIn(t1), await phraseIn(t1)];
  const opts = { relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'rekey-tabs.db' };
  await open(t1, { ...opts, secret: old });
  const follower = await open(t2, opts);
  await attempt(t1, (e) => e.insert('todos', { id: 'r', title: 'moves along' }));
  const moved = await attempt(t1, async (e, p) => {
    await e.rekey(p);
    return e.ownerId;
  }, fresh);
  assert.notEqual(moved.value, follower.ownerId);
  await eventually(() => t2.evaluate((o) => window.engine.ownerId === o, moved.value), 5000, 'the follower hears the new owner');
  await t1.close();
  await eventually(() => t2.evaluate(() => window.engine.role === 'leader'), 10000, 'the takeover');
  const after = await attempt(t2, async (e) => ({ owner: e.ownerId, rows: (await e.list('todos')).length, pending: await e.pendingRekey() }));
  assert.deepEqual(after.value, { owner: moved.value, rows: 1, pending: null }, 'the takeover confirmed the re-key');
  await context.close();
});

test('every call settles: deadlines, close during a call, and a worker that dies is restarted', async () => {
  assert.ok(STALLED, 'scripts/test.sh names a stalled listener in SIMPLYSYNC_TEST_STALLED');
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const phrase = await phraseIn(page);
  await open(page, { secret: phrase, relays: [STALLED], schema: SCHEMA, autoSync: false, dbName: 'settle.db', requestTimeoutMs: 20000, longCallTimeoutMs: 700 });
  const timedOut = await attempt(page, (e) => e.sync());
  assert.equal(timedOut.error.code, 'TIMEOUT');
  const closing = await page.evaluate(async () => {
    const pending = window.engine.sync().then(() => 'resolved', (e) => e.code);
    await window.engine.close();
    return pending;
  });
  assert.equal(closing, 'CLOSED');
  assert.equal((await attempt(page, (e) => e.list('todos'))).error.code, 'CLOSED');

  await open(page, { relays: [STALLED], schema: SCHEMA, autoSync: false, dbName: 'settle.db', requestTimeoutMs: 20000 });
  await attempt(page, (e) => e.insert('todos', { id: 'before', title: 'x' }));
  const worker = await engineWorker(page);
  assert.ok(worker, 'the engine worker');
  // A call in flight when the worker dies rejects with WORKER; the worker is restarted.
  const inFlight = page.evaluate(() => window.engine.sync().then(() => 'resolved', (e) => e.code));
  await new Promise((r) => setTimeout(r, 300));
  await worker.evaluate(() => setTimeout(() => { throw new Error('the worker dies (injected)'); }));
  assert.equal(await inFlight, 'WORKER');
  // A call made while the worker restarts waits for the fresh one: never CLOSED nor WORKER.
  const inWindow = await attempt(page, (e) => e.list('todos'));
  assert.equal(inWindow.value?.length, 1, JSON.stringify(inWindow));
  await attempt(page, (e) => e.insert('todos', { id: 'after', title: 'y' }));
  assert.deepEqual((await attempt(page, (e) => e.list('todos'))).value.map((r) => r.id), ['after', 'before']);
  await context.close();
});

test('a hidden page polls less than a visible one', async () => {
  const context = await browser.newContext();
  const [hidden, witness] = [await openApp(context, server.url), await openApp(context, server.url)];
  const count = (page) =>
    page.evaluate(() => {
      window.passes = 0;
      window.engine.onStatus(() => window.passes++);
    });
  const opts = { relays: [RELAY], schema: SCHEMA, syncIntervalMs: 200, live: false };
  await open(hidden, { ...opts, secret: await phraseIn(hidden), dbName: 'hidden.db' });
  await hidden.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await open(witness, { ...opts, secret: await phraseIn(witness), dbName: 'visible.db' });
  await count(hidden);
  await count(witness);
  // Wait on the visible engine's own polls (about five passes), then compare.
  await eventually(() => witness.evaluate(() => window.passes >= 15), 10000, 'the visible engine polls');
  const [h, w] = [await hidden.evaluate(() => window.passes), await witness.evaluate(() => window.passes)];
  assert.ok(h * 2 <= w, `hidden ${h} status events vs visible ${w}`);
  await context.close();
});

test('a tab that cannot take over for good closes with the reason instead of waiting', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { relays: [], schema: SCHEMA, autoSync: false, dbName: 'lost-key.db' };
  await open(t1, { ...opts, secret: await phraseIn(t1) });
  assert.equal((await open(t2, opts)).role, 'follower', 'the follower has no secret of its own');
  const closed = t2.evaluate(() => new Promise((resolve) => window.engine.onClose((e) => resolve(e.code))));
  // The browser evicts the custody key; then the running tab closes.
  await evictCustodyKey(t2, 'lost-key.db');
  await t1.close();
  assert.equal(await closed, 'SECRET_LOST', 'the app hears why (onClose)');
  const started = Date.now();
  assert.equal((await attempt(t2, (e) => e.list('todos'))).error.code, 'CLOSED');
  assert.ok(Date.now() - started < 5000, 'calls fail at once instead of waiting for a leader');
  await context.close();
});

test('an engine that does not open in time never starts later behind the app', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const phrase = await phraseIn(page);
  const opts = { secret: phrase, relays: [], schema: SCHEMA, autoSync: false, dbName: 'late.db' };
  const late = await open(page, { ...opts, openTimeoutMs: 1 });
  assert.equal(late.error.code, 'TIMEOUT');
  // Nothing holds or waits for the database's lock, and no engine worker is left running.
  await eventually(
    () => page.evaluate(async () => {
      const q = await navigator.locks.query();
      return [...q.held, ...q.pending].every((l) => l.name !== 'simplysync:late.db');
    }),
    5000,
    'the lock is free',
  );
  await eventually(async () => !(await engineWorker(page)), 5000, 'no engine worker left');
  const again = await open(page, { ...opts, openTimeoutMs: 20000 });
  assert.deepEqual([again.role, again.storage.mode], ['leader', 'opfs'], 'the database opens normally');
  await context.close();
});

test('calls a closing leader ran but never answered are re-sent to the next leader and apply once', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { relays: [], schema: SCHEMA, autoSync: false, dbName: 'resend.db' };
  await open(t1, { ...opts, secret: await phraseIn(t1) });
  assert.equal((await open(t2, opts)).role, 'follower');
  // The leader runs every call but its answers are lost on the way back.
  await t1.evaluate(() => {
    const post = BroadcastChannel.prototype.postMessage;
    BroadcastChannel.prototype.postMessage = function (m) {
      if (m?.type !== 'result') post.call(this, m);
    };
  });
  const outcome = t2.evaluate(async () => {
    const writes = [];
    for (let i = 0; i < 20; i++) writes.push(window.engine.insert('todos', { id: `w${i}`, title: 'x' }));
    writes.push(window.engine.putBlob(new Uint8Array([7, 7, 7]), { mimeType: 'text/plain' }));
    return (await Promise.allSettled(writes)).map((r) => r.status);
  });
  await eventually(() => t1.evaluate(async () => (await window.engine.list('todos')).length === 20), 10000, 'the leader ran them');
  await t1.evaluate(() => window.engine.close());
  assert.deepEqual(await outcome, Array(21).fill('fulfilled'), 'every call was answered by the next leader');
  assert.equal(await t2.evaluate(() => window.engine.role), 'leader');
  const counts = await t2.evaluate(async () => {
    const [rows] = await window.engine.query('SELECT count(*) AS n FROM todos');
    const [blobs] = await window.engine.query('SELECT count(*) AS n FROM blob');
    return [rows.n, blobs.n];
  });
  assert.deepEqual(counts, [20, 1], 'each write applied once, not again when re-sent');
  await context.close();
});

test('a hidden leader polls at full rate while a follower is visible, and slows once that tab closes', async () => {
  const context = await browser.newContext();
  const [leader, follower] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { relays: [RELAY], schema: SCHEMA, syncIntervalMs: 200, dbName: 'visible-follower.db' };
  await open(leader, { ...opts, secret: await phraseIn(leader) });
  await leader.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  assert.equal((await open(follower, opts)).role, 'follower');
  const passesIn = (ms) =>
    leader.evaluate(async (ms) => {
      let n = 0;
      const off = window.engine.onStatus(() => n++);
      await new Promise((r) => setTimeout(r, ms));
      off();
      return n;
    }, ms);
  const whileVisible = await passesIn(2400);
  await follower.close(); // pagehide: the tab says goodbye
  await new Promise((r) => setTimeout(r, 400));
  const afterClose = await passesIn(2400);
  assert.ok(whileVisible >= 2 * Math.max(1, afterClose), `with a visible follower ${whileVisible} status events, after it closed ${afterClose}`);
  await context.close();
});

test('a follower given another owner\'s secret gets OWNER_MISMATCH and leaves the running tab alone', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { relays: [], schema: SCHEMA, autoSync: false, dbName: 'mismatch-tabs.db' };
  await open(t1, { ...opts, secret: await phraseIn(t1) });
  const wrong = await open(t2, { ...opts, secret: await phraseIn(t2) });
  assert.equal(wrong.error.code, 'OWNER_MISMATCH');
  assert.match(wrong.error.message, /another tab has mismatch-tabs\.db open for owner/);
  await attempt(t1, (e) => e.insert('todos', { id: 'still', title: 'fine' }));
  assert.equal((await attempt(t1, (e) => e.list('todos'))).value.length, 1, 'the running tab carries on');
  await context.close();
});

test('blob URLs are made for a blob and revoked on request or on close', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  await open(page, { secret: await phraseIn(page), relays: [], schema: SCHEMA, autoSync: false, dbName: 'blob-urls.db' });
  const out = await page.evaluate(async () => {
    const e = window.engine;
    const m = await e.putBlob(new TextEncoder().encode('hello blob'), { mimeType: 'text/plain' });
    const [a, b] = [await e.getBlobUrl(m.blobId), await e.getBlobUrl(m.blobId)];
    const text = await (await fetch(a)).text();
    const revoked = [e.revokeBlobUrl(a), e.revokeBlobUrl(a), e.revokeBlobUrl('blob:not-ours')];
    const gone = await fetch(a).then(() => 'still readable', () => 'revoked');
    await e.close();
    const closed = await fetch(b).then(() => 'still readable', () => 'revoked');
    return { text, revoked, gone, closed };
  });
  assert.deepEqual(out, { text: 'hello blob', revoked: [true, false, false], gone: 'revoked', closed: 'revoked' });
  await context.close();
});

test('a leader whose worker, or whose page, stops answering fails waiting calls with UNRESPONSIVE, then serves again', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { secret: await phraseIn(t1), relays: [], schema: SCHEMA, autoSync: false, dbName: 'stuck.db', unresponsiveMs: 1500 };
  await open(t1, opts);
  assert.equal((await open(t2, opts)).role, 'follower');
  const timed = (page) =>
    page.evaluate(async () => {
      const started = Date.now();
      const code = await window.engine.list('todos').then(() => 'answered', (e) => e.code);
      return { code, ms: Date.now() - started };
    });
  // The leader's engine worker is stuck in a long task for 8 s.
  const worker = await engineWorker(t1);
  const stuck = worker.evaluate(() => {
    const end = Date.now() + 8000;
    while (Date.now() < end);
  });
  await new Promise((r) => setTimeout(r, 200));
  // A write meanwhile is not failed early: it runs once the worker is free.
  const write = t2.evaluate(() => window.engine.insert('todos', { id: 'w', title: 'waited' }).then((r) => r.id, (e) => e.code));
  const [fromFollower, fromLeader] = await Promise.all([timed(t2), timed(t1)]);
  for (const [who, r] of [['follower', fromFollower], ['leader', fromLeader]]) {
    assert.equal(r.code, 'UNRESPONSIVE', `${who}: ${JSON.stringify(r)}`);
    assert.ok(r.ms < 6000, `${who}: failed after ${r.ms} ms, not at the 60 s deadline`);
  }
  await stuck;
  assert.equal(await write, 'w', 'the write waited for the worker and was applied');
  await eventually(async () => (await attempt(t2, (e) => e.list('todos'))).value !== undefined, 10000, 'served again');
  // The leader's page itself stops answering (its main thread blocked): the follower's ping goes unanswered.
  const frozen = t1.evaluate(() => {
    const end = Date.now() + 6000;
    while (Date.now() < end);
  });
  await new Promise((r) => setTimeout(r, 200));
  const meanwhile = await timed(t2);
  assert.equal(meanwhile.code, 'UNRESPONSIVE', JSON.stringify(meanwhile));
  assert.ok(meanwhile.ms < 5500, `failed after ${meanwhile.ms} ms`);
  await frozen;
  await eventually(async () => (await attempt(t2, (e) => e.list('todos'))).value !== undefined, 10000, 'served again');
  await context.close();
});

test('deleteDatabase removes a database without opening it, and closes the tab that has it with DELETED', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { relays: [], schema: SCHEMA, autoSync: false, dbName: 'doomed.db' };
  const first = await open(t1, { ...opts, secret: await phraseIn(t1) });
  await attempt(t1, (e) => e.insert('todos', { id: 'a', title: 'to be deleted' }));
  const closed = t1.evaluate(() => new Promise((resolve) => window.engine.onClose((e) => resolve(e.code))));
  await t2.evaluate(() => window.simplysync.deleteDatabase('doomed.db'));
  assert.equal(await closed, 'DELETED');
  assert.equal(await t2.evaluate(() => window.simplysync.hasStoredSecret('doomed.db')), false);
  assert.equal((await open(t2, opts)).error?.code, 'NO_SECRET', 'nothing stored any more');
  // The name is usable again, by another owner too (no OWNER_MISMATCH, no SECRET_LOST).
  const again = await open(t2, { ...opts, secret: await phraseIn(t2) });
  assert.notEqual(again.ownerId, first.ownerId);
  assert.deepEqual((await attempt(t2, (e) => e.list('todos'))).value, []);
  // A database whose key is gone: deleted all the same.
  await attempt(t2, (e) => e.close());
  await evictCustodyKey(t2, 'doomed.db');
  assert.equal((await open(t2, opts)).error?.code, 'SECRET_LOST');
  await t2.evaluate(() => window.simplysync.deleteDatabase('doomed.db'));
  assert.ok((await open(t2, { ...opts, secret: await phraseIn(t2) })).ownerId, 'opens afresh');
  await context.close();
});

test('resetLocalData({ requireSynced: true }) refuses while a change has not reached every relay', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const secret = await phraseIn(page);
  await open(page, { secret, relays: [], schema: SCHEMA, autoSync: false, dbName: 'logout-none.db' });
  const alone = await attempt(page, (e) => e.resetLocalData({ requireSynced: true }));
  assert.equal(alone.error?.code, 'NOT_SYNCED', 'no relay: the data is only here');
  await attempt(page, (e) => e.close());
  await open(page, { secret, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'logout.db' });
  await attempt(page, (e) => e.insert('todos', { id: 'a', title: 'not yet sent' }));
  const refused = await attempt(page, (e) => e.resetLocalData({ requireSynced: true }));
  assert.equal(refused.error?.code, 'NOT_SYNCED');
  assert.match(refused.error.message, /1 pending/);
  assert.equal((await attempt(page, (e) => e.list('todos'))).value.length, 1, 'nothing deleted; the engine still runs');
  await attempt(page, (e) => e.sync());
  const done = await attempt(page, (e) => e.resetLocalData({ requireSynced: true }));
  assert.equal(done.error, undefined, JSON.stringify(done));
  assert.equal(await page.evaluate(() => window.simplysync.hasStoredSecret('logout.db')), false);
  await context.close();
});

test('status without the network: engine.status, hasSynced and waitForFirstSync; getRelayStatuses asks relays only when told to', async () => {
  assert.ok(STALLED, 'scripts/test.sh names a stalled listener in SIMPLYSYNC_TEST_STALLED');
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const secret = await phraseIn(page);
  await open(page, { secret, relays: [STALLED], schema: SCHEMA, autoSync: false, dbName: 'status.db', requestTimeoutMs: 20000 });
  const offline = await page.evaluate(async () => {
    const e = window.engine;
    const started = Date.now();
    const asked = await e.getRelayStatuses();
    return { urls: e.status.map((s) => s.url), hasSynced: e.hasSynced, local: asked.map((s) => s.state), ms: Date.now() - started };
  });
  assert.deepEqual([offline.urls, offline.hasSynced], [[STALLED], false]);
  assert.ok(offline.ms < 2000, `getRelayStatuses() answered from local state in ${offline.ms} ms`);
  await attempt(page, (e) => e.close());
  // A device that syncs: waitForFirstSync resolves once a relay was read; a reopen knows it at once.
  await open(page, { secret, relays: [RELAY], schema: SCHEMA, dbName: 'status-synced.db' });
  const first = await page.evaluate(async () => {
    await window.engine.waitForFirstSync();
    return { hasSynced: window.engine.hasSynced, lastSyncAt: window.engine.status[0].lastSyncAt };
  });
  assert.equal(first.hasSynced, true);
  assert.equal(typeof first.lastSyncAt, 'number');
  const refreshed = await attempt(page, async (e) => (await e.getRelayStatuses({ refresh: true }))[0].account);
  assert.ok(refreshed.value === null || typeof refreshed.value.quotaBytes === 'number', JSON.stringify(refreshed));
  await attempt(page, (e) => e.close());
  await open(page, { secret, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'status-synced.db' });
  assert.equal(await page.evaluate(() => window.engine.hasSynced), true, 'known from local state after a reopen');
  await context.close();
});

test('putBlob: a retry after a TIMEOUT gets the blob stored the first time, and a Blob moves to the worker uncopied', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  await open(page, { secret: await phraseIn(page), relays: [], schema: SCHEMA, autoSync: false, dbName: 'blob-once.db', callTimeoutMs: 1000 });
  // The worker is busy for 5 s: the put's deadline (1 s + 2 s for its first MiB) passes first.
  const worker = await engineWorker(page);
  const busy = worker.evaluate(() => {
    const end = Date.now() + 5000;
    while (Date.now() < end);
  });
  await new Promise((r) => setTimeout(r, 200));
  const first = await page.evaluate(async () => {
    window.bytes = Uint8Array.from({ length: 300000 }, (_, i) => (i * 7919 + Date.now()) & 255);
    return window.engine.putBlob(window.bytes, { mimeType: 'image/png' }).then((m) => m.blobId, (e) => e.code);
  });
  assert.equal(first, 'TIMEOUT');
  await busy;
  const again = await page.evaluate(async () => {
    const e = window.engine;
    const retried = await e.putBlob(window.bytes, { mimeType: 'image/png' });
    const asBlob = await e.putBlob(new Blob([window.bytes], { type: 'image/png' }));
    const other = await e.putBlob(window.bytes, { mimeType: 'image/jpeg' });
    const [{ n }] = await e.query('SELECT count(*) AS n FROM blob');
    return { same: retried.blobId === asBlob.blobId, other: other.blobId !== retried.blobId, n, kept: window.bytes.byteLength };
  });
  assert.deepEqual(again, { same: true, other: true, n: 2, kept: 300000 }, 'one blob for the same bytes and type; the app\'s array is not detached');
  await context.close();
});

test('a leader page frozen by the page lifecycle keeps serving through its worker; one that navigates away hands over at once', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { secret: await phraseIn(t1), relays: [], schema: SCHEMA, autoSync: false, dbName: 'lifecycle.db', unresponsiveMs: 3000 };
  await open(t1, opts);
  assert.equal((await open(t2, opts)).role, 'follower');
  await attempt(t2, (e) => e.insert('todos', { id: 'a', title: 'before the freeze' }));
  // Chromium freezes the leader page (as it does to background tabs): the follower's calls
  // are still answered, within their deadline and without UNRESPONSIVE.
  const cdp = await context.newCDPSession(t1);
  await cdp.send('Page.setWebLifecycleState', { state: 'frozen' });
  try {
    const started = Date.now();
    const whileFrozen = await attempt(t2, async (e) => {
      await e.insert('todos', { id: 'b', title: 'while the leader is frozen' });
      return (await e.list('todos')).length;
    });
    assert.deepEqual(whileFrozen, { value: 2 }, `answered in ${Date.now() - started} ms`);
  } finally {
    await cdp.send('Page.setWebLifecycleState', { state: 'active' });
  }
  // The leader navigates away: the follower leads within a moment and has every write.
  const left = Date.now();
  await t1.goto('about:blank');
  await eventually(() => t2.evaluate(() => window.engine.role === 'leader'), 5000, 'the hand-over');
  const handedOver = Date.now() - left;
  assert.ok(handedOver < 3000, `handed over in ${handedOver} ms`);
  assert.equal((await attempt(t2, (e) => e.list('todos'))).value.length, 2);
  await context.close();
});

test('putBlob tells its progress chunk by chunk, in the tab that runs the engine and in a follower', async () => {
  const context = await browser.newContext();
  const [t1, t2] = [await openApp(context, server.url), await openApp(context, server.url)];
  const opts = { secret: await phraseIn(t1), relays: [], schema: SCHEMA, autoSync: false, dbName: 'blob-progress.db' };
  await open(t1, opts);
  assert.equal((await open(t2, opts)).role, 'follower');
  const put = (page, seed) =>
    page.evaluate(async (s) => {
      const bytes = Uint8Array.from({ length: 1000000 }, (_, i) => (i * 31 + s) & 255);
      const seen = [];
      const m = await window.engine.putBlob(new Blob([bytes], { type: 'application/octet-stream' }), {
        chunkSize: 262144,
        onProgress: (p) => seen.push([p.sealedBytes, p.totalBytes, p.stored]),
      });
      return { chunks: m.chunks.length, seen };
    }, seed);
  for (const [who, page] of [['leader', t1], ['follower', t2]]) {
    const { chunks, seen } = await put(page, who.length);
    assert.equal(chunks, 4, who);
    assert.deepEqual(seen, [
      [262144, 1000000, false], [524288, 1000000, false], [786432, 1000000, false], [1000000, 1000000, false],
      [1000000, 1000000, true],
    ], `${who}: each chunk sealed, then stored`);
  }
  await context.close();
});

test('a tab never leads while a tab with a newer schema is alive (a deploy rolled back opens again once it is gone)', async () => {
  const context = await browser.newContext();
  const [newer, old] = [await openApp(context, server.url), await openApp(context, server.url)];
  // A tab of a newer app version, alive but not (yet) running the database: its schema lock.
  await newer.evaluate(() => {
    window.releaseNewer = null;
    navigator.locks.request('simplysync:guard.db:schema:7', { mode: 'shared' }, () => new Promise((r) => (window.releaseNewer = r)));
  });
  await eventually(() => newer.evaluate(() => window.releaseNewer !== null), 5000, 'the newer tab\'s lock');
  const opts = { secret: await phraseIn(old), relays: [], schema: SCHEMA, autoSync: false, dbName: 'guard.db', persist: false };
  assert.equal((await open(old, opts)).error?.code, 'OUTDATED', 'the old tab does not lead');
  await newer.evaluate(() => window.releaseNewer());
  const reopened = await open(old, opts);
  assert.equal(reopened.role, 'leader', JSON.stringify(reopened));
  assert.equal(reopened.storage.persisted, 'not-asked', 'persist: false asks nothing');
  await context.close();
});
