// Live queries (Engine.watch / watchQuery) of the packed package in real Chromium: local writes,
// pages pulled from the real relay, several tabs (a follower's live query, a takeover), and
// bursts of writes that must not turn into a storm of runs or callbacks.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { buildApp, engineWorker, eventually, launch, openApp, pageErrors, RELAY, SCHEMA, serve } from './harness.mjs';

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

const open = (page, opts) =>
  page.evaluate(async (o) => {
    window.engine = await window.simplysync.createEngine(o);
    window.seen = {};
    window.errors = [];
    window.live = {};
    return window.engine.role;
  }, opts);

/** Starts `engine.watch(table, options)` in `page`; its results collect in window.seen[name]. */
const watch = (page, name, table, options) =>
  page.evaluate(
    ({ name, table, options }) => {
      window.seen[name] = [];
      window.live[name] = window.engine.watch(table, options, (rows) => window.seen[name].push(rows), (e) => window.errors.push(e.code));
    },
    { name, table, options },
  );

const seen = (page, name) => page.evaluate((n) => window.seen[n], name);

/** Two tabs of one context on database `dbName`: the first runs the engine, the second follows. */
async function twoTabs(dbName) {
  const context = await browser.newContext();
  const leader = await openApp(context, server.url);
  const follower = await openApp(context, server.url);
  const secret = await leader.evaluate(() => window.simplysync.createMnemonic());
  const options = { secret, relays: [], schema: SCHEMA, autoSync: false, dbName };
  assert.equal(await open(leader, options), 'leader');
  assert.equal(await open(follower, options), 'follower');
  return { context, leader, follower };
}
const titlesOf = (rows) => rows.map((r) => r.title);

test('a live query calls back at once, again after each write that changes its rows, and not for writes that do not', async () => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const secret = await page.evaluate(() => window.simplysync.createMnemonic());
  await open(page, { secret, relays: [], schema: SCHEMA, autoSync: false, dbName: 'watch-local.db' });
  await page.evaluate(() => window.engine.insert('todos', { id: 'a', title: 'milk', done: false }));
  await watch(page, 'open', 'todos', { where: { done: false }, orderBy: 'title' });
  await eventually(async () => (await seen(page, 'open')).length === 1, 5000, 'the first result');
  assert.deepEqual(titlesOf((await seen(page, 'open'))[0]), ['milk']);

  await page.evaluate(() => window.engine.insert('todos', { id: 'b', title: 'bread', done: false }));
  await eventually(async () => (await seen(page, 'open')).length === 2, 5000, 'the result after an insert');
  assert.deepEqual(titlesOf((await seen(page, 'open'))[1]), ['bread', 'milk']);

  // A done todo is outside the filter: the query runs (its table was touched), the rows are the
  // same, so no callback.
  const runsBefore = await page.evaluate(() => window.live.open.runs);
  await page.evaluate(() => window.engine.insert('todos', { id: 'c', title: 'eggs', done: true }));
  await eventually(() => page.evaluate((n) => window.live.open.runs > n, runsBefore), 5000, 'a run after the insert');
  await page.waitForTimeout(200);
  assert.equal((await seen(page, 'open')).length, 2, `an unchanged result is not delivered again: ${JSON.stringify(await seen(page, 'open'))}`);

  // SQL: SQLite names the tables it reads; a join over todos re-runs on todos' changes.
  const counts = await page.evaluate(async () => {
    const results = [];
    window.live.count = window.engine.watchQuery(
      'SELECT count(*) AS n FROM todos t WHERE NOT t.deleted AND t.id IN (SELECT id FROM todos WHERE done = ?)',
      [false],
      ([row]) => results.push(row.n),
    );
    window.countResults = results;
    await new Promise((r) => setTimeout(r, 300));
    await window.engine.update('todos', 'a', { done: true });
    await new Promise((r) => setTimeout(r, 300));
    return results;
  });
  assert.deepEqual(counts, [2, 1]);

  // A bad query reports INVALID_QUERY once and ends; an unknown column in a filter too.
  await page.evaluate(() => {
    window.live.bad = window.engine.watchQuery('SELECT nope FROM todos', [], () => {}, (e) => window.errors.push(e.code));
  });
  await watch(page, 'badColumn', 'todos', { where: { titel: 'x' } });
  await eventually(async () => (await page.evaluate(() => window.errors)).length === 2, 5000, 'two errors');
  assert.deepEqual((await page.evaluate(() => window.errors)).sort(), ['INVALID_QUERY', 'UNKNOWN_COLUMN']);

  // milk is done now: it left the open list.
  assert.deepEqual(titlesOf((await seen(page, 'open')).at(-1)), ['bread']);
  // Stopped: no more callbacks.
  const before = (await seen(page, 'open')).length;
  await page.evaluate(() => window.live.open());
  await page.evaluate(() => window.engine.insert('todos', { id: 'd', title: 'apples', done: false }));
  await page.waitForTimeout(300);
  assert.equal((await seen(page, 'open')).length, before);
  await page.evaluate(() => window.engine.close());
  await context.close();
});

