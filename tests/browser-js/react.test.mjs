// The React example (example-web/react: simplysync/react's hooks, typed by the schema) built
// from the packed tarball with Vite, served as the main command serves it (/react/), in real
// Chromium: two contexts are two devices on the real relay. A write on one re-renders the list
// on the other; the relay badge and the open count follow.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { buildReactExample, buildReactExampleDev, launch, pageErrors, RELAY, serve } from './harness.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let server;
let url;
let browser;

before(async () => {
  buildReactExample();
  server = spawn('node', [path.join(root, 'example-web/serve.mjs'), '--port', '0', '--relay', RELAY], { stdio: ['ignore', 'pipe', 'inherit'] });
  url = await new Promise((resolve, reject) => {
    server.stdout.on('data', (d) => {
      const m = String(d).match(/serving (http:\/\/\S+)/);
      if (m) resolve(`${m[1].replace(/\/$/, '')}/react/`);
    });
    server.on('exit', (code) => reject(new Error(`serve.mjs exited ${code}`)));
  });
  browser = await launch();
});

after(async () => {
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
  await browser?.close();
  server?.kill();
});

async function device() {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(url);
  return { context, page };
}

const items = (page) => page.locator('[data-testid=todos] li span');

test('the React example: a todo added on one device re-renders the list on another, and back', async () => {
  const a = await device();
  await a.page.getByRole('button', { name: 'Start fresh' }).click();
  const phrase = (await a.page.getByTestId('new-phrase').textContent()).trim();
  assert.equal(phrase.split(' ').length, 12);
  await a.page.getByRole('button', { name: 'I saved it' }).click();
  await a.page.getByLabel('new todo').fill('milk');
  await a.page.getByRole('button', { name: 'Add' }).click();
  await a.page.waitForFunction(() => document.querySelectorAll('[data-testid=todos] li').length === 1);
  assert.equal(await a.page.getByTestId('open-count').textContent(), '1 open');
  await a.page.waitForSelector('.badge[data-state=synced]', { timeout: 15000 });

  const b = await device();
  // useSyncProgress: pull progress reaches the page (the most events one report carried).
  await b.page.evaluate(() => {
    window.mostReceived = 0;
    new MutationObserver(() => {
      for (const e of document.querySelectorAll('[data-events-received]')) {
        window.mostReceived = Math.max(window.mostReceived, Number(e.dataset.eventsReceived));
      }
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-events-received'] });
  });
  await b.page.getByLabel('recovery phrase').fill(phrase);
  await b.page.getByRole('button', { name: 'Restore' }).click();
  await b.page.waitForFunction(() => document.querySelector('[data-testid=todos] li span')?.textContent === 'milk', null, { timeout: 15000 });

  // A's next write reaches B's list by itself (B's live channel, or its poll): no reload, no click.
  await a.page.getByLabel('new todo').fill('bread');
  await a.page.getByRole('button', { name: 'Add' }).click();
  await b.page.waitForFunction(() => document.querySelectorAll('[data-testid=todos] li').length === 2, null, { timeout: 15000 });
  assert.deepEqual(await items(b.page).allTextContents(), ['milk', 'bread']);
  assert.equal(await b.page.getByTestId('open-count').textContent(), '2 open');
  await b.page.waitForFunction(() => window.mostReceived >= 1, null, { timeout: 15000 });

  // B ticks milk off: A's list and count follow.
  await b.page.locator('[data-testid=todos] li').first().getByRole('checkbox').click();
  await a.page.waitForFunction(() => document.querySelector('[data-testid=todos] li')?.dataset.done === 'true', null, { timeout: 15000 });
  assert.equal(await a.page.getByTestId('open-count').textContent(), '1 open');

  // The recovery phrase is shown on request, from the engine (the page never stored it).
  await b.page.getByText('Recovery phrase').click();
  await b.page.getByRole('button', { name: 'Show' }).click();
  assert.equal((await b.page.getByTestId('phrase').textContent()).trim(), phrase);
  const stored = await b.page.evaluate(() => localStorage.length + sessionStorage.length);
  assert.equal(stored, 0);
  await b.page.screenshot({ path: path.join(root, 'test-results/example/react-device-b.png') });

  // A second tab of device B follows its engine; logging out in the first (once every change
  // reached the relay) closes it, and useStatus shows why instead of a list that stopped.
  const b2 = await b.context.newPage();
  b2.on('pageerror', (e) => pageErrors.push(e.message));
  await b2.goto(url);
  await b2.waitForFunction(() => document.querySelectorAll('[data-testid=todos] li').length === 2, null, { timeout: 15000 });
  await b.page.waitForSelector('.badge[data-state=synced]', { timeout: 15000 });
  await b.page.getByRole('button', { name: 'Log out on this device' }).click();
  await b2.waitForSelector('[data-testid=closed][data-code=CLOSED]', { timeout: 15000 });
  await b2.getByRole('button', { name: 'Continue' }).click();
  await b2.getByRole('button', { name: 'Start fresh' }).waitFor({ timeout: 15000 });
  await a.context.close();
  await b.context.close();
});

test('in React\'s development build (StrictMode mounts twice, snapshots checked) the hooks follow writes and React reports nothing', async () => {
  const dir = buildReactExampleDev(RELAY);
  const bundle = readdirSync(path.join(dir, 'assets')).filter((f) => f.endsWith('.js')).map((f) => readFileSync(path.join(dir, 'assets', f), 'utf8')).join('');
  assert.match(bundle, /getSnapshot should be cached/, 'the build carries React\'s development checks');
  const dev = await serve(dir);
  const context = await browser.newContext();
  const page = await context.newPage();
  const reports = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    if (!['error', 'warning'].includes(m.type()) || m.location().url.endsWith('/favicon.ico')) return;
    reports.push(`${m.text()} (${m.location().url})`);
  });
  await page.goto(`${dev.url}/`);
  await page.getByRole('button', { name: 'Start fresh' }).click();
  await page.getByRole('button', { name: 'I saved it' }).click();
  for (const title of ['milk', 'bread']) {
    await page.getByLabel('new todo').fill(title);
    await page.getByRole('button', { name: 'Add' }).click();
  }
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=todos] li').length === 2);
  await page.waitForFunction(() => document.querySelector('[data-testid=open-count]')?.textContent === '2 open');
  await page.locator('[data-testid=todos] li').first().getByRole('checkbox').click();
  await page.waitForFunction(() => document.querySelector('[data-testid=open-count]')?.textContent === '1 open');
  await page.waitForSelector('.badge[data-state=synced]', { timeout: 15000 });
  assert.deepEqual(await items(page).allTextContents(), ['milk', 'bread']);
  assert.deepEqual(reports, [], 'React (development build) reported no error or warning');
  await context.close();
  await dev.close();
});
