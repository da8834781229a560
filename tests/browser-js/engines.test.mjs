// The packed package in every browser engine users have, beyond Chromium: Firefox ESR (through
// geckodriver) and WebKitGTK (through WebKitWebDriver) — once with the Storage and File System
// APIs Safari ships (there OPFS sync access handles are missing, so the engine lives in
// IndexedDB) and once with WebKitGTK's defaults (no navigator.storage at all). In each: two
// profiles as two devices, a reload that proves durability, offline and online, live sync and
// live queries, and two tabs of one profile.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { buildApp, RELAY, SCHEMA, serve } from './harness.mjs';
import { Driver, startXvfb } from './webdriver.mjs';

let app;
let xvfb;
const drivers = [];

/** A TCP proxy to the relay that can drop off the network and come back. */
async function relayProxy() {
  const target = new URL(RELAY);
  const sockets = new Set();
  let down = false;
  const server = net.createServer((client) => {
    if (down) return client.destroy();
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    offline() {
      down = true;
      for (const s of sockets) s.destroy();
    },
    online() {
      down = false;
    },
    close() {
      // Held connections (a browser's keep-alive, a live long-poll) would keep close() waiting.
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(r));
    },
  };
}

before(async () => {
  app = await serve(buildApp());
  xvfb = await startXvfb();
});

after(async () => {
  for (const d of drivers) d.stop();
  xvfb?.stop();
  await app?.close();
});

// What each engine is expected to offer and pick (docs/app-guide.md's support table).
const ENGINES = [
  { name: 'Firefox ESR', kind: 'firefox', storage: 'opfs', persisted: 'unanswered', opfsApi: true, reason: null },
  {
    name: 'WebKitGTK with Safari\'s storage APIs',
    kind: 'webkit',
    safariFeatures: true,
    storage: 'idb',
    persisted: 'denied',
    opfsApi: true,
    reason: /NotSupportedError/,
  },
  { name: 'WebKitGTK with its defaults', kind: 'webkit', safariFeatures: false, storage: 'idb', persisted: 'unsupported', opfsApi: false, reason: /unavailable/ },
];

