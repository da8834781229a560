// The README's two quick starts, run exactly as written — the same commands and files, in a
// fresh directory instead of /tmp/todo-* — then built with Vite (the README starts Vite's dev
// server; a production build of the same files shows no configuration is missing) and used
// in Chromium: the phrase shown once, a todo added, still there after a reload.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { launch, pageErrors, serve } from './harness.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
let browser;
const dirs = [];

before(async () => {
  browser = await launch();
});
after(async () => {
  assert.deepEqual(pageErrors, [], 'no uncaught error in any page');
  await browser?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The first sh block after `heading`, with its last line (starting Vite's dev server) left out. */
function quickStart(heading, tmpName) {
  const from = readme.indexOf(`### ${heading}`);
  assert.ok(from >= 0, `README has "### ${heading}"`);
  const block = readme.slice(from).match(/```sh\n([\s\S]*?)```/)[1];
  const lines = block.trimEnd().split('\n');
  assert.match(lines.at(-1), /^npx vite --port \d+/, 'the block ends by starting Vite');
  const dir = mkdtempSync(path.join(os.tmpdir(), `${tmpName}-`));
  dirs.push(dir);
  return { script: lines.slice(0, -1).join('\n').replaceAll(`/tmp/${tmpName}`, dir), dir };
}

/** Runs the quick start, builds it with Vite, serves it and opens it in a fresh profile. */
async function runQuickStart(heading, tmpName) {
  const { script, dir } = quickStart(heading, tmpName);
  execFileSync('bash', ['-euo', 'pipefail', '-c', script], { cwd: root, stdio: 'inherit' });
  execFileSync('npx', ['vite', 'build'], { cwd: dir, stdio: 'inherit' });
  const server = await serve(path.join(dir, 'dist'));
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(`${heading}: ${e.message}`));
  const dialogs = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    d.accept();
  });
  await page.goto(server.url);
  return { server, context, page, dialogs };
}

async function addAndReload({ page, dialogs }) {
  await page.fill('input[name=title]', 'from the quick start');
  await page.click('button');
  await page.waitForSelector('li:text-is("from the quick start")', { timeout: 20000 });
  assert.equal(dialogs.length, 1);
  assert.match(dialogs[0], /recovery phrase/);
  assert.equal(dialogs[0].trim().split('\n').at(-1).trim().split(' ').length, 12, 'the phrase is shown once');
  await page.reload();
  await page.waitForSelector('li:text-is("from the quick start")', { timeout: 20000 });
  assert.equal(dialogs.length, 1, 'a reload reopens the engine with the phrase it keeps: no new phrase');
}

test('the README\'s quick start without a framework works as written', async () => {
  const run = await runQuickStart('Quick start without a framework', 'todo-plain');
  try {
    await addAndReload(run);
  } finally {
    await run.context.close();
    await run.server.close();
  }
});

test('the README\'s quick start with React works as written', async () => {
  const run = await runQuickStart('Quick start with React', 'todo-react');
  try {
    await addAndReload(run);
  } finally {
    await run.context.close();
    await run.server.close();
  }
});
