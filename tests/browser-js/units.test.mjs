// The package's plain-JS modules on their own, in Node (no browser): call bookkeeping,
// errors, schema comparison.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Calls } from '../../js/calls.js';
import { SimplySyncError, revive, toWire } from '../../js/errors.js';
import { LEADER_ONLY, MUTATING, stableJson } from '../../js/hub.js';

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