for (const engine of ENGINES) {
  test(`${engine.name}: two devices, a reload, offline and online, two tabs, a browser restart`, async (t) => {
    const proxy = await relayProxy();
    // Torn down even when an assertion fails, so a failing run still ends.
    t.after(() => proxy.close());
    // One driver per device: WebKitWebDriver runs one session at a time.
    const device = async (profile) => {
      const driver = await Driver.start(engine.kind, { display: xvfb.display });
      drivers.push(driver);
      const s = await driver.session({ safariFeatures: engine.safariFeatures, profile });
      await s.navigate(app.url);
      await s.until(() => window.simplysync, 'the package');
      return s;
    };
    const open = (s, secret) =>
      s.run(
        async (o) => {
          window.engine = await window.simplysync.createEngine(o);
          // storage() never waits for persist()'s answer: it says 'pending' until it comes (≤ 3 s).
          let storage = await window.engine.storage();
          for (let i = 0; i < 80 && storage.persisted === 'pending'; i++) {
            await new Promise((r) => setTimeout(r, 50));
            storage = await window.engine.storage();
          }
          return { ownerId: window.engine.ownerId, role: window.engine.role, mode: storage.mode, durable: storage.durable, reason: storage.reason, persisted: storage.persisted };
        },
        { secret, relays: [proxy.url], schema: SCHEMA, dbName: 'engines.db', syncIntervalMs: 400, openTimeoutMs: 30000 },
      );
    const titles = (s) => s.run(async () => (await window.engine.list('todos', { orderBy: 'id' })).map((r) => r.title));

    // Device A: a new identity, two todos, synced.
    const a = await device();
    const phrase = await a.run(() => window.simplysync.createMnemonic());
    const first = await open(a, phrase);
    t.diagnostic(`storage: ${first.mode}, reason: ${first.reason}, persist(): ${first.persisted}`);
    assert.equal(first.mode, engine.storage, first.reason ?? '');
    assert.equal(first.durable, true);
    assert.equal(first.persisted, engine.persisted);
    if (engine.reason) assert.match(first.reason, engine.reason);
    else assert.equal(first.reason, null);
    // The browser settings took effect: Safari's storage APIs on, or WebKitGTK's defaults.
    const api = await a.run(() => typeof globalThis.navigator.storage?.getDirectory === 'function');
    assert.equal(api, engine.opfsApi, 'navigator.storage.getDirectory is there exactly when expected');
    await a.run(async () => {
      await window.engine.insert('todos', { id: '1', title: 'one' });
      await window.engine.insert('todos', { id: '2', title: 'two' });
      const report = await window.engine.sync();
      if (report.relays[0].error) throw new Error(report.relays[0].error.message);
    });

    // A reload: a new worker reopens the database with the secret the engine kept.
    await a.refresh();
    await a.until(() => window.simplysync, 'the package after the reload');
    const reopened = await open(a, undefined);
    assert.deepEqual([reopened.ownerId, reopened.mode], [first.ownerId, engine.storage]);
    assert.deepEqual(await titles(a), ['one', 'two']);

    // Device B (another profile) restores from the phrase.
    const b = await device();
    await open(b, phrase);
    await b.run(() => window.engine.sync());
    assert.deepEqual(await titles(b), ['one', 'two']);

    // A goes offline, writes, and its write arrives once it is back online.
    proxy.offline();
    await a.run(() => window.engine.insert('todos', { id: '3', title: 'written offline' }));
    await a.until(async () => (await window.engine.getRelayStatuses())[0].state === 'offline', 'A offline');
    proxy.online();
    await a.run(() => window.dispatchEvent(new Event('online')));
    await a.until(async () => (await window.engine.getRelayStatuses())[0].pending === 0, 'A synced after coming back');
    await b.run(() => window.engine.sync());
    assert.deepEqual(await titles(b), ['one', 'two', 'written offline']);

    // Live: with B's channel open its poll is a minute away, so A's change reaching B without
    // a sync() on B came through a live notice (a long-poll in this browser's worker).
    // B's live query (engine.watch) calls back at once, then again with A's change.
    await b.until(async () => (await window.engine.getRelayStatuses())[0].live.state === 'live', 'B\'s channel is live');
    await b.run(() => {
      window.seen = [];
      const show = (rows) => rows.map((r) => `${r.id}:${r.done === true ? 'done' : 'open'}`).join(',');
      window.stopWatch = window.engine.watch('todos', { orderBy: 'id' }, (rows) => window.seen.push(show(rows)));
    });
    await b.until(() => window.seen.length === 1, 'B\'s live query at once');
    await a.run(() => window.engine.update('todos', '2', { done: true }));
    await b.until(async () => (await window.engine.get('todos', '2')).done === true, 'A\'s change on B, live');
    await b.until(() => window.seen.at(-1) === '1:open,2:done,3:open', 'B\'s live query re-ran with A\'s change');
    const seen = await b.run(() => {
      window.stopWatch();
      return window.seen;
    });
    assert.deepEqual(seen, ['1:open,2:open,3:open', '1:open,2:done,3:open'], 'one callback per new result, none unchanged');

    // Two tabs of A's profile share the engine; live queries in both see the follower's write.
    const tab1 = await a.handle();
    await a.run(() => {
      window.counts = [];
      window.engine.watchQuery('SELECT count(*) AS n FROM todos', [], (rows) => window.counts.push(rows[0].n));
    });
    await a.newTab();
    await a.navigate(app.url);
    await a.until(() => window.simplysync, 'the package in tab 2');
    const second = await open(a, undefined);
    assert.equal(second.role, 'follower');
    await a.run(() => {
      window.counts = [];
      window.engine.watchQuery('SELECT count(*) AS n FROM todos', [], (rows) => window.counts.push(rows[0].n));
    });
    await a.until(() => window.counts.length === 1, 'the follower\'s live query at once');
    await a.run(() => window.engine.insert('todos', { id: '4', title: 'from tab 2' }));
    await a.until(() => window.counts.at(-1) === 4, 'the follower\'s live query after its write');
    await a.switchTo(tab1);
    await a.until(async () => (await window.engine.list('todos')).length === 4, 'tab 1 sees tab 2\'s write');
    await a.until(() => window.counts.at(-1) === 4, 'tab 1\'s live query after tab 2\'s write');

    // Offline, A writes and its browser quits; restarted on the same profile (still offline,
    // so nothing can come back from the relay), A still has the write: it was durable locally.
    proxy.offline();
    await a.run(() => window.engine.insert('todos', { id: '5', title: 'before the browser quit' }));
    const profile = a.profile;
    await a.quit();
    const restarted = await device(profile);
    const again = await open(restarted, undefined);
    assert.deepEqual([again.ownerId, again.mode], [first.ownerId, engine.storage], 'the same database, its secret kept');
    assert.deepEqual(await titles(restarted), ['one', 'two', 'written offline', 'from tab 2', 'before the browser quit']);

    // A third device restores three pages: pages two and three are fetched and decrypted in its
    // opener worker (a nested worker with the same keys), and every row arrives. It opens first,
    // so its opener worker is ready by the time A's 2,100 more rows are on the relay.
    proxy.online();
    const c = await device();
    await c.run(
      async (o) => {
        window.engine = await window.simplysync.createEngine(o);
      },
      { secret: phrase, relays: [proxy.url], schema: SCHEMA, dbName: 'engines.db', autoSync: false, openTimeoutMs: 30000 },
    );
    await restarted.run(async () => {
      const ops = Array.from({ length: 2100 }, (_, i) => ({ op: 'insert', table: 'todos', row: { id: `bulk-${String(i).padStart(4, '0')}`, title: `n${i}` } }));
      await window.engine.transaction(ops);
      const report = await window.engine.sync();
      if (report.relays[0].error) throw new Error(report.relays[0].error.message);
    });
    const restore = await c.run(async () => {
      const pass = (await window.engine.sync()).relays[0];
      return { pass, rows: (await window.engine.list('todos')).length };
    });
    assert.equal(restore.pass.error, null);
    assert.equal(restore.rows, 2105);
    assert.ok(restore.pass.received > 2000, `received ${restore.pass.received}`);
    assert.equal(restore.pass.timings.openedAhead, restore.pass.received - 1000, 'every page after the first opened in the opener worker');

    await c.quit();
    await restarted.quit();
    await b.quit();
  });
}

