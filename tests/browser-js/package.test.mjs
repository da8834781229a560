// The packed npm package in real Chromium: built into a Vite app, loaded over HTTP, syncing
// through the real relay that scripts/test.sh starts.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { buildApp, eventually, launch, openApp, pageErrors, RELAY, SCHEMA, serve } from './harness.mjs';

let server;
let browser;
let dist;

before(async () => {
  dist = buildApp();
  server = await serve(dist);
  browser = await launch();
});

after(async () => {
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
  await browser?.close();
  await server?.close();
});

const open = (page, opts) =>
  page.evaluate(async (o) => {
    window.engine = await window.simplysync.createEngine(o);
    return { ownerId: window.engine.ownerId, role: window.engine.role, storage: await window.engine.storage() };
  }, opts);

const titles = (page) =>
  page.evaluate(async () => (await window.engine.list('todos', { orderBy: 'id' })).map((r) => r.title));

test('the packed package runs in a Vite app: an engine on OPFS writes, reads and syncs', async (t) => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const phrase = await page.evaluate(() => window.simplysync.createMnemonic());
  const info = await open(page, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false });
  assert.equal(info.storage.mode, 'opfs');
  assert.equal(info.storage.durable, true);
  assert.equal(info.role, 'leader');
  t.diagnostic(`persist(): ${info.storage.persisted}`);
  const result = await page.evaluate(async () => {
    const e = window.engine;
    await e.insert('todos', { id: 'a', title: 'milk', done: false });
    let error;
    try {
      await e.insert('todos', { id: 'b', done: 'yes' });
    } catch (err) {
      error = { name: err.name, code: err.code, isError: err instanceof window.simplysync.SimplySyncError };
    }
    const report = await e.sync();
    const typed = await e.query('SELECT done, title FROM todos');
    const raw = await e.query('SELECT done, title FROM todos', [], { raw: true });
    return { rows: await e.list('todos'), error, pushed: report.relays[0].pushed, statuses: await e.getRelayStatuses(), typed, raw };
  });
  assert.deepEqual(result.typed, [{ done: false, title: 'milk' }], 'query() gives a boolean column as list() does');
  assert.deepEqual(result.raw, [{ done: 0, title: 'milk' }]);
  assert.equal(result.rows.length, 1);
  assert.deepEqual(result.error, { name: 'SimplySyncError', code: 'INVALID_VALUE', isError: true });
  assert.equal(result.pushed, 1);
  assert.equal(result.statuses[0].state, 'synced');
  const check = await page.evaluate(() => window.simplysync.validateSecret('abandon abandon'));
  assert.deepEqual({ ok: check.ok, code: check.code }, { ok: false, code: 'SECRET_WORD_COUNT' });
  // As users run it: the database is in files of the browser's profile on disk, not in memory.
  const opfs = path.join(context.profileDir, 'Default', 'File System');
  assert.ok(readdirSync(opfs, { recursive: true }).length > 0, `OPFS files under ${opfs}`);
  await context.close();
});

test('focus and online events each trigger a sync', async () => {
  const phrase = await (async () => {
    const c = await browser.newContext();
    const p = await openApp(c, server.url);
    const s = await p.evaluate(() => window.simplysync.createMnemonic());
    await c.close();
    return s;
  })();
  const writerContext = await browser.newContext();
  const writer = await openApp(writerContext, server.url);
  await open(writer, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false });
  const readerContext = await browser.newContext();
  const reader = await openApp(readerContext, server.url);
  // The poll interval is far away and no live channel is open: only the events can make the
  // reader sync.
  await open(reader, { secret: phrase, relays: [RELAY], schema: SCHEMA, syncIntervalMs: 3600000, live: false });
  await eventually(() => reader.evaluate(async () => (await window.engine.getRelayStatuses())[0].state === 'synced'), 10000, 'boot sync');

  await writer.evaluate(async () => {
    await window.engine.insert('todos', { id: 'f', title: 'after focus' });
    await window.engine.sync();
  });
  // The reader's poll is an hour away and it has no focus yet: nothing has pulled the write.
  assert.deepEqual(await titles(reader), [], 'nothing arrives without a trigger');
  await reader.evaluate(() => window.dispatchEvent(new Event('focus')));
  await eventually(async () => (await titles(reader)).includes('after focus'), 10000, 'the focus sync');

  await writer.evaluate(async () => {
    await window.engine.insert('todos', { id: 'o', title: 'after online' });
    await window.engine.sync();
  });
  await readerContext.setOffline(true);
  await readerContext.setOffline(false); // fires 'online' in the page
  await eventually(async () => (await titles(reader)).includes('after online'), 10000, 'the online sync');

  // A page shown again syncs, as focus does (mobile browsers often send no focus event).
  await writer.evaluate(async () => {
    await window.engine.insert('todos', { id: 'v', title: 'after visible' });
    await window.engine.sync();
  });
  await reader.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { value: 'visible', configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await eventually(async () => (await titles(reader)).includes('after visible'), 10000, 'the visibilitychange sync');
  await writerContext.close();
  await readerContext.close();
});

