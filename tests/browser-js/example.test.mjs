// End to end: the example todo page (example-web/, on the built package) in real Chromium.
// Isolated browser contexts are separate devices; the relay is the real one scripts/test.sh
// starts. Screenshots of the main states go to test-results/example/.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { eventually, launch, RELAY } from './harness.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const shots = path.join(root, 'test-results/example');
mkdirSync(shots, { recursive: true });

/** A small RGB PNG (a colour grid), so the attachment is a real image with known size. */
function png(width, height) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32(Buffer.concat([Buffer.from(type), data])));
    return Buffer.concat([len, Buffer.from(type), data, crc]);
  };
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = [0];
    for (let x = 0; x < width; x++) row.push((x * 255) / width, (y * 255) / height, 180);
    rows.push(Buffer.from(row));
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}
const PNG = png(160, 90);

let server;
let url;
let browser;

before(async () => {
  server = spawn('node', [path.join(root, 'example-web/serve.mjs'), '--port', '0', '--relay', RELAY], { stdio: ['ignore', 'pipe', 'inherit'] });
  url = await new Promise((resolve, reject) => {
    server.stdout.on('data', (d) => {
      const m = String(d).match(/serving (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`serve.mjs exited ${code}`)));
  });
  browser = await launch();
});

after(async () => {
  await browser?.close();
  server?.kill();
});

const pageErrors = [];

async function device(name) {
  const context = await browser.newContext({ viewport: { width: 820, height: 640 } });
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(`${name}: ${e.message}`));
  await page.goto(url);
  await page.waitForSelector('body[data-ready]', { timeout: 20000 });
  return { context, page };
}

/** A new device's first run: create a phrase, write it down, confirm. */
async function startFresh(page) {
  assert.equal(await page.getAttribute('body', 'data-ready'), 'welcome');
  await page.click('#start-fresh');
  await page.waitForSelector('#new-phrase-panel:not([hidden])');
  const phrase = (await page.textContent('#new-phrase')).trim();
  assert.equal(await page.isDisabled('#phrase-continue'), true, 'Continue waits for "I saved it"');
  await shot(page, '1-write-it-down');
  await page.check('#saved-it');
  await page.click('#phrase-continue');
  await page.waitForSelector('body[data-ready=app]');
  return phrase;
}

const titles = (page) => page.$$eval('#todos li .text', (els) => els.map((e) => e.textContent));
const shot = (page, name) => page.screenshot({ path: path.join(shots, `${name}.png`) });

async function addTodo(page, title, image) {
  await page.fill('#title', title);
  if (image) await page.setInputFiles('#image', { name: 'dot.png', mimeType: 'image/png', buffer: image });
  await page.click('#new-todo button[type=submit]');
  await page.waitForSelector(`#todos li .text:text-is("${title}")`);
}

async function phraseOf(page) {
  await page.click('#menu summary');
  await page.click('#show-key');
  await page.waitForSelector('#key-panel:not([hidden])');
  const phrase = (await page.textContent('#phrase')).trim();
  assert.equal(phrase.split(' ').length, 12, 'a new device gets a 12-word phrase');
  return phrase;
}

/** Restores a phrase: from the welcome screen, or (with data here) from the menu. */
async function usePhrase(page, phrase) {
  if ((await page.getAttribute('body', 'data-ready')) === 'welcome') await page.click('#have-phrase');
  else {
    await page.click('#menu summary');
    await page.click('#use-phrase');
  }
  await page.fill('#phrase-input', phrase);
  await page.click('#phrase-form button[type=submit]');
}

