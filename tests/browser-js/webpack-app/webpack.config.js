// webpack 5 needs nothing special for simplysync: the worker (`new Worker(new URL(...))`) and
// the wasm file (`new URL('simplysync_bg.wasm', import.meta.url)`) are picked up as they are.
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export default {
  mode: 'production',
  context: here,
  entry: './src/index.js',
  output: { path: path.join(here, 'dist'), filename: 'main.js', clean: true },
  performance: { hints: false },
};
