// The package's plain-JS modules on their own, in Node (no browser): call bookkeeping,
// errors, schema comparison, live-query coalescing.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Calls } from '../../js/calls.js';
import { SimplySyncError, revive, toWire } from '../../js/errors.js';
import { LEADER_ONLY, MUTATING, stableJson } from '../../js/hub.js';
import { Listeners } from '../../js/listeners.js';
import { plainJson } from '../../js/plain-json.js';
import { Watches } from '../../js/watch.js';

test('a call settles once, with its answer or its error', async () => {
  const calls = new Calls('tab');
  const id = calls.nextId();
  const p = calls.add(id, { method: 'get', args: [] }, 1000);
  assert.equal(calls.settle(id, true, 42), true);
  assert.equal(calls.settle(id, false, new Error('late')), false, 'a second answer is ignored');
  assert.equal(await p, 42);
  const id2 = calls.nextId();
  const p2 = calls.add(id2, { method: 'get', args: [] }, 1000);
  calls.settle(id2, false, { message: 'no such row', code: 'NOT_FOUND' });
  await assert.rejects(p2, (e) => e instanceof SimplySyncError && e.code === 'NOT_FOUND');
  assert.equal(calls.size, 0);
});

test('a call without an answer rejects with TIMEOUT, and close rejects the rest with CLOSED', async () => {
  const calls = new Calls('tab');
  const slow = calls.add(calls.nextId(), { method: 'sync', args: [] }, 20);
  await assert.rejects(slow, (e) => e.code === 'TIMEOUT' && /sync/.test(e.message));
  const a = calls.add(calls.nextId(), { method: 'list', args: [] }, 10000);
  const b = calls.add(calls.nextId(), { method: 'get', args: [] }, 10000);
  assert.deepEqual(calls.unanswered().map(([, c]) => c.method), ['list', 'get']);
  calls.rejectAll();
  await assert.rejects(a, (e) => e.code === 'CLOSED');
  await assert.rejects(b, (e) => e.code === 'CLOSED');
});

test('ids are unique per tab and errors cross threads as plain data', () => {
  const calls = new Calls('t1');
  assert.notEqual(calls.nextId(), calls.nextId());
  assert.deepEqual(toWire(new SimplySyncError('x', 'ROW_TOO_LARGE')), { message: 'x', code: 'ROW_TOO_LARGE' });
  assert.equal(revive({ message: 'm' }).code, 'INTERNAL');
  assert.equal(revive('text').message, 'text');
});

test('schemas compare by content, whatever the key order', () => {
  assert.equal(stableJson({ b: 1, a: [{ y: 2, x: 1 }] }), stableJson({ a: [{ x: 1, y: 2 }], b: 1 }));
  assert.notEqual(stableJson({ tables: [1] }), stableJson({ tables: [2] }));
});

test('the secret-revealing calls are leader-only and every mutating call carries a request id', () => {
  assert.deepEqual([...LEADER_ONLY].sort(), ['confirmRekey', 'recoveryPhrase', 'rekey']);
  for (const m of ['transaction', 'putBlob', 'purgeDeleted', 'purgeRows', 'addRelay', 'removeRelay', 'rekey']) {
    assert.ok(MUTATING.has(m), m);
  }
});

test('events raised before the engine is ready reach listeners attached as createEngine resolves, in order', async () => {
  const events = new Listeners(['progress', 'status']);
  // The engine's first pass starts while it opens: its first events come before any listener.
  events.emit('progress', 1);
  events.emit('status', 'a');
  events.emit('progress', 2);
  const heard = [];
  // The engine is ready, and the app's code that awaited createEngine attaches its listeners.
  events.open();
  const off = events.on('progress', (p) => heard.push(['progress', p]));
  events.on('status', (s) => heard.push(['status', s]));
  assert.deepEqual(heard, [], 'held until a task later');
  events.emit('progress', 3); // raised before they were delivered: after them
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.deepEqual(heard, [['progress', 1], ['status', 'a'], ['progress', 2], ['progress', 3]]);
  events.emit('status', 'b');
  assert.deepEqual(heard.at(-1), ['status', 'b'], 'then every event goes out at once');
  events.open(); // ready again (a new leader tab): nothing is held any more
  events.emit('status', 'c');
  assert.deepEqual(heard.at(-1), ['status', 'c']);
  off();
  events.emit('progress', 5);
  assert.deepEqual(heard.at(-1), ['status', 'c'], 'a removed listener hears nothing');
});