test('a write on one device shows at once on another, idle one: no sync(), the poll an hour away, one live channel for two tabs', async () => {
  const phrase = `sf1_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')}`;
  const writerContext = await browser.newContext();
  const writer = await openApp(writerContext, server.url);
  await open(writer, { secret: phrase, relays: [RELAY], schema: SCHEMA });
  await writer.evaluate(() => window.engine.insert('todos', { id: '0', title: 'first' }));
  await eventually(() => writer.evaluate(async () => (await window.engine.getRelayStatuses())[0].state === 'synced'), 10000, 'the writer pushed');

  const readerContext = await browser.newContext();
  // Wait requests of the reader's browser context (both tabs and the worker): how many, and
  // how many at once.
  const waits = [];
  let openWaits = 0;
  let mostOpen = 0;
  const isWait = (r) => r.url().includes('/v1/events/wait');
  readerContext.on('request', (r) => {
    if (!isWait(r)) return;
    waits.push(r.url());
    mostOpen = Math.max(mostOpen, ++openWaits);
  });
  for (const ended of ['requestfinished', 'requestfailed']) readerContext.on(ended, (r) => isWait(r) && openWaits--);
  const reader = await openApp(readerContext, server.url);
  await open(reader, { secret: phrase, relays: [RELAY], schema: SCHEMA, syncIntervalMs: 3600000 });
  const second = await openApp(readerContext, server.url);
  assert.equal((await open(second, { secret: phrase, relays: [RELAY], schema: SCHEMA, syncIntervalMs: 3600000 })).role, 'follower');
  const live = (page) => page.evaluate(async () => (await window.engine.getRelayStatuses())[0].live);
  await eventually(async () => (await live(reader)).state === 'live', 10000, 'the reader\'s channel is live');
  assert.equal((await live(second)).state, 'live', 'the follower tab sees the leader\'s channel');
  await eventually(async () => (await titles(reader)).includes('first'), 10000, 'the boot pass');

  const sent = Date.now();
  await writer.evaluate(() => window.engine.insert('todos', { id: '1', title: 'live' }));
  await eventually(async () => (await titles(second)).includes('live'), 10000, 'the write on the idle device');
  const took = Date.now() - sent;
  assert.ok(took < 5000, `arrived after ${took} ms, well before any poll`);
  // One engine (in the leader tab's worker) holds one wait per relay, however many tabs.
  assert.ok(waits.length >= 1, 'the channel is a wait request');
  assert.equal(mostOpen, 1, `at most one wait open at a time (${waits.length} in all)`);
  await writerContext.close();
  await readerContext.close();
});

