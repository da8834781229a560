// Live sync latency, end to end: the packed npm package in a Vite app, two browser contexts
// (devices A and B, one owner) in headless Chromium, a release relay on loopback. Each sample:
// A inserts a row (autoSync pushes it), B — idle, default options — sees it through its live
// channel; the time is from just before A's insert to B's onChange having the row readable.
// Then again with 100 other owners each holding a long-poll on the same relay.
//   node bench/live.mjs [--samples 40] [--idle 100] [--skip-build]
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const { buildApp, launch, openApp, serve, SCHEMA, eventually } = await import(path.join(root, 'tests/browser-js/harness.mjs'));
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const samples = Number(arg('samples', 40));
const idleCount = Number(arg('idle', 100));
const target = process.env.CARGO_TARGET_DIR ?? path.join(root, 'target');
const env = { ...process.env, PATH: `${os.homedir()}/.cargo/bin:${process.env.PATH}` };
const sh = (cmd, args, extra = {}) => execFileSync(cmd, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'], ...extra }).toString();

if (!process.argv.includes('--skip-build')) {
  console.error('building the relay and the CLI (release) and the package…');
  sh('cargo', ['build', '--release', '--locked', '-p', 'simplysync-relay']);
  sh('cargo', ['build', '--release', '--locked', '--bin', 'simplysync']);
  sh('bash', ['scripts/build-pkg.sh']);
}
const cli = path.join(target, 'release/simplysync');

const dir = mkdtempSync(path.join(os.tmpdir(), 'simplysync-live-bench-'));
const relayProc = spawn(path.join(target, 'release/simplysync-relay'), [], {
  env: { ...env, PORT: '0', DB_PATH: path.join(dir, 'relay.sqlite'), RUST_LOG: 'warn', COMPACTION_INTERVAL_MS: '0', REGISTRATIONS_PER_MINUTE: '100000' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const relay = await new Promise((resolve) => relayProc.stdout.on('data', (d) => {
  const m = String(d).match(/listening on (http:\/\/\S+)/);
  if (m) resolve(m[1]);
}));

/** 100 other owners, each registered with one pushed row and then holding a long-poll. */
async function idleWaiters(n) {
  const schemaFile = path.join(dir, 'schema.json');
  writeFileSync(schemaFile, JSON.stringify(SCHEMA));
  const owners = [];
  for (let i = 0; i < n; i++) {
    const secret = `sf1_${randomBytes(32).toString('base64url')}`;
    const db = path.join(dir, `idle-${i}.sqlite`);
    const opts = { env: { ...env, SIMPLYSYNC_SECRET: secret } };
    sh(cli, ['insert', '--db', db, '--schema', schemaFile, 'todos', '{"id":"x","title":"idle"}'], opts);
    sh(cli, ['sync', '--once', '--db', db, '--relay', relay], opts);
    const id = JSON.parse(sh(cli, ['identity'], opts));
    owners.push(id);
  }
  const controller = new AbortController();
  let open = 0;
  let answered = 0;
  const loops = owners.map(async ({ ownerId, relayAuth }) => {
    let after = 0; // the first wait answers at once with the owner's head; later ones hold
    while (!controller.signal.aborted) {
      open++;
      try {
        const r = await fetch(`${relay}/v1/events/wait?ownerId=${ownerId}&after=${after}&timeoutMs=25000`, {
          headers: { Authorization: `Bearer ${relayAuth}` },
          signal: controller.signal,
        });
        if (r.status === 200) after = (await r.json()).headSeq;
        else await r.arrayBuffer();
        answered++;
      } catch {
        // aborted at the end
      } finally {
        open--;
      }
    }
  });
  await eventually(() => open === n, 10000, `${n} idle waits open`);
  answered = 0;
  return { open: () => open, answered: () => answered, stop: async () => { controller.abort(); await Promise.all(loops); } };
}

const server = await serve(buildApp());
const browser = await launch();
const sorted = (xs) => [...xs].sort((a, b) => a - b);
const pct = (xs, p) => sorted(xs)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

async function run(label) {
  const secret = `sf1_${randomBytes(32).toString('base64url')}`;
  const device = async () => {
    const context = await browser.newContext();
    const page = await openApp(context, server.url);
    await page.evaluate(async (o) => {
      window.engine = await window.simplysync.createEngine(o);
      window.seen = (id) => new Promise((resolve) => {
        let done = false;
        const check = async () => {
          if (!done && (await window.engine.get('todos', id))) {
            done = true;
            un();
            resolve(Date.now());
          }
        };
        const un = window.engine.subscribe(['todos'], () => check());
        check();
      });
    }, { secret, relays: [relay], schema: SCHEMA, dbName: `live-${label}` });
    return { context, page };
  };
  const a = await device();
  // The relay learns the owner from its first push; until then waits cannot be authenticated.
  await a.page.evaluate(() => window.engine.insert('todos', { id: 'seed', title: 'seed', done: false }));
  const b = await device();
  const live = (p) => p.evaluate(async () => (await window.engine.getRelayStatuses())[0].live.state);
  await eventually(async () => (await live(a.page)) === 'live' && (await live(b.page)) === 'live', 20000, 'both live');
  const out = [];
  for (let i = 0; i < samples + 3; i++) {
    const id = `${label}-${i}`;
    await b.page.evaluate((id) => { window.pending = window.seen(id); }, id);
    const t0 = await a.page.evaluate(async (id) => {
      const t = Date.now();
      await window.engine.insert('todos', { id, title: 'live', done: false });
      return t;
    }, id);
    const t1 = await b.page.evaluate(() => window.pending);
    if (i >= 3) out.push(t1 - t0); // the first three warm up connections and caches
    await new Promise((r) => setTimeout(r, 300 + Math.random() * 400)); // B idles between writes
  }
  await a.context.close();
  await b.context.close();
  return out;
}

const results = {};
try {
  results.alone = await run('alone');
  const idle = await idleWaiters(idleCount);
  results.crowd = await run('crowd');
  results.idleOpen = idle.open();
  results.idleAnswered = idle.answered(); // waits that timed out (25 s) and were asked again
  await idle.stop();
} finally {
  await browser.close();
  await server.close();
  relayProc.kill();
}
const line = (what, xs, note) => `| ${what} | ${pct(xs, 50)} / ${pct(xs, 90)} / ${Math.max(...xs)} | ${xs.length} samples${note} |`;
console.log('| write on A → visible on idle B (live sync, loopback) | p50 / p90 / max, ms | |');
console.log('|---|---|---|');
console.log(line('one owner on the relay', results.alone, ''));
console.log(line(`with ${idleCount} other devices waiting on the relay`, results.crowd, ` (${results.idleOpen} idle waits open at the end; ${results.idleAnswered} timed out and were asked again)`));
console.error(JSON.stringify(results));
