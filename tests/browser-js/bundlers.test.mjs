// The packed package under the bundlers apps use: Vite's dev server, webpack 5 and Next.js's
// App Router with Turbopack (Vite's production build is package.test.mjs's). Each app loads in
// Chromium, opens an engine on OPFS and syncs through the real relay.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { buildNextApp, buildWebpackApp, eventually, launch, openApp, pageErrors, RELAY, SCHEMA, serve, startViteDev } from './harness.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
  await browser?.close();
});

async function exercise(url) {
  const context = await browser.newContext();
  const page = await openApp(context, url);
  const result = await page.evaluate(async ({ relay, schema }) => {
    const secret = await window.simplysync.createMnemonic();
    const engine = await window.simplysync.createEngine({ secret, relays: [relay], schema, autoSync: false, dbName: 'bundled.db' });
    await engine.insert('todos', { id: 'a', title: 'bundled' });
    const report = await engine.sync();
    const out = { storage: (await engine.storage()).mode, rows: (await engine.list('todos')).length, pushed: report.relays[0].pushed };
    await engine.close();
    return out;
  }, { relay: RELAY, schema: SCHEMA });
  await context.close();
  return result;
}

test('Vite dev server, with no special configuration', async () => {
  const dev = await startViteDev();
  try {
    assert.deepEqual(await exercise(dev.url), { storage: 'opfs', rows: 1, pushed: 1 });
  } finally {
    await dev.close();
  }
});

test('webpack 5 production build', async () => {
  const server = await serve(await buildWebpackApp());
  try {
    assert.deepEqual(await exercise(server.url), { storage: 'opfs', rows: 1, pushed: 1 });
  } finally {
    await server.close();
  }
});

test('Next.js App Router (Turbopack, static export): a client component opens the engine and the hooks follow its writes', async () => {
  const server = await serve(buildNextApp());
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(`${server.url}/?relay=${encodeURIComponent(RELAY)}`);
    await page.getByRole('button', { name: 'Add' }).click({ timeout: 30000 });
    await page.getByRole('button', { name: 'Add' }).click();
    await eventually(async () => (await page.locator('[data-testid=todos] li').count()) === 2, 10000, 'useQuery follows the writes');
    await eventually(async () => (await page.getByTestId('relay').textContent()) === 'synced', 15000, 'useStatus shows the relay synced');
    assert.deepEqual(await page.locator('[data-testid=todos] li').allTextContents(), ['todo 1', 'todo 2']);
    assert.equal(await page.getByTestId('error').count(), 0);
  } finally {
    await context.close();
    await server.close();
  }
});