test('a burst of 300 separate writes costs a handful of runs and callbacks, and ends on the full result', async (t) => {
  const context = await browser.newContext();
  const page = await openApp(context, server.url);
  const secret = await page.evaluate(() => window.simplysync.createMnemonic());
  await open(page, { secret, relays: [], schema: SCHEMA, autoSync: false, dbName: 'watch-burst.db' });
  await watch(page, 'all', 'todos', {});
  await eventually(async () => (await seen(page, 'all')).length === 1, 5000, 'the first result');
  const outcome = await page.evaluate(async () => {
    let batches = 0;
    const stopCounting = window.engine.subscribe('todos', () => batches++);
    await Promise.all(Array.from({ length: 300 }, (_, i) => window.engine.insert('todos', { id: `r${i}`, title: `t${i}` })));
    await new Promise((r) => setTimeout(r, 500));
    stopCounting();
    return { batches, runs: window.live.all.runs, callbacks: window.seen.all.length, last: window.seen.all.at(-1).length };
  });
  t.diagnostic(JSON.stringify(outcome));
  assert.equal(outcome.batches, 300, 'each write was its own committed batch');
  assert.equal(outcome.last, 300, 'the last result has every row');
  assert.ok(outcome.runs <= 10, `runs coalesced: ${outcome.runs} for 300 batches`);
  assert.ok(outcome.callbacks <= outcome.runs, `${outcome.callbacks} callbacks`);
  await page.evaluate(() => window.engine.close());
  await context.close();
});

test('pages pulled from another device re-run the live query with the new rows', async () => {
  const a = await browser.newContext();
  const b = await browser.newContext();
  const pageA = await openApp(a, server.url);
  const pageB = await openApp(b, server.url);
  const secret = await pageA.evaluate(() => window.simplysync.createMnemonic());
  const options = { secret, relays: [RELAY], schema: SCHEMA, autoSync: false, dbName: 'watch-remote.db' };
  await open(pageA, options);
  await open(pageB, options);
  await watch(pageB, 'list', 'todos', { orderBy: 'id' });
  await eventually(async () => (await seen(pageB, 'list')).length === 1, 5000, 'the first (empty) result');
  assert.deepEqual((await seen(pageB, 'list'))[0], []);
  await pageA.evaluate(async () => {
    await window.engine.transaction([
      { op: 'insert', table: 'todos', row: { id: 'x1', title: 'from A' } },
      { op: 'insert', table: 'todos', row: { id: 'x2', title: 'also from A' } },
    ]);
    await window.engine.sync();
  });
  await pageB.evaluate(() => window.engine.sync());
  await eventually(async () => (await seen(pageB, 'list')).length === 2, 5000, 'the pulled rows');
  assert.deepEqual(titlesOf((await seen(pageB, 'list'))[1]), ['from A', 'also from A']);
  for (const p of [pageA, pageB]) await p.evaluate(() => window.engine.close());
  await a.close();
  await b.close();
});

test('a follower tab\'s live query hears the leader\'s writes and its own, and keeps working after it takes over', async () => {
  const { context, leader, follower } = await twoTabs('watch-tabs.db');
  await watch(follower, 'list', 'todos', { orderBy: 'id' });
  await watch(leader, 'list', 'todos', { orderBy: 'id' });
  await eventually(async () => (await seen(follower, 'list')).length === 1, 5000, 'the follower\'s first result');

  await leader.evaluate(() => window.engine.insert('todos', { id: 'a', title: 'by the leader' }));
  await eventually(async () => (await seen(follower, 'list')).length === 2, 5000, 'the leader\'s write in the follower');
  await follower.evaluate(() => window.engine.insert('todos', { id: 'b', title: 'by the follower' }));
  await eventually(async () => (await seen(leader, 'list')).length === 3, 5000, 'the follower\'s write in the leader');
  await eventually(async () => (await seen(follower, 'list')).length === 3, 5000, 'and in the follower itself');

  // The leader goes away; the follower runs the engine now, and its live query still follows.
  await leader.close();
  await eventually(() => follower.evaluate(() => window.engine.role === 'leader'), 10000, 'the takeover');
  await follower.evaluate(() => window.engine.insert('todos', { id: 'c', title: 'after the takeover' }));
  await eventually(async () => (await seen(follower, 'list')).length === 4, 5000, 'a write after the takeover');
  assert.deepEqual(titlesOf((await seen(follower, 'list'))[3]), ['by the leader', 'by the follower', 'after the takeover']);
  await follower.evaluate(() => window.engine.close());
  await context.close();
});

test('when the leader\'s worker dies and restarts, a follower\'s live query runs again by itself', async () => {
  const { context, leader, follower } = await twoTabs('watch-restart.db');
  await watch(follower, 'list', 'todos', { orderBy: 'id' });
  await eventually(async () => (await seen(follower, 'list')).length === 1, 5000, 'the follower\'s first result');
  const runs = () => follower.evaluate(() => window.live.list.runs);
  assert.equal(await runs(), 1);
  const worker = await engineWorker(leader);
  assert.ok(worker, 'the leader\'s engine worker');
  await worker.evaluate(() => setTimeout(() => { throw new Error('the worker dies (injected)'); }));
  // Nothing changed in the data: the second run is the restart's refresh, told to every tab
  // (a follower whose calls failed with WORKER meanwhile would otherwise wait for a change).
  await eventually(async () => (await runs()) === 2, 15000, 'the follower\'s live query re-run after the restart');
  await leader.evaluate(() => window.engine.insert('todos', { id: 'r', title: 'after the restart' }));
  await eventually(async () => (await seen(follower, 'list')).at(-1)?.length === 1, 5000, 'and it follows writes again');
  await follower.evaluate(() => window.engine.close());
  await leader.evaluate(() => window.engine.close());
  await context.close();
});
