// Shared by the browser tests: build the Vite app against the packed tarball, serve it, and
// launch Debian's Chromium through playwright-core.
import { execFileSync } from 'node:child_process';
import { copyFileSync, createReadStream, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
export const RELAY = process.env.SIMPLYSYNC_TEST_RELAY ?? 'http://127.0.0.1:18787';

/** Installs the packed tarball into a probe app directory. */
export function installPackage(app) {
  const pkgDir = path.join(root, 'pkg');
  const tgz = readdirSync(pkgDir).find((f) => f.endsWith('.tgz'));
  if (!tgz) throw new Error('pkg/*.tgz missing: run scripts/build-pkg.sh first');
  execFileSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--silent', path.join(pkgDir, tgz)], { cwd: app, stdio: 'inherit' });
}

/** Installs the packed tarball into the Vite probe app and builds it (once per run). */
export function buildApp() {
  const app = path.join(here, 'app');
  installPackage(app);
  execFileSync(path.join(here, 'node_modules/.bin/vite'), ['build'], { cwd: app, stdio: 'inherit' });
  return path.join(app, 'dist');
}

/**
 * Builds the React example (example-web/react) against the packed tarball, after checking its
 * types with its own strict tsc: what `bash scripts/run.sh` serves at /react/.
 */
export function buildReactExample() {
  const app = path.join(root, 'example-web/react');
  if (!existsSync(path.join(app, 'node_modules/react'))) {
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--silent'], { cwd: app, stdio: 'inherit' });
  }
  installPackage(app);
  execFileSync(path.join(app, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: app, stdio: 'inherit' });
  execFileSync(path.join(app, 'node_modules/.bin/vite'), ['build'], { cwd: app, stdio: 'inherit' });
  return path.join(app, 'dist');
}

/**
 * The React example again as React's development build (StrictMode mounts every component twice
 * and React checks hooks' snapshots), in a fresh directory with a /config.json naming `relay`.
 * Call after {@link buildReactExample} (which installs the package).
 */
export function buildReactExampleDev(relay) {
  const app = path.join(root, 'example-web/react');
  const out = mkdtempSync(path.join(os.tmpdir(), 'simplysync-react-dev-'));
  execFileSync(path.join(app, 'node_modules/.bin/vite'), ['build', '--outDir', out, '--emptyOutDir'], {
    cwd: app,
    stdio: 'inherit',
    env: { ...process.env, NODE_ENV: 'development' },
  });
  writeFileSync(path.join(out, 'config.json'), JSON.stringify({ relays: [relay] }));
  return out;
}

/** Installs the packed tarball into the webpack probe app and bundles it with webpack 5. */
export async function buildWebpackApp() {
  const app = path.join(here, 'webpack-app');
  installPackage(app);
  const { default: webpack } = await import('webpack');
  const { default: config } = await import(path.join(app, 'webpack.config.js'));
  const stats = await new Promise((resolve, reject) => webpack(config, (err, s) => (err ? reject(err) : resolve(s))));
  if (stats.hasErrors()) throw new Error(stats.toString({ all: false, errors: true }));
  copyFileSync(path.join(app, 'index.html'), path.join(app, 'dist/index.html'));
  return path.join(app, 'dist');
}

/**
 * Installs the packed tarball into the Next.js probe app (App Router, `next-app/`) and builds
 * it as a static export with Next's default bundler (Turbopack); returns its `out/` directory.
 */
export function buildNextApp() {
  const app = path.join(here, 'next-app');
  installPackage(app);
  execFileSync(path.join(app, 'node_modules/.bin/next'), ['build'], {
    cwd: app,
    stdio: 'inherit',
    // (Vite's dev server, started earlier in this process, sets NODE_ENV to development.)
    env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', NODE_ENV: 'production' },
  });
  return path.join(app, 'out');
}

/** Starts Vite's dev server on the probe app. */
export async function startViteDev() {
  const app = path.join(here, 'app');
  installPackage(app);
  const { createServer } = await import('vite');
  const server = await createServer({ root: app, configFile: path.join(app, 'vite.config.js'), server: { port: 0, host: '127.0.0.1' } });
  await server.listen();
  const { port } = server.httpServer.address();
  return { url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.json': 'application/json' };

/** Serves a directory on a free loopback port. */
export async function serve(dir, { headers = {} } = {}) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    let file = path.join(dir, decodeURIComponent(url.pathname));
    if (!file.startsWith(dir)) return res.writeHead(403).end();
    if (existsSync(file) && statSync(file).isDirectory()) file = path.join(file, 'index.html');
    if (!existsSync(file)) return res.writeHead(404).end();
    res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream', 'Cache-Control': 'no-store', ...headers });
    createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

const LAUNCH = {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
};

/** Removes a closed browser's profile directory; a failure to is only reported. */
function removeProfile(dir) {
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  } catch (e) {
    console.error(`could not remove the profile ${dir}: ${e.message}`);
  }
}

/**
 * Headless Chromium as users run it: each `newContext()` is a browser of its own on a fresh
 * profile directory, so OPFS files are on disk (Playwright's own `browser.newContext()` is off
 * the record, OPFS kept in memory). `close()` closes them all and removes their profiles.
 */
export async function launch() {
  const opened = [];
  return {
    async newContext(options = {}) {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'simplysync-profile-'));
      let context;
      try {
        context = await chromium.launchPersistentContext(dir, { ...LAUNCH, ...options });
      } catch (e) {
        removeProfile(dir);
        throw e;
      }
      context.profileDir = dir;
      opened.push({ context, dir });
      return context;
    },
    // (Not on each context's 'close' event: the browser still writes its profile then.)
    async close() {
      for (const { context, dir } of opened.splice(0)) {
        await context.close().catch(() => {});
        removeProfile(dir);
      }
    },
  };
}

/** Headless Chromium on the profile directory `dir`, as users run it: OPFS files on disk. */
export async function launchOnDisk(dir) {
  return chromium.launchPersistentContext(dir, LAUNCH);
}

/** Uncaught errors of every page opened with {@link openApp} (a test file checks it is empty). */
export const pageErrors = [];

/** Opens the probe app in `context` and waits until the package loaded. */
export async function openApp(context, url) {
  const page = await context.newPage();
  page.on('pageerror', (e) => {
    console.error('page error:', e.message);
    pageErrors.push(e.message);
  });
  await page.goto(url);
  await page.waitForFunction(() => window.simplysync);
  return page;
}

export const SCHEMA = {
  schemaVersion: 1,
  tables: [{ name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }] }],
};

/**
 * The page's engine worker: the newest one — a closed engine's worker can still be listed while
 * it shuts down, and evaluating in it never returns — and never the opener worker nor the
 * worker that checks secrets.
 */
export async function engineWorker(page) {
  const workers = page.workers().filter((w) => /\/worker[-.][^/]*$/.test(new URL(w.url()).pathname));
  // The same script also checks secrets for the page (protocol.js), in a worker of that name.
  // (A worker shutting down may never answer: a second without an answer is no engine worker.)
  const nameOf = (w) => Promise.race([w.evaluate(() => self.name).catch(() => null), new Promise((r) => setTimeout(() => r(null), 1000))]);
  const names = await Promise.all(workers.map(nameOf));
  return workers.filter((_, i) => names[i] === 'simplysync').at(-1);
}

/** Polls `fn` until it returns truthy (or fails after `ms`). */
export async function eventually(fn, ms = 10000, what = 'condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
