// The protocol functions of the wasm module: minting and checking secrets — run in a worker, so
// that a first screen never loads and compiles the engine on the page's thread — and the
// advanced envelope/blob helpers, on this thread (they hand back the module's objects).
import init, * as wasm from './simplysync.js';
import { SimplySyncError, invalid, revive } from './errors.js';
import { secretCall } from './secrets.js';

let wasmReady;
export function loadWasm() {
  return (wasmReady ??= init());
}

function wrapSync(fn) {
  try {
    return fn();
  } catch (e) {
    throw revive(e);
  }
}

export function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw invalid('expected a Uint8Array, an ArrayBuffer or a typed array');
}

// ---- secrets, in a worker ----------------------------------------------------------------

const IDLE_MS = 30000; // the worker is let go once unused this long
const DEADLINE_MS = 60000;
let phraseWorker = null;
let idleTimer = null;
let seq = 0;
const waiting = new Map(); // id -> {resolve, reject, timer}

function stopPhraseWorker(error) {
  phraseWorker?.terminate();
  phraseWorker = null;
  for (const call of waiting.values()) {
    clearTimeout(call.timer);
    call.reject(error);
  }
  waiting.clear();
}

/** Runs `method` of the engine's worker script (its secret functions) off the page's thread. */
function inWorker(method, args) {
  if (typeof Worker !== 'function') return onThread(method, args);
  if (!phraseWorker) {
    phraseWorker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'simplysync-secrets' });
    phraseWorker.onmessage = ({ data }) => {
      const call = waiting.get(data.id);
      if (!call) return;
      waiting.delete(data.id);
      clearTimeout(call.timer);
      if (data.ok) call.resolve(data.value);
      else call.reject(revive(data.error));
      if (!waiting.size) idleTimer = setTimeout(() => stopPhraseWorker(null), IDLE_MS);
    };
    phraseWorker.onerror = (e) => {
      e.preventDefault?.();
      stopPhraseWorker(new SimplySyncError(`the worker that checks secrets failed: ${e.message ?? 'unknown error'}`, 'WORKER'));
    };
  }
  clearTimeout(idleTimer);
  const id = `phrase:${++seq}`;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      waiting.delete(id);
      reject(new SimplySyncError(`${method} did not answer within ${DEADLINE_MS} ms`, 'TIMEOUT'));
      if (!waiting.size) idleTimer = setTimeout(() => stopPhraseWorker(null), IDLE_MS);
    }, DEADLINE_MS);
    waiting.set(id, { resolve, reject, timer });
    phraseWorker.postMessage({ id, method, args });
  });
}

/** The same, on this thread (no Worker here). */
async function onThread(method, args) {
  await loadWasm();
  return wrapSync(() => secretCall(wasm, method, args));
}

/** Mints a new 12-word recovery phrase. */
export function createMnemonic() {
  return inWorker('createMnemonic', []);
}

/** Mints a new `sf1_` recovery key. */
export function createRecoveryKey() {
  return inWorker('createRecoveryKey', []);
}

/** Checks a secret without throwing: `{ok: true, kind}` or `{ok: false, code, message}`. */
export function validateSecret(secret) {
  return inWorker('validateSecret', [secret]);
}

/** The owner id a secret derives (the secret stays in this call). */
export function ownerIdOf(secret) {
  return inWorker('ownerIdOf', [secret]);
}

// ---- envelopes and blobs, on this thread --------------------------------------------------

/** Derives an identity handle (only `ownerId` and `streamId()` are visible). */
export async function deriveIdentity(secret) {
  await loadWasm();
  return wrapSync(() => wasm.deriveIdentity(secret));
}

/** Seals a payload into an envelope. */
export async function encryptPayload(identity, meta, payload) {
  await loadWasm();
  return wrapSync(() => wasm.encryptPayload(identity, meta, payload));
}

/** Opens an envelope; throws `CRYPTO` for a foreign owner or any tampering. */
export async function decryptEnvelope(identity, envelope) {
  await loadWasm();
  return wrapSync(() => wasm.decryptEnvelope(identity, envelope));
}

/** Seals bytes as a blob: `{manifest, chunks: [{hash, bytes}]}`. */
export async function encryptBlob(identity, bytes, { mimeType, chunkSize } = {}) {
  await loadWasm();
  return wrapSync(() => wasm.encryptBlob(identity, toBytes(bytes), String(mimeType ?? 'application/octet-stream'), chunkSize));
}

/** Verifies and decrypts a blob from its manifest and stored chunks. */
export async function decryptBlob(identity, manifest, chunks) {
  await loadWasm();
  return wrapSync(() => wasm.decryptBlob(identity, manifest, chunks.map(toBytes)));
}
