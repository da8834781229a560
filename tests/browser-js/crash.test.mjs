// A browser killed outright on a profile on disk — as users run Chromium, OPFS files on disk —
// keeps every write the package acknowledged: the commit's bytes were handed to the file
// before its promise settled, none left in a buffer of the page's (the write-coalescing shim
// included), and the database opens again after the kill.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { buildApp, eventually, launchOnDisk, openApp, pageErrors, RELAY, SCHEMA, serve } from './harness.mjs';

let server;
const profiles = [];

before(async () => {
  server = await serve(buildApp());
});

after(async () => {
  await server?.close();
  for (const dir of profiles) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
});

/** Kills `pids` outright; one already gone (a child of one killed before it) is fine. */
function killAll(pids) {
  for (const pid of pids) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch (e) {
      if (e.code !== 'ESRCH') throw e;
    }
  }
}

/** The PIDs of every browser process running on the profile directory `dir`. */
function browserProcesses(dir) {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(`--user-data-dir=${dir}`);
      } catch {
        return false; // gone meanwhile
      }
    });
}

const open = (page, secret) =>
  page.evaluate(async (o) => {
    window.engine = await window.simplysync.createEngine(o);
    return window.engine.storage();
  }, { secret, relays: [RELAY], schema: SCHEMA, autoSync: false });

// (Linux: the browser's processes are found by their command lines in /proc.)
test('on a profile on disk, every acknowledged write survives the browser being killed', { skip: !existsSync('/proc/self/cmdline') }, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'simplysync-crash-'));
  profiles.push(dir);
  const first = await launchOnDisk(dir);
  let phrase;
  try {
    const page = await openApp(first, server.url);
    phrase = await page.evaluate(() => window.simplysync.createMnemonic());
    const storage = await open(page, phrase);
    assert.deepEqual([storage.mode, storage.durable], ['opfs', true]);
    // The browser's processes, found before the writes so that the kill follows the last
    // acknowledgement at once (a write reaching the file a moment late would be lost).
    const pids = browserProcesses(dir);
    assert.ok(pids.length > 0, 'the browser runs on the profile');
    // Single writes and a large transaction, each awaited: acknowledged.
    const acknowledged = await page.evaluate(async () => {
      const e = window.engine;
      for (let i = 0; i < 20; i++) await e.insert('todos', { id: `single-${i}`, title: `one ${i}`, done: false });
      const rows = Array.from({ length: 2000 }, (_, i) => ({ op: 'insert', table: 'todos', row: { id: `bulk-${i}`, title: `row ${i}`, done: i % 2 === 0 } }));
      await e.transaction(rows);
      await e.update('todos', 'single-0', { title: 'updated before the kill' });
      return (await e.list('todos')).length;
    });
    // The whole browser, every process of it, killed outright: no close, no unload, no flush.
    killAll(pids);
    killAll(browserProcesses(dir)); // any started since
    await eventually(() => browserProcesses(dir).length === 0, 10000, 'the browser gone');
    assert.equal(acknowledged, 2020);
  } finally {
    await first.close().catch(() => {}); // Playwright's side of the dead browser
  }

  const second = await launchOnDisk(dir);
  try {
    const again = await openApp(second, server.url);
    const reopened = await open(again, phrase);
    assert.equal(reopened.mode, 'opfs');
    const found = await again.evaluate(async () => {
      const e = window.engine;
      const rows = await e.list('todos');
      return { count: rows.length, first: (await e.get('todos', 'single-0'))?.title, last: (await e.get('todos', 'bulk-1999'))?.title };
    });
    assert.deepEqual(found, { count: 2020, first: 'updated before the kill', last: 'row 1999' });
    // And it goes on: the outbox kept every write, so one sync pushes them all.
    const report = await again.evaluate(async () => (await window.engine.sync()).relays[0]);
    assert.equal(report.error ?? null, null, JSON.stringify(report.error));
    assert.equal(report.pushed, 2020, 'every acknowledged write is in the outbox');
  } finally {
    await second.close();
  }
});
