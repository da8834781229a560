// Serves the example page and the built npm package (pkg/ at /pkg/), the React example's build
// (example-web/react/dist at /react/) and /config.json with the relay URL. No bundler for the
// plain page: it imports /pkg/index.js as a plain ES module.
//   node example-web/serve.mjs [--port 8080] [--relay http://127.0.0.1:8787]
import { createReadStream, existsSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const port = Number(arg('port', process.env.EXAMPLE_PORT ?? 8080));
const host = arg('host', process.env.EXAMPLE_HOST ?? '127.0.0.1');
const relay = arg('relay', process.env.RELAY_URL ?? 'http://127.0.0.1:8787');

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.png': 'image/png', '.svg': 'image/svg+xml', '.json': 'application/json' };

function resolve(urlPath) {
  const clean = decodeURIComponent(urlPath);
  const [base, rel] = clean.startsWith('/pkg/')
    ? [path.join(root, 'pkg'), clean.slice(5)]
    : clean.startsWith('/react/')
      ? [path.join(here, 'react/dist'), clean.slice(7)]
      : [here, clean.slice(1)];
  const file = path.join(base, rel || 'index.html');
  return file.startsWith(base) ? file : null;
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/config.json') {
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' });
    return res.end(JSON.stringify({ relays: [relay] }));
  }
  if (url.pathname === '/react') {
    res.writeHead(302, { Location: '/react/' });
    return res.end();
  }
  let file = resolve(url.pathname);
  if (file && existsSync(file) && statSync(file).isDirectory()) file = path.join(file, 'index.html');
  const source = file && file.startsWith(path.join(here, 'react') + path.sep) && !file.startsWith(path.join(here, 'react/dist'));
  if (!file || source || !existsSync(file) || file.endsWith('serve.mjs')) {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    const unbuilt = url.pathname.startsWith('/react/') && !existsSync(path.join(here, 'react/dist'));
    return res.end(unbuilt ? 'the React example is not built: bash scripts/run.sh builds it (see README)' : 'not found');
  }
  res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream', 'Cache-Control': 'no-cache' });
  createReadStream(file).pipe(res);
});

server.listen(port, host, () => {
  const { port: actual } = server.address();
  console.log(`example-web serving http://${host}:${actual}/ (relay ${relay})`);
});
