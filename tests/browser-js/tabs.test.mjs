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
  assert.ok(['granted', 'denied', 'unanswered', 'unsupported'].includes(first.storage.persisted), first.storage.persisted);
  await attempt(page, (e) => e.insert('todos', { id: 'a', title: 'kept' }));
  const stored = await attempt(page, async (e) => (await e.query("SELECT value FROM _sync_meta WHERE key = 'wrapped_secret'"))[0].value);
  assert.ok(stored.value && !stored.value.includes(phrase.split(' ')[0]), 'the stored secret is sealed');
  await attempt(page, (e) => e.close());
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

test('a follower with another schema gets SCHEMA_MISMATCH; relays added at run time survive a takeover', async () => {
  const context = await browser.newContext();
  const [t1, t2, t3] = [await openApp(context, server.url), await openApp(context, server.url), await openApp(context, server.url)];
  const phrase = await phraseIn(t1);
  const opts = { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'schema-tabs.db' };
  await open(t1, opts);
  const newer = { ...SCHEMA, schemaVersion: 2, tables: [...SCHEMA.tables, { name: 'notes', columns: [{ name: 'body', type: 'text' }] }] };
  const mismatch = await open(t2, { ...opts, schema: newer });
  assert.equal(mismatch.error.code, 'SCHEMA_MISMATCH');
  assert.equal((await open(t3, opts)).role, 'follower');
  await attempt(t1, (e) => e.addRelay('http://127.0.0.1:9'));
  await t1.close();
  await eventually(() => t3.evaluate(() => window.engine.role === 'leader'), 10000, 'the takeover');
  const urls = await attempt(t3, async (e) => (await e.getRelayStatuses()).map((s) => s.url));
  assert.deepEqual(urls.value, [RELAY, 'http://127.0.0.1:9']);
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
  const worker = engineWorker(page);
  assert.ok(worker, 'the engine worker');
  // A call in flight when the worker dies rejects with WORKER; the worker is restarted.
  const inFlight = page.evaluate(() => window.engine.sync().then(() => 'resolved', (e) => e.code));
  await new Promise((r) => setTimeout(r, 300));
  await worker.evaluate(() => setTimeout(() => { throw new Error('the worker dies (injected)'); }));
  assert.equal(await inFlight, 'WORKER');
  await eventually(async () => (await attempt(page, (e) => e.list('todos'))).value?.length === 1, 15000, 'the restarted engine');
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
  await t2.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const req = indexedDB.open('simplysync-custody', 1);
        req.onsuccess = () => {
          const tx = req.result.transaction('keys', 'readwrite');
          tx.objectStore('keys').delete('lost-key.db');
          tx.oncomplete = () => resolve(req.result.close());
          tx.onerror = () => reject(tx.error);
        };
        req.onerror = () => reject(req.error);
      }),
  );
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
  await eventually(() => page.workers().filter((w) => w.url().includes('worker')).length === 0, 5000, 'no worker left');
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
