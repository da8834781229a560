// Runs every browser benchmark in a dedicated worker (OPFS lives only here) and posts raw
// samples back. Each measurement is repeated `runs` times after one discarded warm-up run.
import init, * as bench from './pkg/simplysync.js';
import { pageStore } from './pkg/idb-pages.js';
import { plainJson } from './pkg/plain-json.js';
import { custodyFor } from './pkg/custody.js';
import { startOpener } from './pkg/opener.js';

const log = (text) => self.postMessage({ log: text });

// An opener worker as the package's worker starts one (js/opener.js): the secret sealed by the
// key custody, unsealed there. Waits until it is ready.
async function benchOpener(secret) {
  const custody = custodyFor('bench-restore');
  const sealed = await custody.wrap(new TextEncoder().encode(secret));
  const wrapped = btoa(String.fromCharCode(...sealed)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const opener = startOpener('bench-restore', wrapped);
  for (let i = 0; i < 400 && opener?.state === 'starting'; i++) await new Promise((r) => setTimeout(r, 25));
  if (opener?.state !== 'ready') throw new Error(`the opener worker did not start (${opener?.state})`);
  return opener;
}

async function webcryptoThroughput(size, minMs, inFlight) {
  const key = await crypto.subtle.importKey('raw', new Uint8Array(32).fill(7), 'AES-GCM', false, ['encrypt']);
  const msg = new Uint8Array(size).fill(0x5a);
  let bytes = 0;
  let n = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < minMs) {
    const batch = [];
    for (let i = 0; i < inFlight; i++) {
      const iv = new Uint8Array(12);
      new DataView(iv.buffer).setUint32(0, n++);
      batch.push(crypto.subtle.encrypt({ name: 'AES-GCM', iv }, key, msg));
    }
    await Promise.all(batch);
    bytes += size * inFlight;
  }
  return bytes / (performance.now() - t0);
}

// Counts the OPFS sync-access-handle writes SQLite's VFS makes (a measurement of this bench
// only: the package never wraps the platform's objects). `take()` returns and resets.
function countOpfsWrites() {
  const proto = FileSystemSyncAccessHandle.prototype;
  const write = proto.write;
  const flush = proto.flush;
  let n = { calls: 0, small: 0, bytes: 0, ms: 0, flushes: 0, flushMs: 0 };
  proto.flush = function () {
    const t0 = performance.now();
    try {
      return flush.call(this);
    } finally {
      n.flushMs += performance.now() - t0;
      n.flushes++;
    }
  };
  proto.write = function (buffer, options) {
    const t0 = performance.now();
    try {
      return write.call(this, buffer, options);
    } finally {
      n.ms += performance.now() - t0;
      n.calls++;
      n.bytes += buffer.byteLength;
      if (buffer.byteLength < 512) n.small++;
    }
  };
  return { take: () => [n, (n = { calls: 0, small: 0, bytes: 0, ms: 0, flushes: 0, flushMs: 0 })][0] };
}

async function repeat(runs, fn) {
  await fn(); // warm-up (V8 tier-up, first OPFS use)
  const out = [];
  for (let i = 0; i < runs; i++) out.push(await fn());
  return out;
}

/** AES-256-GCM in the module against WebCrypto, at an event's size and a blob chunk's. */
async function aes(results, runs) {
  log('aes');
  results.aes = {};
  for (const size of [1024, 262144]) {
    results.aes[size] = {
      wasm: await repeat(runs, () => bench.benchAes(size, 300)),
      webcrypto: await repeat(runs, () => webcryptoThroughput(size, 300, 1)),
      webcrypto32: await repeat(runs, () => webcryptoThroughput(size, 300, 32)),
    };
  }
}

