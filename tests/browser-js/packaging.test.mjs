// The packed package as npm publishes it: publint finds nothing to fix, Are the Types Wrong?
// finds every export typed for ESM consumers (the package is ESM-only by design: CommonJS
// `require` is not offered), and the tarball carries its licence and README.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '../../pkg');
const bin = (name) => path.join(here, 'node_modules/.bin', name);

/** Packs `pkg/` into a temporary directory (never touching `pkg/*.tgz`, which the other suites install). */
function packed() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'simplysync-pack-'));
  const [info] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkg, encoding: 'utf8' }));
  return { dir, info, tgz: path.join(dir, info.filename) };
}

test('publint finds nothing to fix in the package', () => {
  const run = spawnSync(bin('publint'), ['--strict', pkg], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stdout + run.stderr);
  assert.match(run.stdout, /All good/);
});

test('Are the Types Wrong? finds every entry point typed for ESM and bundlers', () => {
  const { dir, tgz } = packed();
  try {
    const run = spawnSync(bin('attw'), [tgz, '--profile', 'esm-only', '--format', 'json'], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stdout.slice(0, 4000) + run.stderr);
    const report = JSON.parse(run.stdout);
    const entries = Object.keys(report.analysis.entrypoints).sort();
    assert.deepEqual(entries, ['.', './package.json', './react', './worker.js']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the tarball carries the licence, the README and the worker\'s types', () => {
  const { dir, info } = packed();
  try {
    const files = info.files.map((f) => f.path);
    for (const f of ['LICENSE', 'README.md', 'worker.d.ts', 'index.d.ts', 'react.d.ts', 'simplysync_bg.wasm']) {
      assert.ok(files.includes(f), `${f} in ${info.filename}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('simplysync/react is a client module for React Server Components (Next.js App Router)', () => {
  assert.match(readFileSync(path.join(pkg, 'react.js'), 'utf8'), /^["']use client["'];/);
});