test('two tabs of one origin share the engine with no lost or duplicated writes, and a follower takes over', async () => {
  const context = await browser.newContext();
  const tab1 = await openApp(context, server.url);
  const phrase = await tab1.evaluate(() => window.simplysync.createMnemonic());
  const opts = { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'tabs.db' };
  assert.equal((await open(tab1, opts)).role, 'leader');
  const tab2 = await openApp(context, server.url);
  const second = await open(tab2, opts);
  assert.equal(second.role, 'follower');
  assert.equal(second.storage.mode, 'opfs');

  const heard = tab1.evaluate(
    () => new Promise((resolve) => window.engine.subscribe(['todos'], (e) => e.rows.some((r) => r.id === 't2-0') && resolve(true))),
  );
  const writes = (page, prefix, n) =>
    page.evaluate(
      async ({ prefix, n }) => {
        const done = [];
        for (let i = 0; i < n; i++) done.push(window.engine.insert('todos', { id: `${prefix}-${i}`, title: `${prefix} ${i}` }));
        return (await Promise.all(done)).length;
      },
      { prefix, n },
    );
  const [a, b] = await Promise.all([writes(tab1, 't1', 25), writes(tab2, 't2', 25)]);
  assert.equal(a + b, 50);
  assert.equal(await heard, true, 'the leader tab hears the follower tab\'s writes');
  assert.equal((await titles(tab2)).length, 50);

  // Writes in flight while the leader tab closes are re-sent to the next leader, once each.
  const inFlight = tab2.evaluate(async () => {
    const done = [];
    window.lateIssued = 0;
    for (let i = 0; i < 40; i++) {
      done.push(window.engine.insert('todos', { id: `late-${i}`, title: `late ${i}` }));
      if (i % 4 === 0) done.push(window.engine.putBlob(new Uint8Array([i]), { mimeType: 'text/plain' }));
      window.lateIssued = i + 1;
      await new Promise((r) => setTimeout(r, 5));
    }
    return (await Promise.allSettled(done)).map((r) => r.status);
  });
  // Close the leader while writes are being issued: some before, some after.
  await eventually(() => tab2.evaluate(() => (window.lateIssued ?? 0) >= 8), 10000, 'writes under way');
  await tab1.close();
  const statuses = await inFlight;
  assert.deepEqual(statuses, Array(50).fill('fulfilled'));
  assert.equal(await tab2.evaluate(() => window.engine.role), 'leader');
  const counts = await tab2.evaluate(async () => {
    const [rows] = await window.engine.query("SELECT count(*) AS n FROM todos");
    const [blobs] = await window.engine.query("SELECT count(*) AS n FROM blob");
    // The outbox's events, none acknowledged yet (autoSync is off): the relay's pending count.
    const [status] = await window.engine.getRelayStatuses();
    return { rows: rows.n, blobs: blobs.n, events: status.pending };
  });
  assert.deepEqual(counts, { rows: 90, blobs: 10, events: 100 }, 'every write once: one row (or blob) and one event each');
  await context.close();
});

/** A browser context whose worker lacks OPFS (and, with `noIdb`, IndexedDB too). */
async function crippled(noIdb) {
  const context = await browser.newContext();
  let prelude = 'Object.defineProperty(StorageManager.prototype, "getDirectory", { value: undefined });\n';
  if (noIdb) prelude += 'Object.defineProperty(self, "indexedDB", { value: undefined });\n';
  await context.route(/\/assets\/worker-[^/]*\.js$/, async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, body: prelude + (await response.text()) });
  });
  return context;
}

test('without OPFS sync access handles the engine lives in IndexedDB, durably', async () => {
  const context = await crippled(false);
  const page = await openApp(context, server.url);
  const phrase = await page.evaluate(() => window.simplysync.createMnemonic());
  const opts = { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'no-opfs.db' };
  const info = await open(page, opts);
  assert.equal(info.storage.mode, 'idb');
  assert.equal(info.storage.durable, true);
  assert.match(info.storage.reason, /OPFS sync access handles are unavailable/);
  await page.evaluate(() => window.engine.insert('todos', { id: 'i', title: 'kept in IndexedDB' }));
  await page.evaluate(() => window.engine.sync());
  // A reload (a new worker) finds it: the database is in IndexedDB, the secret in custody.
  await page.reload();
  await page.waitForFunction(() => window.simplysync);
  const again = await open(page, { ...opts, secret: undefined });
  assert.deepEqual([again.storage.mode, again.ownerId], ['idb', info.ownerId]);
  assert.deepEqual(await titles(page), ['kept in IndexedDB']);
  await page.evaluate(() => window.engine.resetLocalData());
  await context.close();
});