/** Starts the example page's server, its relay URL pointing at `relay`. */
async function exampleServer(relay) {
  const { spawn } = await import('node:child_process');
  const path = await import('node:path');
  const { fileURLToPath } = await import('node:url');
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
  const child = spawn('node', [path.join(root, 'example-web/serve.mjs'), '--port', '0', '--relay', relay], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      const m = String(d).match(/serving (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`serve.mjs exited ${code}`)));
  });
  return { url, stop: () => child.kill() };
}

for (const engine of ENGINES) {
  test(`${engine.name}: the example page — first run, reload, restore, offline and online, two tabs`, async (t) => {
    const proxy = await relayProxy();
    t.after(() => proxy.close());
    const example = await exampleServer(proxy.url);
    t.after(() => example.stop());
    const device = async () => {
      const driver = await Driver.start(engine.kind, { display: xvfb.display });
      drivers.push(driver);
      const s = await driver.session({ safariFeatures: engine.safariFeatures });
      await s.navigate(example.url);
      await s.until(() => document.body.dataset.ready, 'the page');
      return s;
    };
    const titles = (s) => s.run(() => [...document.querySelectorAll('#todos li .text')].map((e) => e.textContent));
    const add = async (s, title) => {
      await s.run((t) => {
        document.getElementById('title').value = t;
        document.getElementById('new-todo').requestSubmit();
      }, title);
      await s.until((t) => [...document.querySelectorAll('#todos li .text')].some((e) => e.textContent === t), `"${title}" listed`, 20000, title);
    };

    // First run on A: a new phrase, written down.
    const a = await device();
    assert.equal(await a.run(() => document.body.dataset.ready), 'welcome');
    const phrase = await a.run(async () => {
      document.getElementById('start-fresh').click();
      while (document.getElementById('new-phrase-panel').hidden) await new Promise((r) => setTimeout(r, 50));
      const p = document.getElementById('new-phrase').textContent;
      const saved = document.getElementById('saved-it');
      saved.checked = true;
      saved.dispatchEvent(new Event('change'));
      document.getElementById('phrase-continue').click();
      return p;
    });
    assert.equal(phrase.split(' ').length, 12);
    await a.until(() => document.body.dataset.ready === 'app', 'the app after the first run');
    await add(a, 'from A');

    // Reload: welcome back, same todo, no phrase asked.
    await a.refresh();
    await a.until(() => document.body.dataset.ready === 'app', 'welcome back');
    await a.until(() => document.querySelectorAll('#todos li').length === 1, 'the todo after the reload');

    // B restores A's todos from the phrase.
    const b = await device();
    await b.run((p) => {
      document.getElementById('have-phrase').click();
      document.getElementById('phrase-input').value = p;
      document.getElementById('phrase-form').requestSubmit();
    }, phrase);
    await b.until(() => document.querySelectorAll('#todos li').length === 1, 'B restored');
    assert.deepEqual(await titles(b), ['from A']);

    // A offline: its todo waits, and arrives once A is back online.
    proxy.offline();
    await add(a, 'while offline');
    await a.until(() => document.getElementById('relays').textContent.includes('offline'), 'A shows offline');
    proxy.online();
    await a.run(() => window.dispatchEvent(new Event('online')));
    await b.until(
      () => {
        document.getElementById('sync-now').click();
        return [...document.querySelectorAll('#todos li .text')].some((e) => e.textContent === 'while offline');
      },
      'B gets the offline todo',
      30000,
    );

    // A second tab of A.
    const tab1 = await a.handle();
    await a.newTab();
    await a.navigate(example.url);
    await a.until(() => document.body.dataset.ready === 'app', 'tab 2');
    assert.match(await a.run(() => document.getElementById('identity').textContent), /via another tab/);
    await add(a, 'from tab 2');
    await a.switchTo(tab1);
    await a.until(() => [...document.querySelectorAll('#todos li .text')].some((e) => e.textContent === 'from tab 2'), 'tab 1 sees it');

    await a.quit();
    await b.quit();
  });
}

