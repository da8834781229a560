// The protocol functions of the wasm module on the page's thread (minting and checking
// secrets, and advanced envelope/blob helpers), and the module's loader.
import init, * as wasm from './simplysync.js';
import { invalid, revive } from './errors.js';

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

/** Mints a new 12-word recovery phrase. */
export async function createMnemonic() {
  await loadWasm();
  return wrapSync(() => wasm.createMnemonic());
}

/** Mints a new `sf1_` recovery key. */
export async function createRecoveryKey() {
  await loadWasm();
  return wrapSync(() => wasm.createRecoveryKey());
}

/** Checks a secret without throwing: `{ok: true, kind}` or `{ok: false, code, message}`. */
export async function validateSecret(secret) {
  await loadWasm();
  try {
    return { ok: true, kind: wasm.validateSecret(String(secret ?? '')) };
  } catch (e) {
    return { ok: false, code: e.code, message: e.message };
  }
}

/** The owner id a secret derives (the secret stays in this call). */
export async function ownerIdOf(secret) {
  await loadWasm();
  const id = wrapSync(() => wasm.deriveIdentity(secret));
  try {
    return id.ownerId;
  } finally {
    id.free();
  }
}

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
