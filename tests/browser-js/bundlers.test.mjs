// The packed package under the bundlers apps use: Vite's dev server and webpack 5 (Vite's
// production build is package.test.mjs's). Each app loads in Chromium, opens an engine on OPFS
// and syncs through the real relay.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { buildWebpackApp, launch, openApp, pageErrors, RELAY, SCHEMA, serve, startViteDev } from './harness.mjs';

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