test('Firefox ESR in a private window: IndexedDB for the session, and storage() says it is not durable', async () => {
  const driver = await Driver.start('firefox', { display: xvfb.display });
  drivers.push(driver);
  const s = await driver.session({ privateBrowsing: true });
  await s.navigate(app.url);
  await s.until(() => window.simplysync, 'the package');
  const opts = { relays: [], schema: SCHEMA, dbName: 'private.db', autoSync: false };
  const first = await s.run(async (o) => {
    window.engine = await window.simplysync.createEngine({ ...o, secret: await window.simplysync.createMnemonic() });
    await window.engine.insert('todos', { id: 'p', title: 'for this session' });
    return window.engine.storage();
  }, opts);
  assert.deepEqual([first.mode, first.durable], ['idb', false], first.reason);
  assert.match(first.reason, /SecurityError/);
  assert.match(first.reason, /deleted when the session ends/);
  // Within the session the data and the kept secret survive a reload.
  await s.refresh();
  await s.until(() => window.simplysync, 'the package after the reload');
  const titles = await s.run(async (o) => {
    window.engine = await window.simplysync.createEngine(o);
    return (await window.engine.list('todos')).map((r) => r.title);
  }, opts);
  assert.deepEqual(titles, ['for this session']);
  await s.quit();
});