self.onmessage = async ({ data }) => {
  try {
    await init();
    const runs = Number(data.runs ?? 5);
    const commits = Number(data.commits || 200); // single-row commits per path and run (--commits)
    const results = { crossOriginIsolated: self.crossOriginIsolated }; // (--isolated: a 5 µs clock)
    if (data.only === 'aes') {
      await aes(results, runs);
      self.postMessage({ results });
      return;
    }
    if (data.only === 'status') {
      log('status with a queued backlog');
      results.status = [];
      for (const n of [10000, 100000]) results.status.push(await bench.benchStatus(n, runs));
      self.postMessage({ results });
      return;
    }
    if (data.only === 'pages') {
      const all = [];
      for (let i = 0; i < runs; i++) all.push(await bench.benchPageSizes());
      self.postMessage({ results: { journal: all } });
      return;
    }
    if (data.only === 'journal') {
      self.postMessage({ results: { journal: await bench.benchJournalModes(100) } });
      return;
    }
    if (data.only === 'idb') {
      // Only the IndexedDB storage (e.g. in WebKit, which has no OPFS sync access handles).
      log('local writes, IndexedDB');
      results.localWriteIdb = await repeat(runs, () => bench.benchLocalWrite(commits, pageStore(), plainJson));
      log('bulk writes, IndexedDB');
      results.bulkIdb = await repeat(runs, () => bench.benchBulk(10000, pageStore(), plainJson));
      log('restore, IndexedDB');
      results.restoreIdb = [];
      for (let i = 0; i < Math.min(runs, 3); i++) results.restoreIdb.push(await bench.benchRestore(data.restoreSecret, data.relay, pageStore()));
      self.postMessage({ results });
      return;
    }
    if (data.only === 'restore') {
      // Only the restores (OPFS, then IndexedDB), each run into a fresh database: `runs` of each.
      // The OPFS runs also count the VFS's writes (calls, bytes, time inside them).
      // (Taken by the restore itself, before and after the engine's close: bench.rs.)
      self.__opfsWrites = countOpfsWrites();
      // Each run also restores as the package's worker runs it: each page's change event and
      // progress to JS and posted to the page (js/worker.js's onChange / onProgress). The two
      // kinds alternate, so the machine's drift falls on both alike.
      let told = 0;
      const post = (event) => (data) => {
        told += 1;
        self.postMessage({ event, data });
      };
      const listeners = { change: post('change'), progress: post('progress') };
      // And as the package's worker runs it with its opener worker (pages sent ahead fetched
      // and decrypted there), with and without the listeners.
      const opener = await benchOpener(data.restoreSecret);
      results.restore = [];
      results.restoreWrites = [];
      results.restoreListened = [];
      results.restoreOpened = [];
      results.restorePackage = [];
      for (let i = 0; i < runs; i++) {
        const restored = await bench.benchRestore(data.restoreSecret, data.relay);
        results.restore.push(restored);
        results.restoreWrites.push(restored.writes);
        results.restoreListened.push(await bench.benchRestore(data.restoreSecret, data.relay, undefined, listeners));
        results.restoreOpened.push(await bench.benchRestore(data.restoreSecret, data.relay, undefined, undefined, opener));
        results.restorePackage.push(await bench.benchRestore(data.restoreSecret, data.relay, undefined, listeners, opener));
      }
      opener.stop();
      results.restoreListenedTold = told / runs;
      log('reopen after a tab died');
      results.reopen = [];
      for (let i = 0; i < Math.min(runs, 3); i++) results.reopen.push(await bench.benchReopen(100000));
      results.restoreIdb = [];
      for (let i = 0; i < runs; i++) results.restoreIdb.push(await bench.benchRestore(data.restoreSecret, data.relay, pageStore()));
      // The floor: as many rows by bare INSERTs, a commit per 1000 (OPFS).
      const rows = results.restore[0].events;
      results.rawLoad = [];
      results.rawLoadWrites = [];
      self.__opfsWrites.take();
      for (let i = 0; i < runs; i++) {
        results.rawLoad.push(await bench.benchRawLoad(rows));
        results.rawLoadWrites.push(self.__opfsWrites.take());
      }
      self.postMessage({ results });
      return;
    }
    if (data.only === 'package') {
      // Only the restore as the package runs it (opener worker, with and without the
      // listeners): `runs` of each, alternated — for a CPU profile of that path alone.
      const listeners = { change: (d) => self.postMessage({ event: 'change', data: d }), progress: (d) => self.postMessage({ event: 'progress', data: d }) };
      const opener = await benchOpener(data.restoreSecret);
      results.restoreOpened = [];
      results.restorePackage = [];
      for (let i = 0; i < runs; i++) {
        results.restoreOpened.push(await bench.benchRestore(data.restoreSecret, data.relay, undefined, undefined, opener));
        results.restorePackage.push(await bench.benchRestore(data.restoreSecret, data.relay, undefined, listeners, opener));
      }
      opener.stop();
      self.postMessage({ results });
      return;
    }
    if (data.only === 'writes') {
      // Only the write paths: single-row commits and the 10,000-row transaction, OPFS then IndexedDB.
      // The OPFS single-row runs also count the VFS's writes and flushes per phase.
      self.__opfsWrites = countOpfsWrites();
      results.localWrite = await repeat(runs, () => bench.benchLocalWrite(commits, undefined, plainJson));
      results.bulk = await repeat(runs, () => bench.benchBulk(10000, undefined, plainJson));
      results.localWriteIdb = await repeat(runs, () => bench.benchLocalWrite(commits, pageStore(), plainJson));
      results.bulkIdb = await repeat(runs, () => bench.benchBulk(10000, pageStore(), plainJson));
      self.postMessage({ results });
      return;
    }
    log('local writes');
    results.localWrite = await repeat(runs, () => bench.benchLocalWrite(commits, undefined, plainJson));
    log('bulk writes');
    results.bulk = await repeat(runs, () => bench.benchBulk(10000, undefined, plainJson));
    // The same on the IndexedDB storage (the fallback where OPFS sync access handles are missing).
    log('local writes, IndexedDB');
    results.localWriteIdb = await repeat(runs, () => bench.benchLocalWrite(commits, pageStore(), plainJson));
    log('bulk writes, IndexedDB');
    results.bulkIdb = await repeat(runs, () => bench.benchBulk(10000, pageStore(), plainJson));
    await aes(results, runs);
    if (data.relay && data.restoreSecret) {
      log('restore');
      // Each run restores into a fresh database; the warm-up run is skipped (it would be a full restore too).
      results.restore = [];
      for (let i = 0; i < Math.min(runs, 3); i++) results.restore.push(await bench.benchRestore(data.restoreSecret, data.relay));
      log('restore, IndexedDB');
      results.restoreIdb = [];
      for (let i = 0; i < Math.min(runs, 3); i++) results.restoreIdb.push(await bench.benchRestore(data.restoreSecret, data.relay, pageStore()));
      log('sync latency');
      results.syncLatency = await bench.benchSyncLatency(data.latencySecret, data.relay, 30);
      log('poll latency');
      results.pollLatency = await bench.benchPollLatency(data.latencySecret, data.relay, 5000, Number(data.pollReps ?? 8));
    }
    self.postMessage({ results });
  } catch (e) {
    self.postMessage({ error: String(e?.message ?? e) });
  }
};