test('two devices, offline edits, a restored third device with the attachment, and two tabs', async () => {
  // Device A: first run creates an identity; the user writes the phrase down.
  const a = await device('A');
  await shot(a.page, '0-welcome');
  const written = await startFresh(a.page);
  assert.equal(written.split(' ').length, 12);
  assert.equal(await a.page.evaluate(() => localStorage.length), 0, 'the page keeps nothing in localStorage');
  await addTodo(a.page, 'Buy oat milk', PNG);
  await addTodo(a.page, 'Call the plumber');
  await a.page.waitForSelector('#todos img[src^="blob:"]');
  const phrase = await phraseOf(a.page);
  assert.equal(phrase, written);
  await shot(a.page, '1b-recovery-key');
  await a.page.click('#hide-key');
  await eventually(async () => (await a.page.textContent('#relays')).includes('synced'), 15000, 'A synced');

  // Device B: a bad phrase is explained, then the real one restores A's list.
  const b = await device('B');
  await usePhrase(b.page, phrase.replace(/\S+$/, 'zebrah'));
  await b.page.waitForSelector('#message:not([hidden])');
  assert.match(await b.page.textContent('#message'), /not valid: word 12 .*zebrah/);
  await shot(b.page, '2-invalid-phrase');
  await usePhrase(b.page, phrase);
  await eventually(async () => (await titles(b.page)).length === 2, 15000, 'B restored A\'s todos');

  // Restoring another phrase over B's data asks first; cancelling changes nothing.
  await usePhrase(b.page, 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about');
  await b.page.waitForSelector('#confirm-panel:not([hidden])');
  await shot(b.page, '2b-confirm-restore');
  await b.page.click('#confirm-no');
  assert.equal((await titles(b.page)).length, 2, 'nothing was replaced');

  // A todo added on A appears on B by itself: B's relay shows a live channel, so its poll
  // timer is a one-minute safety net and only the live notice can bring the todo this soon.
  await eventually(async () => (await b.page.$('#relays .relay[data-live=live]')) !== null, 15000, 'B is live');
  assert.match(await b.page.textContent('#relays'), /· live/);
  // B is editing a title when A's new todo arrives: the edit in progress is left alone.
  await b.page.click('#todos li:has(.text:text-is("Buy oat milk")) .text');
  await b.page.keyboard.press('End');
  await b.page.keyboard.type(' and bread');
  await addTodo(a.page, 'Water the plants');
  await eventually(async () => (await titles(b.page)).includes('Water the plants'), 15000, 'A\'s new todo on B, live');
  await shot(b.page, '2c-live');
  const editing = await b.page.evaluate(() => ({ text: document.activeElement?.textContent, editable: document.activeElement?.contentEditable }));
  assert.deepEqual(editing, { text: 'Buy oat milk and bread', editable: 'true' }, 'the edit in progress survived the change');
  await b.page.keyboard.press('Enter');
  await eventually(async () => (await titles(a.page)).includes('Buy oat milk and bread'), 15000, 'B\'s edit on A');

  // B goes offline, edits, and its edits arrive when it is back.
  await b.context.setOffline(true);
  await addTodo(b.page, 'Offline idea');
  await b.page.click('#todos li:has(.text:text-is("Call the plumber")) input[type=checkbox]');
  await eventually(async () => (await b.page.textContent('#relays')).includes('offline'), 15000, 'B shows offline');
  assert.match(await b.page.textContent('#message'), /unreachable/);
  await shot(b.page, '3-offline');
  await a.page.click('#sync-now');
  assert.ok(!(await titles(a.page)).includes('Offline idea'), 'nothing crosses while B is offline');
  await b.context.setOffline(false); // 'online' makes B sync
  await eventually(async () => {
    await a.page.click('#sync-now');
    return (await titles(a.page)).includes('Offline idea');
  }, 20000, 'B\'s offline edits on A');
  await eventually(
    () => a.page.$eval('#todos li:has(.text:text-is("Call the plumber")) input', (el) => el.checked),
    10000,
    'the completion made offline',
  );
  await shot(a.page, '4-synced');

  // Device C restores from the phrase: same list, attachment included (loaded lazily).
  const c = await device('C');
  await c.page.evaluate(() => {
    window.progressShown = false;
    const bar = document.getElementById('progress');
    // Shown if visible now, or if a change found it visible (`hidden` absent before it): the
    // records tell even when showing and hiding both ran before this callback (a loaded machine).
    new MutationObserver((records) => {
      if (!bar.hidden || records.some((r) => r.oldValue === null)) window.progressShown = true;
    }).observe(bar, { attributes: true, attributeFilter: ['hidden'], attributeOldValue: true });
  });
  await usePhrase(c.page, phrase);
  await eventually(async () => (await titles(c.page)).length === 4, 20000, 'C restored');
  assert.deepEqual((await titles(c.page)).sort(), (await titles(a.page)).sort());
  assert.equal(await c.page.evaluate(() => window.progressShown), true, 'the restore showed its progress bar');
  await c.page.waitForSelector('#todos img[src^="blob:"]', { timeout: 15000 });
  const size = await c.page.$eval('#todos img', (img) => [img.naturalWidth, img.naturalHeight]);
  assert.deepEqual(size, [160, 90], 'the encrypted attachment decrypted to the original image');
  await eventually(async () => (await c.page.textContent('#relays')).includes('% of quota'), 15000, 'quota shown');
  await shot(c.page, '5-restored');

  // A reloads: the engine reopens with the secret it keeps, and the page's controls wait for
  // it — a todo typed and added right after the load is not lost.
  await a.page.reload();
  await a.page.fill('#title', 'Typed while starting');
  await a.page.click('#new-todo button[type=submit]');
  await a.page.waitForSelector('#todos li .text:text-is("Typed while starting")', { timeout: 20000 });

  // Two tabs of device A: both read and write.
  const tab2 = await a.context.newPage();
  tab2.on('pageerror', (e) => pageErrors.push(`tab 2: ${e.message}`));
  await tab2.goto(url);
  await tab2.waitForSelector('body[data-ready=app]', { timeout: 20000 });
  assert.match(await tab2.textContent('#identity'), /via another tab/);
  await eventually(async () => (await titles(tab2)).length === 5, 10000, 'tab 2 reads');
  await addTodo(tab2, 'From the second tab');
  await eventually(async () => (await titles(a.page)).includes('From the second tab'), 10000, 'tab 1 sees tab 2\'s write');
  await a.page.click('#todos li:has(.text:text-is("Water the plants")) .delete');
  await eventually(async () => !(await titles(tab2)).includes('Water the plants'), 10000, 'tab 2 sees tab 1\'s delete');
  await shot(tab2, '6-second-tab');

  // A newer version of the app opens in a third tab (its `upgrade` word, as the package
  // sends it): tab 2 says so and offers a reload instead of a list that stopped.
  const newerTab = await a.context.newPage();
  await newerTab.goto(url);
  await newerTab.evaluate(() => new BroadcastChannel('simplysync:todos.db').postMessage({ type: 'upgrade', from: 'newer', schemaVersion: 99 }));
  await tab2.waitForSelector('body[data-ready=outdated]', { timeout: 15000 });
  assert.equal(await tab2.isVisible('#outdated-panel'), true);
  await shot(tab2, '6b-outdated');
  await newerTab.close();
  // Both tabs were told; each reloads, as the user would, and opens again.
  await a.page.reload();
  await a.page.waitForSelector('body[data-ready=app]', { timeout: 20000 });
  await tab2.click('#reload');
  await tab2.waitForSelector('body[data-ready=app]', { timeout: 20000 });

  // Tab 1 logs out: tab 2 says why and shows the welcome screen, not a list that stopped.
  await a.page.click('#menu summary');
  await a.page.click('#log-out');
  await a.page.waitForSelector('#confirm-panel:not([hidden])');
  await a.page.click('#confirm-yes');
  await tab2.waitForSelector('body[data-ready=welcome]', { timeout: 15000 });
  assert.match(await tab2.textContent('#message'), /logged out on this device \(in another tab\)/);

  // Log out on device C: its data and its copy of the phrase go; it starts at the welcome again.
  await c.page.click('#menu summary');
  await c.page.click('#log-out');
  await c.page.waitForSelector('#confirm-panel:not([hidden])');
  await c.page.click('#confirm-yes');
  await c.page.waitForSelector('body[data-ready=welcome]');
  await c.page.reload();
  await c.page.waitForSelector('body[data-ready=welcome]');
  assert.equal(await c.page.evaluate(() => window.engine?.ownerId ?? null), null);
  await shot(c.page, '7-logged-out');

  for (const d of [a, b, c]) await d.context.close();
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
});