test('without Web Locks or BroadcastChannel each tab runs its own engine, and a second writer of one IndexedDB store is refused, losing nothing', async () => {
  const context = await crippled(false);
  await context.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'locks', { value: undefined });
    delete globalThis.BroadcastChannel;
  });
  const tab1 = await openApp(context, server.url);
  const phrase = await tab1.evaluate(() => window.simplysync.createMnemonic());
  const opts = { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'no-locks.db' };
  const first = await open(tab1, opts);
  assert.deepEqual([first.role, first.storage.mode], ['leader', 'idb'], 'the tab runs the engine itself');
  await tab1.evaluate(() => window.engine.insert('todos', { id: '1', title: 'first tab' }));

  // A second tab opens the same database: it loads what the first saved, and runs its own copy.
  const tab2 = await openApp(context, server.url);
  const second = await open(tab2, { ...opts, secret: undefined });
  assert.deepEqual([second.role, second.ownerId], ['leader', first.ownerId]);
  assert.deepEqual(await titles(tab2), ['first tab']);
  await tab2.evaluate(() => window.engine.insert('todos', { id: '2', title: 'second tab' }));

  // The first tab writes again: its store is no longer the one it loaded, so it is told, and
  // overwrites nothing.
  const refused = await tab1.evaluate(() =>
    window.engine.insert('todos', { id: '3', title: 'stale tab' }).then(() => 'saved', (e) => `${e.code}: ${e.message}`),
  );
  assert.match(refused, /^STORAGE: .*another tab or window wrote database no-locks\.db/);
  // Its worker restarts and loads the current state: it now sees the other tab's row.
  await eventually(
    () => tab1.evaluate(async () => (await window.engine.list('todos')).some((r) => r.title === 'second tab')).catch(() => false),
    15000,
    'the stale tab reloads',
  );

  // What the second tab saved is intact: a fresh page reads both its rows.
  await tab1.close();
  await tab2.close();
  const tab3 = await openApp(context, server.url);
  await open(tab3, { ...opts, secret: undefined });
  assert.deepEqual(await titles(tab3), ['first tab', 'second tab']);
  await tab3.evaluate(() => window.engine.resetLocalData());
  await context.close();
});

test('without OPFS or IndexedDB the engine runs in memory and says so', async () => {
  const context = await crippled(true);
  const page = await openApp(context, server.url);
  const phrase = await page.evaluate(() => window.simplysync.createMnemonic());
  const info = await open(page, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'no-storage.db' });
  assert.equal(info.storage.mode, 'memory');
  assert.equal(info.storage.durable, false);
  assert.match(info.storage.reason, /OPFS sync access handles are unavailable.*and so is IndexedDB/);
  await page.evaluate(() => window.engine.insert('todos', { id: 'm', title: 'still works' }));
  assert.deepEqual(await titles(page), ['still works']);
  await context.close();
});

test('on IndexedDB storage a tab hears of a write only once it is durable (flushed), never before', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const dbName = 'flush-before-notice.db';
  const info = await open(page, { secret: await page.evaluate(() => window.simplysync.createMnemonic()), relays: [], schema: SCHEMA, dbName, storage: 'idb', autoSync: false });
  assert.equal(info.storage.mode, 'idb');
  const times = await page.evaluate(async (name) => {
    // The page holds a write transaction on the page store for 800 ms: the worker's flush waits
    // behind it, so the write is committed in memory but not yet durable for that long.
    const db = await new Promise((resolve, reject) => {
      const req = indexedDB.open(`simplysync-pages:${name}`);
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    let released = 0;
    const held = new Promise((resolve) => {
      const tx = db.transaction(['meta'], 'readwrite');
      const meta = tx.objectStore('meta');
      const end = performance.now() + 800;
      const spin = () => {
        if (performance.now() < end) meta.get('header').onsuccess = spin;
      };
      spin();
      tx.oncomplete = () => resolve((released = performance.now()));
    });
    let noticed = 0;
    const off = window.engine.subscribe(['todos'], () => (noticed ||= performance.now()));
    await window.engine.insert('todos', { id: 'n', title: 'durable first' });
    const acked = performance.now();
    await held;
    off();
    db.close();
    return { released, noticed, acked };
  }, dbName);
  assert.ok(times.noticed > 0, 'the change was noticed');
  assert.ok(times.noticed >= times.released, `noticed ${times.noticed - times.released} ms before the flush could commit`);
  assert.ok(times.acked >= times.released, 'the write was acknowledged before it was durable');
  await page.evaluate(() => window.engine.close());
  await context.close();
});

test('a restore of four pages: pages two to four are fetched and decrypted in the opener worker, each pulled once, and every row arrives', async () => {
  // Device B opens first (its opener worker starts meanwhile: it unseals the secret on its own),
  // then device A pushes 3,100 rows, then B restores them.
  const contextA = await browser.newContext();
  const a = await openApp(contextA, server.url);
  const phrase = await a.evaluate(() => window.simplysync.createMnemonic());
  const contextB = await browser.newContext();
  // B's pulls, from its engine's worker and its opener worker alike.
  const pulls = [];
  contextB.on('request', (r) => r.url().includes('/v1/events?') && pulls.push(new URL(r.url()).searchParams.get('after')));
  const b = await openApp(contextB, server.url);
  const info = await open(b, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'opener-b.db' });
  assert.equal(info.storage.mode, 'opfs');
  await open(a, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'opener-a.db' });
  const pushed = await a.evaluate(async () => {
    const ops = Array.from({ length: 3100 }, (_, i) => ({ op: 'insert', table: 'todos', row: { id: `t${String(i).padStart(4, '0')}`, title: `n${i}`, done: i % 2 === 0 } }));
    await window.engine.transaction(ops);
    return (await window.engine.sync()).relays[0].pushed;
  });
  assert.equal(pushed, 3100);
  pulls.length = 0;
  const pass = await b.evaluate(async () => (await window.engine.sync()).relays[0]);
  assert.equal(pass.error, null);
  assert.deepEqual([pass.received, pass.applied, pass.quarantined], [3100, 3100, 0]);
  assert.equal(pass.timings.openedAhead, 2100, 'pages two to four were opened in the opener worker');
  // Pages opened before the engine asked for them are still each pulled once, and nothing past
  // the relay's head is asked for.
  assert.equal(pulls.length, 4, `pulls after ${pulls.join(', ')}`);
  assert.equal(new Set(pulls).size, 4, `pulls after ${pulls.join(', ')}`);
  const rows = await b.evaluate(async () => (await window.engine.list('todos', { orderBy: 'id' })).map((r) => [r.id, r.title, r.done]));
  assert.equal(rows.length, 3100);
  assert.deepEqual(rows[1099], ['t1099', 'n1099', false]);
  assert.deepEqual(rows[3100 - 1], ['t3099', 'n3099', false]);
  await contextA.close();
  await contextB.close();
});

