// Browser benchmarks, end to end: builds the bench wasm (release + wasm-opt, like the package),
// starts a release relay on a fresh database, seeds 100,000 real events, runs bench/index.html
// in headless Chromium (dedicated worker, OPFS) and prints medians and spreads.
//   node bench/run.mjs [--runs 5] [--events 100000] [--skip-build] [--only restore|package|writes|aes|status] [--cpu-profile FILE] [--threads] [--profile disk|memory] [--commits 200] [--isolated]
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, createReadStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const { chromium } = await import(path.join(root, 'tests/browser-js/node_modules/playwright-core/index.mjs'));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const runs = Number(arg('runs', 5));
// Checked before anything starts (see `onDisk` below).
const profile = arg('profile', 'disk');
if (!['disk', 'memory'].includes(profile)) throw new Error(`--profile is disk or memory, not ${profile}`);
if (process.argv.includes('--threads') && !existsSync('/proc/self/task')) throw new Error('--threads reads Linux\'s /proc');
const events = Number(arg('events', 100000));
const target = process.env.CARGO_TARGET_DIR ?? path.join(root, 'target');
const env = { ...process.env, PATH: `${os.homedir()}/.cargo/bin:${process.env.PATH}` };
const sh = (cmd, args, opts = {}) => execFileSync(cmd, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'], ...opts }).toString();

if (!process.argv.includes('--skip-build')) {
  console.error('building the bench wasm, the relay and the seeder (release)…');
  sh('wasm-pack', ['build', '--profile', 'wasm-release', '--target', 'web', '--mode', 'no-install', '--out-dir', 'bench/pkg', '--out-name', 'simplysync', '--no-pack', '.', '--', '--features', 'bench', '--locked']);
  const wasmOpt = path.join(process.env.SIMPLYSYNC_TOOLS ?? '/opt/simplysync-tools', 'node_modules/.bin/wasm-opt');
  // --cpu-profile keeps the wasm's function names (-g), so the profile names Rust and C frames.
  sh(wasmOpt, [...(arg('cpu-profile', '') ? ['-g'] : []), '-Oz', '--enable-bulk-memory', '--enable-reference-types', '--enable-nontrapping-float-to-int', '--enable-sign-ext',
    '--enable-mutable-globals', '--enable-multivalue', 'bench/pkg/simplysync_bg.wasm', '-o', 'bench/pkg/simplysync_bg.wasm']);
  sh('cargo', ['build', '--release', '--locked', '-p', 'simplysync-relay']);
  sh('cargo', ['build', '--release', '--locked', '--example', 'bench_seed']);
}
// The IndexedDB page store the package ships, for the IndexedDB runs…
copyFileSync(path.join(root, 'js/idb-pages.js'), path.join(here, 'pkg/idb-pages.js'));
// …and the worker's plain-data JSON, for the package's write path.
copyFileSync(path.join(root, 'js/plain-json.js'), path.join(here, 'pkg/plain-json.js'));
// …and the opener worker with its key custody, for the restore as the package runs it.
for (const f of ['custody.js', 'opener.js', 'opener-worker.js']) copyFileSync(path.join(root, 'js', f), path.join(here, 'pkg', f));

// A release relay on a fresh database.
const dbDir = mkdtempSync(path.join(os.tmpdir(), 'simplysync-bench-relay-'));
const relayProc = spawn(path.join(target, 'release/simplysync-relay'), [], {
  env: { ...env, PORT: '0', DB_PATH: path.join(dbDir, 'relay.sqlite'), RUST_LOG: 'warn', COMPACTION_INTERVAL_MS: '0', MAX_OWNER_BYTES: '10000000000' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const relay = await new Promise((resolve) => relayProc.stdout.on('data', (d) => {
  const m = String(d).match(/listening on (http:\/\/\S+)/);
  if (m) resolve(m[1]);
}));

const seedCount = ['', 'restore', 'package'].includes(arg('only', '')) ? events : 1;
console.error(`seeding ${seedCount} events…`);
const t0 = Date.now();
const seeded = JSON.parse(sh(path.join(target, 'release/examples/bench_seed'), [relay, String(seedCount)]));
console.error(`seeded ${seeded.events} events in ${Date.now() - t0} ms (the engine's sync: seal + push, ${seeded.syncMs} ms)`);
const latencySecret = `sf1_${randomBytes(32).toString('base64url')}`;

// Serve bench/ (page, worker, bench wasm).
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };
const server = http.createServer((req, res) => {
  const file = path.join(here, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (!file.startsWith(here) || !existsSync(file) || statSync(file).isDirectory()) return res.writeHead(404).end();
  const headers = { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream' };
  // `--isolated`: the page cross-origin isolated, so its workers' clock reads in 5 µs steps
  // instead of 100 µs (per-commit ratios of single writes need it; apps are often not isolated).
  if (process.argv.includes('--isolated')) Object.assign(headers, { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' });
  res.writeHead(200, headers);
  createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const page = `http://127.0.0.1:${server.address().port}/index.html`;

// `--cpu-profile FILE`: V8's sampling profile of the bench worker from its first instruction
// (the worker waits for the profiler), written as FILE (a .cpuprofile DevTools opens), with the
// top functions by self time printed.
async function profileWorker(p) {
  const cdp = await p.context().newCDPSession(p);
  const pending = new Map();
  let nextId = 1;
  let worker;
  cdp.on('Target.receivedMessageFromTarget', ({ message }) => {
    const m = JSON.parse(message);
    pending.get(m.id)?.(m);
    pending.delete(m.id);
  });
  const send = (method, params = {}) => new Promise((resolve) => {
    const id = nextId++;
    pending.set(id, resolve);
    cdp.send('Target.sendMessageToTarget', { sessionId: worker, message: JSON.stringify({ id, method, params }) });
  });
  cdp.on('Target.attachedToTarget', async ({ sessionId, targetInfo }) => {
    if (targetInfo.type !== 'worker' || worker) return;
    worker = sessionId;
    await send('Profiler.enable');
    await send('Profiler.setSamplingInterval', { interval: 250 });
    await send('Profiler.start');
    await send('Runtime.runIfWaitingForDebugger');
  });
  await cdp.send('Target.setAutoAttach', { autoAttach: true, waitForDebuggerOnStart: true, flatten: false });
  return {
    async stop(file) {
      const { result } = await send('Profiler.stop');
      writeFileSync(file, JSON.stringify(result.profile));
      const { nodes, samples, timeDeltas } = result.profile;
      const byId = new Map(nodes.map((n) => [n.id, n]));
      const self = new Map();
      samples.forEach((id, i) => {
        const f = byId.get(id).callFrame;
        const name = `${f.functionName || '(anonymous)'} ${f.url ? path.basename(f.url) : ''}`.trim();
        self.set(name, (self.get(name) ?? 0) + (timeDeltas[i] ?? 0) / 1000);
      });
      const total = [...self.values()].reduce((a, b) => a + b, 0);
      console.error(`CPU profile of the worker: ${file} (${Math.round(total)} ms sampled); top self time:`);
      for (const [name, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
        console.error(`${ms.toFixed(0).padStart(8)} ms ${((100 * ms) / total).toFixed(1).padStart(5)}%  ${name.slice(0, 140)}`);
      }
    },
  };
}

// `--threads`: the CPU time of every thread of this process's descendants (the browser's
// processes, the relay) over the page's whole run, from Linux's /proc — which threads are
// busy and how busy the two cores were, where a V8 profile sees one worker only.
function threadTicks() {
  const stat = (file) => {
    const text = readFileSync(file, 'utf8');
    const close = text.lastIndexOf(')');
    return { name: text.slice(text.indexOf('(') + 1, close), fields: text.slice(close + 2).split(' ') };
  };
  const children = new Map();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const ppid = stat(`/proc/${pid}/stat`).fields[1];
      children.set(ppid, [...(children.get(ppid) ?? []), pid]);
    } catch {} // gone meanwhile
  }
  const ticks = new Map();
  for (const pending = [String(process.pid)]; pending.length; ) {
    const pid = pending.pop();
    pending.push(...(children.get(pid) ?? []));
    try {
      const proc = stat(`/proc/${pid}/stat`).name;
      for (const tid of readdirSync(`/proc/${pid}/task`)) {
        try {
          const { name, fields } = stat(`/proc/${pid}/task/${tid}/stat`);
          ticks.set(tid, { proc, name, ticks: Number(fields[11]) + Number(fields[12]) });
        } catch {} // a thread gone meanwhile: the others still count
      }
    } catch {} // a process gone meanwhile
  }
  return ticks;
}

function printThreads(before, after, wallMs) {
  const hz = 100; // USER_HZ on Linux
  const by = new Map();
  for (const [tid, t] of after) {
    // Each worker thread on its own line (the engine's and the opener's); others by name.
    const key = `${t.proc}: ${t.name}${t.name.startsWith('DedicatedWorker') ? ` #${tid}` : ''}`;
    by.set(key, (by.get(key) ?? 0) + (t.ticks - (before.get(tid)?.ticks ?? 0)) / hz);
  }
  const total = [...by.values()].reduce((a, b) => a + b, 0);
  const cores = os.cpus().length;
  console.error(`CPU by thread over the page's run: ${total.toFixed(1)} s in ${(wallMs / 1000).toFixed(1)} s of wall time (${((100 * total) / (cores * wallMs / 1000)).toFixed(0)}% of ${cores} cores)`);
  for (const [key, s] of [...by].sort((a, b) => b[1] - a[1]).slice(0, 12)) {
    console.error(`${s.toFixed(2).padStart(8)} s ${((100 * s) / (wallMs / 1000)).toFixed(0).padStart(4)}% of the wall time  ${key}`);
  }
}

const launch = {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
};
// The browser runs in a profile on disk, as users' browsers do: OPFS files are real files and
// a flush reaches the disk. `--profile memory` runs in Playwright's `newContext()` instead, an
// off-the-record profile, whose OPFS Chromium keeps in the browser process's memory (each
// sync-access-handle call a message to that process, a flush a no-op) — how every figure
// before issue 17's round twenty-two was measured (BENCHMARKS.md).
const onDisk = profile === 'disk';
const profileDir = onDisk ? mkdtempSync(path.join(os.tmpdir(), 'simplysync-bench-profile-')) : null;
let browser;
let data;
let webkit;
try {
  browser = onDisk ? await chromium.launchPersistentContext(profileDir, launch) : await chromium.launch(launch);
  const p = onDisk ? await browser.newPage() : await (await browser.newContext()).newPage();
  p.on('console', (m) => console.error('page:', m.text()));
  const profiler = arg('cpu-profile', '') ? await profileWorker(p) : null;
  const q = new URLSearchParams({ relay, restoreSecret: seeded.secret, latencySecret, runs: String(runs), only: arg('only', ''), commits: arg('commits', '200') });
  // (Sampled every 250 ms while the page runs: a thread that ends — an opener worker
  // stopped — keeps what it was last seen with.)
  const threads = process.argv.includes('--threads') ? { before: threadTicks(), seen: new Map(), t0: Date.now() } : null;
  const sampler = threads && setInterval(() => threadTicks().forEach((t, tid) => threads.seen.set(tid, t)), 250);
  await p.goto(`${page}?${q}`);
  await p.waitForFunction(() => window.benchResults, null, { timeout: 20 * 60 * 1000, polling: 500 });
  data = await p.evaluate(() => window.benchResults);
  if (threads) {
    clearInterval(sampler);
    threadTicks().forEach((t, tid) => threads.seen.set(tid, t));
    printThreads(threads.before, threads.seen, Date.now() - threads.t0);
  }
  if (profiler) await profiler.stop(arg('cpu-profile', ''));
  await browser.close();
  if (!arg('only', '') && !process.argv.includes('--no-webkit')) {
    // The IndexedDB storage where it is the one 'auto' picks: WebKitGTK with Safari's storage
    // APIs (its createSyncAccessHandle answers NotSupportedError), over WebDriver.
    console.error('WebKitGTK: IndexedDB storage…');
    const { Driver, startXvfb } = await import(path.join(root, 'tests/browser-js/webdriver.mjs'));
    const xvfb = await startXvfb();
    const driver = await Driver.start('webkit', { display: xvfb.display });
    try {
      const s = await driver.session({ safariFeatures: true });
      await s.navigate(`${page}?${new URLSearchParams({ relay, restoreSecret: seeded.secret, runs: String(runs), only: 'idb' })}`);
      webkit = await s.until(() => window.benchResults, 'the WebKitGTK results', 20 * 60 * 1000);
      await s.quit();
    } finally {
      driver.stop();
      xvfb.stop();
    }
    if (webkit.error) throw new Error(`WebKitGTK: ${webkit.error}`);
  }
} finally {
  await browser?.close().catch(() => {});
  server.close();
  const exited = new Promise((resolve) => (relayProc.exitCode !== null ? resolve() : relayProc.once('exit', resolve)));
  relayProc.kill();
  await exited;
  // The relay's database and the browser's profile (each restore's OPFS files) are this run's
  // only; a directory that cannot be removed is reported, and the results still printed.
  for (const dir of [dbDir, profileDir]) {
    try {
      if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch (e) {
      console.error(`could not remove ${dir}: ${e.message}`);
    }
  }
}
if (data.error) throw new Error(data.error);
const r = data.results;
if (r.journal) {
  console.log(JSON.stringify(r.journal, null, 1));
  process.exit(0);
}

// ---- statistics ----------------------------------------------------------------------
const sorted = (xs) => [...xs].sort((a, b) => a - b);
const pct = (xs, p) => sorted(xs)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const median = (xs) => pct(xs, 50);
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const spread = (xs, digits = 0) => `${fmt(median(xs), digits)} [${fmt(Math.min(...xs), digits)}–${fmt(Math.max(...xs), digits)}]`;
const fmt = (x, digits = 0) => x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

const rows = [];
const row = (what, value, note = '') => rows.push(`| ${what} | ${value} | ${note} |`);
if (r.localWrite) {
  row('the bench worker cross-origin isolated (its clock in 5 µs steps; else 100 µs)', String(r.crossOriginIsolated), '--isolated');
  const rawP50 = r.localWrite.map((x) => median(x.raw));
  const engP50 = r.localWrite.map((x) => median(x.engine));
  const rawP99 = r.localWrite.map((x) => pct(x.raw, 99));
  const engP99 = r.localWrite.map((x) => pct(x.engine, 99));
  row('local write, bare INSERT (autocommit) p50 / p99, ms', `${spread(rawP50, 3)} / ${spread(rawP99, 3)}`, 'the floor');
  row('local write, engine mutation (row + outbox) p50 / p99, ms', `${spread(engP50, 3)} / ${spread(engP99, 3)}`, `ratio engine/raw p50 ${fmt(median(engP50.map((e, i) => e / rawP50[i])), 2)}`);
  // The mean of a run's commits: finer than the p50, which the timer's 0.1 ms steps round.
  const rawMean = r.localWrite.map((x) => mean(x.raw));
  const engMean = r.localWrite.map((x) => mean(x.engine));
  row(`local write, mean of ${r.localWrite[0].raw.length} commits: bare INSERT / engine mutation, ms`, `${spread(rawMean, 3)} / ${spread(engMean, 3)}`, `ratio engine/raw ${fmt(median(engMean.map((e, i) => e / rawMean[i])), 2)}`);
  if (r.localWrite[0].api) {
    const apiMean = r.localWrite.map((x) => mean(x.api));
    row(`local write, mean of ${r.localWrite[0].raw.length} commits: the package's path (JS op, request id recorded, JS row), ms`, spread(apiMean, 3), `ratio api/raw ${fmt(median(apiMean.map((e, i) => e / rawMean[i])), 2)}; api/engine ${fmt(median(apiMean.map((e, i) => e / engMean[i])), 2)}`);
  }
  // Paired: the paths make their commit i in one round (in an order rotated per commit), so
  // commit i's ratio compares one machine state; the median over a run's commits is robust to
  // a stray collection or a slow flush.
  const paired = (k) => r.localWrite.map((x) => median(x[k].map((v, i) => v / x.raw[i])));
  if (r.localWrite[0].api) {
    const n = r.localWrite[0].raw.length;
    row(`local write, paired: median over ${n} commits of (path's commit i / bare INSERT's commit i) — engine · package's path · by hand`, `×${spread(paired('engine'), 3)} · ×${spread(paired('api'), 3)} · ×${spread(paired('byHand'), 3)}`, 'median [min–max] of runs');
  }
  // The engine's row + intent written by hand (same tables and indexes): the pages' cost.
  const handMean = r.localWrite.map((x) => mean(x.byHand));
  row(`local write, mean of ${r.localWrite[0].raw.length} commits: the engine's row + intent by hand (no engine code), ms`, spread(handMean, 3), `ratio engine/by hand ${fmt(median(engMean.map((e, i) => e / handMean[i])), 2)}; by hand/raw ${fmt(median(handMean.map((h, i) => h / rawMean[i])), 2)}`);
  // Per commit, what the OPFS VFS did (--only writes counts it): write calls, KiB, ms inside
  // the writes and the flushes — the rest of a commit's mean is CPU (SQLite and engine code).
  if (r.localWrite[0].apiSteps) {
    const st = (k) => fmt(median(r.localWrite.map((x) => x.apiSteps[k] * 1000)), 1);
    row('local write, the package\'s path by step, mean per commit: ops to JSON text (JS) · parse into ops · write (row, intent, request record, commit) · answer text + JSON.parse · flush, µs', `${st('text')} · ${st('parse')} · ${st('write')} · ${st('answer')} · ${st('flush')}`, 'medians of runs; a fifth path of its own, interleaved with the others');
  }
  const io = r.localWrite.map((x) => x.io).filter((x) => x && x.raw && x.engine);
  if (io.length) {
    const per = (k) => {
      const c = r.localWrite[0].raw.length;
      const w = io.map((x) => x[k]).filter(Boolean);
      if (!w.length) return '–';
      const med = (f) => median(w.map(f));
      return `${fmt(med((v) => v.calls / c), 2)} · ${fmt(med((v) => v.bytes / c / 1024), 1)} · ${fmt(med((v) => v.ms / c), 3)} · ${fmt(med((v) => v.flushes / c), 2)} · ${fmt(med((v) => v.flushMs / c), 3)}`;
    };
    row('local write, per commit on OPFS: write calls · KiB written · ms in writes · flushes · ms in flushes (raw / by hand / engine / package\'s path)', `${per('raw')} / ${per('byHand')} / ${per('engine')} / ${per('api')}`, 'median of runs');
  }
  const rawRate = r.bulk.map((x) => (10000 / x.rawMs) * 1000);
  const engRate = r.bulk.map((x) => (10000 / x.engineMs) * 1000);
  const sealRate = r.bulk.map((x) => (x.sealed / x.sealMs) * 1000);
  row('bulk: 10,000 bare INSERTs in one transaction, rows/s', spread(rawRate), 'the floor');
  row('bulk: 10,000 engine mutations in one transaction, rows/s', spread(engRate), `ratio engine/raw ${fmt(median(engRate.map((e, i) => e / rawRate[i])), 2)}`);
  const apiRate = r.bulk.map((x) => (10000 / x.apiMs) * 1000);
  row('bulk: the same through the package\'s path (JS ops in, request id, JS rows out), rows/s', spread(apiRate), `ratio api/raw ${fmt(median(apiRate.map((e, i) => e / rawRate[i])), 2)}`);
  if (r.bulk[0].apiScatteredMs !== undefined) {
    const rawS = r.bulk.map((x) => (10000 / x.rawScatteredMs) * 1000);
    const apiS = r.bulk.map((x) => (10000 / x.apiScatteredMs) * 1000);
    row('bulk with ids in no order (random UUIDs): 10,000 bare INSERTs / the package\'s path, rows/s', `${spread(rawS)} / ${spread(apiS)}`,
      `ratio api/raw ${fmt(median(apiS.map((e, i) => e / rawS[i])), 2)}`);
  }
  if (r.bulk[0].apiSteps) {
    const step = (k) => fmt(median(r.bulk.map((x) => x.apiSteps[k])), 1);
    row('bulk through the package\'s path, by step: ops to JSON text (JS) · parse into ops · write (rows, intents, request record, commit) · answer text + JSON.parse · flush, ms',
      ['text', 'parse', 'write', 'answer', 'flush'].map(step).join(' · '), 'medians; a run of its own');
    if (r.bulk[0].apiScatteredSteps) {
      const stepS = (k) => fmt(median(r.bulk.map((x) => x.apiScatteredSteps[k])), 1);
      row('… with ids in no order, by the same steps, ms', ['text', 'parse', 'write', 'answer', 'flush'].map(stepS).join(' · '), 'medians; a run of its own');
    }
  }
  if (r.bulk[0].listMs !== undefined) {
    row('list 10,000 rows: the engine\'s read, ms', spread(r.bulk.map((x) => x.listMs)));
    row('list 10,000 rows: to JS values one call per key and value / one JSON text through JSON.parse, ms',
      `${spread(r.bulk.map((x) => x.listByValueMs))} / ${spread(r.bulk.map((x) => x.listByTextMs))}`, 'the package uses JSON.parse');
    row('the change event of 10,000 rows to JS: serde value by value / JSON text through JSON.parse, ms',
      `${spread(r.bulk.map((x) => x.eventByValueMs))} / ${spread(r.bulk.map((x) => x.eventByTextMs))}`, 'the package uses JSON.parse');
  }
  row('seal (encrypt pending intents), events/s', spread(sealRate));
  if (r.localWriteIdb) {
    const rawI = r.localWriteIdb.map((x) => median(x.raw));
    const engI = r.localWriteIdb.map((x) => median(x.engine));
    row('IndexedDB storage: local write, bare INSERT + flush p50 / p99, ms', `${spread(rawI, 3)} / ${spread(r.localWriteIdb.map((x) => pct(x.raw, 99)), 3)}`, 'the floor on IndexedDB');
    row('IndexedDB storage: local write, engine mutation + flush p50 / p99, ms', `${spread(engI, 3)} / ${spread(r.localWriteIdb.map((x) => pct(x.engine, 99)), 3)}`, `ratio engine/raw p50 ${fmt(median(engI.map((e, i) => e / rawI[i])), 2)}; vs OPFS engine p50 ×${fmt(median(engI) / median(engP50), 1)}`);
    if (r.localWriteIdb[0].api) {
      const rawM = r.localWriteIdb.map((x) => mean(x.raw));
      const apiM = r.localWriteIdb.map((x) => mean(x.api));
      row('IndexedDB storage: local write, mean of 200 commits: bare INSERT / the package\'s path, + flush, ms', `${spread(rawM, 3)} / ${spread(apiM, 3)}`, `ratio api/raw ${fmt(median(apiM.map((e, i) => e / rawM[i])), 2)}`);
    }
    const rawRateI = r.bulkIdb.map((x) => (10000 / x.rawMs) * 1000);
    const engRateI = r.bulkIdb.map((x) => (10000 / x.engineMs) * 1000);
    row('IndexedDB storage: bulk 10,000 bare INSERTs + flush, rows/s', spread(rawRateI));
    row('IndexedDB storage: bulk 10,000 engine mutations + flush, rows/s', spread(engRateI), `vs OPFS ×${fmt(median(engRateI) / median(engRate), 2)}`);
    row('IndexedDB storage: bulk through the package\'s path + flush, rows/s', spread(r.bulkIdb.map((x) => (10000 / x.apiMs) * 1000)));
  }
}
for (const st of r.status ?? []) {
  row(`status with ${st.queued.toLocaleString('en')} events queued for a relay, ms`, spread(st.ms, 2));
}
for (const [size, a] of Object.entries(r.aes ?? {})) {
  const mbs = (xs) => xs.map((x) => x / 1000);
  const w = mbs(a.wasm);
  const c = mbs(a.webcrypto);
  const c32 = mbs(a.webcrypto32);
  row(`AES-256-GCM ${size / 1024} KiB: wasm aes-gcm, MB/s`, spread(w, 1));
  row(`AES-256-GCM ${size / 1024} KiB: WebCrypto awaited one by one / 32 in flight, MB/s`, `${spread(c, 1)} / ${spread(c32, 1)}`,
    `ratio wasm/WebCrypto ${fmt(median(w) / median(c), 2)} / ${fmt(median(w) / median(c32), 2)}`);
}
if (r.restore || r.restoreOpened) {
  // (`--only package` runs the opener's two rows alone: no engine-alone restore to compare.)
  const rate = r.restore?.map((x) => (x.events / x.ms) * 1000) ?? [NaN];
  const t = r.restore?.[Math.floor(r.restore.length / 2)] ?? { ms: NaN };
  const total = t.ms;
  if (r.restore) {
    row(`restore: fresh device pulls + applies ${fmt(r.restore[0].events)} events, events/s`, spread(rate));
    const share = (ms) => `${fmt(ms)} ms (${fmt((ms / total) * 100)}%)`;
    row('restore: where the time goes (median run)', `HTTP ${share(t.timings.httpMs)}, JSON ${share(t.timings.parseMs)}, decrypt+validate ${share(t.timings.decryptMs)}, SQLite ${share(t.timings.applyMs)}`, `total ${fmt(total)} ms`);
  }
  if (r.rawLoad) {
    const floor = r.rawLoad.map((x) => (x.rows / x.ms) * 1000);
    row(`the floor: ${fmt(r.rawLoad[0].rows)} rows by bare INSERTs, a commit per 1000, rows/s`, spread(floor), `restore / floor ×${fmt(median(rate) / median(floor), 2)}`);
  }
  // What the OPFS VFS wrote (median run of each): SQLite writes each WAL frame as two calls,
  // its 24-byte header and its page, and on OPFS every call has a fixed cost.
  const writes = (label, ws, ms) => {
    if (!ws) return;
    const w = ws[Math.floor(ws.length / 2)];
    row(`${label}: OPFS write calls (of them < 512 bytes) · MB · ms inside them · flushes · ms inside them (middle run)`,
      `${fmt(w.calls)} (${fmt(w.small)}) · ${fmt(w.bytes / 1e6, 1)} · ${fmt(w.ms)} · ${fmt(w.flushes)} · ${fmt(w.flushMs)}`, `${fmt(((w.ms + w.flushMs) / ms) * 100)}% of the run`);
  };
  if (r.restoreListened) {
    const rateL = r.restoreListened.map((x) => (x.events / x.ms) * 1000);
    row('restore with the package\'s listeners (each page\'s change event and progress to JS, posted to the page), events/s', spread(rateL), `vs without ×${fmt(median(rateL) / median(rate), 2)}; ${fmt(r.restoreListenedTold)} events told per run`);
  }
  writes('restore (its own, before the close)', r.restoreWrites, total);
  if (r.restoreOpened) {
    const rateO = r.restoreOpened.map((x) => (x.events / x.ms) * 1000);
    row('restore with the opener worker (each page sent ahead fetched and decrypted in a second worker), events/s', spread(rateO), r.restore ? `vs without ×${fmt(median(rateO) / median(rate), 2)}` : '');
    const o = [...r.restoreOpened].sort((a, b) => a.ms - b.ms)[Math.floor(r.restoreOpened.length / 2)];
    const totalO = o.ms;
    const shareO = (ms) => `${fmt(ms)} ms (${fmt((ms / totalO) * 100)}%)`;
    row('restore with the opener worker: where the time goes (median run)', `HTTP + waiting for the opener ${shareO(o.timings.httpMs)}, JSON ${shareO(o.timings.parseMs)}, decrypt+validate ${shareO(o.timings.decryptMs)}, SQLite ${shareO(o.timings.applyMs)}`, `total ${fmt(totalO)} ms; ${fmt(o.timings.openedAhead)} events opened in the opener worker`);
    const rateP = r.restorePackage.map((x) => (x.events / x.ms) * 1000);
    row('restore as the package runs it (opener worker and listeners), events/s', spread(rateP), r.restore ? `vs the engine alone ×${fmt(median(rateP) / median(rate), 2)}` : '');
  }
  if (r.restore) {
    // The close's own OPFS writes (the checkpoint copies the WAL's pages into the database).
    const c = r.restore[Math.floor(r.restore.length / 2)].closeWrites;
    row('restore: closing the engine afterwards (SQLite checkpoints the WAL on close), ms', spread(r.restore.map((x) => x.closeMs)),
      c ? `its OPFS writes (middle run): ${fmt(c.calls)} calls · ${fmt(c.bytes / 1e6, 1)} MB · ${fmt(c.ms)} ms; ${fmt(c.flushes)} flushes · ${fmt(c.flushMs)} ms` : '');
  }
  if (r.reopen) {
    row('opening after a tab died with 100,000 rows (~42 MB) in the WAL: one read per frame / in chunks, ms',
      `${spread(r.reopen.map((x) => x.frameByFrame.ms))} / ${spread(r.reopen.map((x) => x.chunked.ms))}`,
      `reads sent down ${median(r.reopen.map((x) => x.frameByFrame.sent))} / ${median(r.reopen.map((x) => x.chunked.sent))}`);
  }
  if (r.rawLoad) writes('the floor', r.rawLoadWrites, r.rawLoad[Math.floor(r.rawLoad.length / 2)].ms);
  if (r.restoreIdb) {
    const rateI = r.restoreIdb.map((x) => (x.events / x.ms) * 1000);
    row(`IndexedDB storage: restore ${fmt(r.restoreIdb[0].events)} events + flush, events/s`, spread(rateI), `vs OPFS ×${fmt(median(rateI) / median(rate), 2)}`);
    row('IndexedDB storage: closing the engine afterwards, ms', spread(r.restoreIdb.map((x) => x.closeMs)));
  }
  if (r.syncLatency) row('sync latency, write on A → on B, sync() on both, ms (p50 / p90)', `${fmt(median(r.syncLatency), 1)} / ${fmt(pct(r.syncLatency, 90), 1)}`, `${r.syncLatency.length} samples`);
  if (r.pollLatency) row('sync latency with default polling (5 s) on B, ms', spread(r.pollLatency), `${r.pollLatency.length} samples`);
}
if (webkit) {
  const w = webkit.results;
  const rawI = w.localWriteIdb.map((x) => median(x.raw));
  const engI = w.localWriteIdb.map((x) => median(x.engine));
  row('WebKitGTK, IndexedDB storage: local write, bare INSERT + flush p50 / p99, ms', `${spread(rawI, 3)} / ${spread(w.localWriteIdb.map((x) => pct(x.raw, 99)), 3)}`, 'the floor there');
  row('WebKitGTK, IndexedDB storage: local write, engine mutation + flush p50 / p99, ms', `${spread(engI, 3)} / ${spread(w.localWriteIdb.map((x) => pct(x.engine, 99)), 3)}`, `ratio engine/raw p50 ${fmt(median(engI.map((e, i) => e / rawI[i])), 2)}`);
  row('WebKitGTK, IndexedDB storage: bulk 10,000 engine mutations + flush, rows/s', spread(w.bulkIdb.map((x) => (10000 / x.engineMs) * 1000)), `bare INSERTs: ${spread(w.bulkIdb.map((x) => (10000 / x.rawMs) * 1000))}`);
  row(`WebKitGTK, IndexedDB storage: restore ${fmt(w.restoreIdb[0].events)} events + flush, events/s`, spread(w.restoreIdb.map((x) => (x.events / x.ms) * 1000)));
}
const table = ['| measurement (headless Chromium, dedicated worker; OPFS unless it says IndexedDB; WebKitGTK rows: WebKitGTK 2.50 under Xvfb) | median [min–max] | note |', '|---|---|---|', ...rows].join('\n');
console.log(table);
writeFileSync(path.join(target, 'bench-results.json'), JSON.stringify({ when: new Date().toISOString(), runs, relay: 'release, loopback', results: r, webkit: webkit?.results }, null, 2));
console.error(`raw samples: ${path.join(target, 'bench-results.json')}`);