/** Engine events by hand, and a query whose answers the test releases one at a time. */
function liveHarness(options = { paced: false }) {
  const listeners = { change: new Set(), refresh: new Set(), closed: new Set() };
  const events = {
    on: (name, fn) => listeners[name].add(fn),
    emit: (name, data) => listeners[name].forEach((fn) => fn(data)),
  };
  const pending = [];
  const run = () => new Promise((resolve, reject) => pending.push({ resolve, reject }));
  const answer = async (value) => {
    pending.shift().resolve(value);
    await new Promise((r) => setTimeout(r));
  };
  const fail = async (error) => {
    pending.shift().reject(error);
    await new Promise((r) => setTimeout(r));
  };
  return { watches: new Watches(events, options), events, run, answer, fail, pending };
}

test('a live query calls back at once, and a burst of changes while it runs costs one more run', async () => {
  const h = liveHarness();
  const seen = [];
  const stop = h.watches.add({ tables: ['todos'], run: h.run, callback: (rows) => seen.push(rows) });
  assert.equal(stop.runs, 1, 'the first run starts at once');
  for (let i = 0; i < 100; i++) h.events.emit('change', { tables: ['todos'] });
  assert.equal(h.pending.length, 1, 'no second run while the first is pending');
  await h.answer([1]);
  assert.deepEqual(seen, [[1]]);
  assert.equal(stop.runs, 2, 'a hundred changes meanwhile: exactly one more run');
  await h.answer([1, 2]);
  assert.deepEqual(seen, [[1], [1, 2]]);
  assert.equal(h.pending.length, 0, 'and no run after it');
  stop();
  h.events.emit('change', { tables: ['todos'] });
  assert.equal(h.pending.length, 0, 'stopped: changes no longer run it');
  assert.equal(h.watches.size, 0);
});

test('a live query ignores other tables and does not repeat an unchanged result', async () => {
  const h = liveHarness();
  const seen = [];
  h.watches.add({ tables: ['todos'], run: h.run, callback: (rows) => seen.push(rows) });
  await h.answer([{ id: 'a', n: 1 }]);
  h.events.emit('change', { tables: ['notes'] });
  assert.equal(h.pending.length, 0, 'a change to another table does not run it');
  h.events.emit('change', { tables: ['notes', 'todos'] });
  await h.answer([{ n: 1, id: 'a' }]);
  assert.equal(seen.length, 1, 'the same rows (whatever the key order) are not delivered again');
  h.events.emit('refresh');
  await h.answer([{ id: 'a', n: 2 }]);
  assert.deepEqual(seen.at(-1), [{ id: 'a', n: 2 }], 'a refresh (new leader) re-runs it');
  h.events.emit('closed');
  assert.equal(h.watches.size, 0, 'the engine closed: every live query ends');
});

test('a live query learns its tables first, and re-runs on any change until it knows them', async () => {
  const h = liveHarness();
  const seen = [];
  let asked = 0;
  h.watches.add({
    findTables: () => {
      asked++;
      return h.run();
    },
    run: h.run,
    callback: (rows) => seen.push(rows),
  });
  h.events.emit('change', { tables: ['notes'] }); // while the tables are not known yet
  await h.answer(['todos']);
  await h.answer([7]);
  assert.deepEqual(seen, [[7]]);
  assert.equal(h.pending.length, 1, 'the change that came before the tables were known runs it again');
  await h.answer([7]);
  h.events.emit('change', { tables: ['notes'] });
  assert.equal(h.pending.length, 0, 'now it knows it reads todos only');
  assert.equal(asked, 1);
});