test('after a re-key the opener worker opens the new owner\'s pages', async () => {
  const contextB = await browser.newContext();
  const b = await openApp(contextB, server.url);
  const [oldPhrase, newPhrase] = await b.evaluate(async () => [await window.simplysync.createMnemonic(), await window.simplysync.createMnemonic()]);
  await open(b, { secret: oldPhrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'opener-rekey-b.db' });
  const owners = await b.evaluate(async (fresh) => {
    const e = window.engine;
    await e.insert('todos', { id: 'kept', title: 'from before the re-key' });
    await e.sync();
    const before = e.ownerId;
    await e.rekey(fresh);
    await e.confirmRekey();
    return [before, e.ownerId];
  }, newPhrase);
  assert.notEqual(owners[0], owners[1]);
  // Another device of the new owner writes three pages' worth.
  const contextD = await browser.newContext();
  const d = await openApp(contextD, server.url);
  await open(d, { secret: newPhrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'opener-rekey-d.db' });
  await d.evaluate(async () => {
    await window.engine.sync();
    const ops = Array.from({ length: 2100 }, (_, i) => ({ op: 'insert', table: 'todos', row: { id: `r${i}`, title: `n${i}` } }));
    await window.engine.transaction(ops);
    const r = (await window.engine.sync()).relays[0];
    if (r.error || r.pushed !== 2100) throw new Error(`pushed ${r.pushed}: ${r.error?.message}`);
  });
  const pass = await b.evaluate(async () => (await window.engine.sync()).relays[0]);
  assert.equal(pass.error, null);
  assert.ok(pass.received >= 2100, `received ${pass.received}`);
  assert.equal(pass.timings.openedAhead, pass.received - 1000, 'the opener worker has the new owner\'s keys');
  assert.equal(await b.evaluate(async () => (await window.engine.list('todos')).length), 2101);
  await contextB.close();
  await contextD.close();
});

