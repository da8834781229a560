// A small W3C WebDriver client (classic HTTP protocol) for the engines Playwright cannot drive on
// this machine: Firefox ESR through geckodriver, and WebKitGTK through WebKitWebDriver and our
// test browser (webkit/browser.py) on an Xvfb display. Each session has its own profile
// directory: two sessions are two devices; a refresh keeps the profile (durability).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const GECKODRIVER = process.env.GECKODRIVER ?? path.join(os.homedir(), '.cargo/bin/geckodriver');

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts Xvfb on a free display; resolves to `{display, stop}`. */
export function startXvfb() {
  return new Promise((resolve, reject) => {
    const x = spawn('Xvfb', ['-displayfd', '3', '-screen', '0', '1280x900x24', '-nolisten', 'tcp'], {
      stdio: ['ignore', 'ignore', 'ignore', 'pipe'],
    });
    x.on('error', reject);
    x.stdio[3].once('data', (d) => resolve({ display: `:${String(d).trim()}`, stop: () => x.kill() }));
  });
}

export class Driver {
  /** Starts geckodriver (`firefox`) or WebKitWebDriver (`webkit`, needs `display`). */
  static async start(kind, { display } = {}) {
    const port = await freePort();
    const [cmd, args] =
      kind === 'firefox'
        ? [GECKODRIVER, ['--port', String(port), '--host', '127.0.0.1']]
        : ['WebKitWebDriver', [`--port=${port}`, '--host=127.0.0.1']];
    const env = { ...process.env, ...(display ? { DISPLAY: display } : {}) };
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4000)));
    const base = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 200; i++) {
      try {
        if ((await fetch(`${base}/status`)).ok) return new Driver(kind, base, child);
      } catch {
        // not listening yet
      }
      if (child.exitCode !== null) throw new Error(`${cmd} exited: ${stderr}`);
      await sleep(50);
    }
    child.kill();
    throw new Error(`${cmd} did not start: ${stderr}`);
  }

  constructor(kind, base, child) {
    this.kind = kind;
    this.base = base;
    this.child = child;
  }

  /** A new session on a fresh profile directory (a new device), or on `profile` (the same device, its browser restarted). */
  async session({
    safariFeatures = true,
    privateBrowsing = false,
    profile = this.newProfile(),
  } = {}) {
    const alwaysMatch =
      this.kind === 'firefox'
        ? {
            browserName: 'firefox',
            'moz:firefoxOptions': {
              binary: '/usr/bin/firefox-esr',
              args: ['-headless', '-profile', profile],
              prefs: privateBrowsing ? { 'browser.privatebrowsing.autostart': true } : {},
            },
          }
        : {
            'webkitgtk:browserOptions': {
              binary: path.join(here, 'webkit/browser.py'),
              args: ['--automation', `--profile=${profile}`, ...(safariFeatures ? ['--safari-features'] : [])],
            },
          };
    const res = await fetch(`${this.base}/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ capabilities: { alwaysMatch } }),
    });
    const body = await res.json();
    if (!res.ok) throw new Error(`new session: ${JSON.stringify(body)}`);
    const session = new Session(`${this.base}/session/${body.value.sessionId}`);
    session.profile = profile; // a later session on it is the same browser profile, restarted
    await session.cmd('POST', '/timeouts', { script: 60000, pageLoad: 60000 });
    return session;
  }

  /**
   * A fresh profile directory. It belongs to this driver and is removed by its `stop()`: a
   * later session may run on it (the same device, its browser restarted) until then.
   */
  newProfile() {
    const dir = mkdtempSync(path.join(os.tmpdir(), `simplysync-${this.kind}-`));
    (this.profiles ??= []).push(dir);
    return dir;
  }

  stop() {
    this.child.kill();
    for (const dir of this.profiles ?? []) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch (e) {
        console.error(`could not remove ${dir}: ${e.message}`); // the other drivers still stop
      }
    }
  }
}

export class Session {
  constructor(url) {
    this.url = url;
  }

  async cmd(method, suffix, body) {
    const res = await fetch(`${this.url}${suffix}`, {
      method,
      headers: body ? { 'content-type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const out = await res.json();
    if (!res.ok) throw new Error(`${method} ${suffix}: ${JSON.stringify(out.value ?? out).slice(0, 500)}`);
    return out.value;
  }

  navigate(url) {
    return this.cmd('POST', '/url', { url });
  }

  refresh() {
    return this.cmd('POST', '/refresh', {});
  }

  /**
   * Runs `fn(...args)` (an async function, as source) in the page; resolves to its value or
   * rejects with `{message, code}` of what it threw.
   */
  async run(fn, ...args) {
    const script = `const done = arguments[arguments.length - 1];
      Promise.resolve().then(() => (${fn})(...arguments[0]))
        .then((value) => done({ ok: true, value: value === undefined ? null : value }),
              (e) => done({ ok: false, error: { message: String(e && e.message || e), code: e && e.code || null } }));`;
    const out = await this.cmd('POST', '/execute/async', { script, args: [args] });
    if (!out.ok) throw Object.assign(new Error(out.error.message), { code: out.error.code });
    return out.value;
  }

  /** Polls `fn` in the page until it returns something truthy. */
  async until(fn, what, ms = 20000, ...args) {
    const end = Date.now() + ms;
    for (;;) {
      const v = await this.run(fn, ...args).catch(() => null);
      if (v) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(150);
    }
  }

  /** Opens a new tab in this session (same profile) and switches to it; returns its handle. */
  async newTab() {
    const { handle } = await this.cmd('POST', '/window/new', { type: 'tab' });
    await this.switchTo(handle);
    return handle;
  }

  async handle() {
    return this.cmd('GET', '/window');
  }

  switchTo(handle) {
    return this.cmd('POST', '/window', { handle });
  }

  async quit() {
    await fetch(this.url, { method: 'DELETE' }).catch(() => {});
  }
}