test('a live query reports errors: a passing one keeps it, a bad query ends it', async () => {
  const h = liveHarness();
  const errors = [];
  const seen = [];
  h.watches.add({ tables: ['todos'], run: h.run, callback: (rows) => seen.push(rows), onError: (e) => errors.push(e.code) });
  await h.fail(new SimplySyncError('the leader went away', 'TIMEOUT'));
  h.events.emit('change', { tables: ['todos'] });
  await h.answer([1]);
  assert.deepEqual(seen, [[1]], 'after a timeout the next change runs it again');
  h.events.emit('change', { tables: ['todos'] });
  await h.fail({ message: 'no such column: titel', code: 'INVALID_QUERY' });
  h.events.emit('change', { tables: ['todos'] });
  assert.equal(h.pending.length, 0, 'a bad query is not run again');
  assert.deepEqual(errors, ['TIMEOUT', 'INVALID_QUERY']);
  assert.equal(h.watches.size, 0);
  assert.throws(() => h.watches.add({ tables: ['todos'], run: h.run, callback: 'nope' }), (e) => e.code === 'INVALID_ARGUMENT');
});

test('after a passing failure a live query delivers its result again, even if unchanged', async () => {
  const h = liveHarness();
  const seen = [];
  const errors = [];
  h.watches.add({ tables: ['todos'], run: h.run, callback: (rows) => seen.push(rows), onError: (e) => errors.push(e.code) });
  await h.answer([1]);
  h.events.emit('change', { tables: ['todos'] });
  await h.fail(new SimplySyncError('the engine worker is restarting', 'WORKER'));
  h.events.emit('refresh');
  await h.answer([1]);
  assert.deepEqual(errors, ['WORKER']);
  assert.deepEqual(seen, [[1], [1]], 'the same rows again: the query works again (an error shown can clear)');
  h.events.emit('change', { tables: ['todos'] });
  await h.answer([1]);
  assert.equal(seen.length, 2, 'and unchanged results are skipped again after that');
});

test('a paced live query waits as long as its last run took before the next', async () => {
  const h = liveHarness({ paced: true });
  h.watches.add({ tables: ['todos'], run: h.run, callback: () => {} });
  await new Promise((r) => setTimeout(r, 120)); // the first run "takes" 120 ms
  h.events.emit('change', { tables: ['todos'] });
  await h.answer([1]);
  assert.equal(h.pending.length, 0, 'not at once');
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(h.pending.length, 0, 'not after half the time');
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(h.pending.length, 1, 'after as long as the last run took');
});

test('plainJson gives the JSON text of plain data and nothing for anything else', () => {
  const row = { id: 'a', title: 'lone \ud800', n: 1e21, list: [1, undefined, null, { k: 'v' }], gone: undefined, bare: Object.create(null) };
  assert.equal(plainJson([row]), JSON.stringify([row]));
  assert.equal(plainJson({ a: 0, b: -1.5, c: false, d: '' }), '{"a":0,"b":-1.5,"c":false,"d":""}');
  class Todo { constructor() { this.id = 'x'; } }
  const cycle = {};
  cycle.self = cycle;
  const notPlain = {
    date: new Date(0), map: new Map(), set: new Set(), bytes: new Uint8Array(1), boxed: new String('s'),
    instance: new Todo(), ownToJSON: { toJSON: () => 'x' }, fn: () => 1, symbol: Symbol('s'), bigint: 1n,
    nan: NaN, infinity: -Infinity, minusZero: -0, cycle,
  };
  for (const [what, value] of Object.entries(notPlain)) {
    assert.equal(plainJson([{ row: { v: value } }]), undefined, what);
    assert.equal(plainJson([{ row: { list: [value] } }]), undefined, `${what} in an array`);
  }
  assert.equal(plainJson([{ toJSON: 1 }]), '[{"toJSON":1}]', 'a key named toJSON is data');
  Object.defineProperty(Object.prototype, 'toJSON', { value: () => 'x', configurable: true });
  try {
    assert.equal(plainJson([{ a: 1 }]), undefined, 'an inherited toJSON would change the text');
    assert.equal(plainJson([1, 2]), undefined, 'arrays inherit it too');
  } finally {
    delete Object.prototype.toJSON;
  }
});