test('under the Content-Security-Policy docs/app-guide.md gives, the engine opens, writes and syncs; without wasm-unsafe-eval it says why it cannot', async () => {
  const policy = (script) => `default-src 'none'; script-src 'self' ${script}; worker-src 'self'; connect-src 'self' ${RELAY}; img-src 'self' blob:`;
  const strict = await serve(dist, { headers: { 'Content-Security-Policy': policy("'wasm-unsafe-eval'") } });
  const bare = await serve(dist, { headers: { 'Content-Security-Policy': policy('') } });
  const violations = [];
  try {
    const context = await browser.newContext();
    const page = await openApp(context, strict.url);
    page.on('console', (m) => /Content.Security.Policy|Refused/.test(m.text()) && violations.push(m.text()));
    const phrase = await page.evaluate(() => window.simplysync.createMnemonic());
    const result = await page.evaluate(async (o) => {
      const e = await window.simplysync.createEngine(o);
      await e.insert('todos', { id: 'csp', title: 'under a strict policy' });
      const report = await e.sync();
      await e.close();
      return { pushed: report.relays[0].pushed, error: report.relays[0].error };
    }, { secret: phrase, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'csp.db' });
    assert.deepEqual(result, { pushed: 1, error: null });
    assert.deepEqual(violations, [], 'nothing the package does was refused');
    await context.close();

    const other = await browser.newContext();
    const refused = await openApp(other, bare.url);
    const failure = await refused.evaluate(async (o) => {
      try {
        await window.simplysync.createMnemonic();
        return 'opened';
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
    });
    assert.match(failure, /WebAssembly|unsafe-eval/, failure);
    // The engine's worker is refused the same way, and says so at once (no 60 s wait).
    const started = Date.now();
    const inWorker = await refused.evaluate(async (o) => {
      try {
        await window.simplysync.createEngine(o);
        return 'opened';
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
    }, { relays: [], schema: SCHEMA, autoSync: false, dbName: 'csp-refused.db' });
    assert.match(inWorker, /WebAssembly|unsafe-eval/, inWorker);
    assert.ok(Date.now() - started < 10000, `refused after ${Date.now() - started} ms`);
    await other.close();
  } finally {
    await strict.close();
    await bare.close();
  }
});

test('creating and checking a phrase runs in a worker: the page itself never loads the engine\'s wasm', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const result = await page.evaluate(async () => {
    const { createMnemonic, createRecoveryKey, validateSecret } = window.simplysync;
    const phrase = await createMnemonic();
    const key = await createRecoveryKey();
    const checks = [await validateSecret(phrase), await validateSecret(key), await validateSecret('abandon abandon')];
    const wasmOnPage = performance.getEntriesByType('resource').filter((e) => e.name.includes('.wasm')).length;
    return { words: phrase.split(' ').length, key: key.startsWith('sf1_'), checks: checks.map((c) => c.ok ? c.kind : c.code), wasmOnPage };
  });
  assert.deepEqual(result, { words: 12, key: true, checks: ['mnemonic', 'sf1', 'SECRET_WORD_COUNT'], wasmOnPage: 0 });
  await context.close();
});

test('a relay run with REGISTRATION=token: the status says why until the app gives its token, at open or later', async () => {
  const tokenRelay = process.env.SIMPLYSYNC_TEST_TOKEN_RELAY;
  const token = process.env.SIMPLYSYNC_TEST_REGISTRATION_TOKEN;
  assert.ok(tokenRelay && token, 'scripts/test.sh starts a relay with REGISTRATION=token and signs a token');
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const [first, second] = [await page.evaluate(() => window.simplysync.createMnemonic()), await page.evaluate(() => window.simplysync.createMnemonic())];
  const result = await page.evaluate(async ({ first, second, relay, token, schema }) => {
    const later = await window.simplysync.createEngine({ secret: first, relays: [relay], schema, autoSync: false, dbName: 'token-later.db' });
    await later.insert('todos', { id: 't', title: 'needs a token' });
    const refused = (await later.sync()).relays[0].error;
    const status = (await later.getRelayStatuses())[0];
    await later.setRegistrationToken(relay, token);
    const accepted = (await later.sync()).relays[0];
    await later.close();
    const atOpen = await window.simplysync.createEngine({
      secret: second, relays: [relay], schema, autoSync: false, dbName: 'token-at-open.db', registrationTokens: { [relay]: token },
    });
    await atOpen.insert('todos', { id: 'u', title: 'token given at open' });
    const pushed = (await atOpen.sync()).relays[0];
    await atOpen.close();
    return {
      refused: { status: refused?.status, code: refused?.code },
      state: status.state,
      accepted: { pushed: accepted.pushed, error: accepted.error },
      atOpen: { pushed: pushed.pushed, error: pushed.error },
    };
  }, { first, second, relay: tokenRelay, token, schema: SCHEMA });
  assert.deepEqual(result.refused, { status: 403, code: 'registration_token' });
  assert.equal(result.state, 'error');
  assert.deepEqual(result.accepted, { pushed: 1, error: null }, 'the token went through CORS with the push');
  assert.deepEqual(result.atOpen, { pushed: 1, error: null });
  await context.close();
});
