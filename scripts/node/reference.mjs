// Independent reference implementation of SimplySync's protocol core, written the way the
// spec's engine is: WebCrypto (crypto.subtle) for every primitive, @scure/bip39 only for
// mnemonic -> entropy. The Rust test suite runs it to prove the Rust core byte-identical.
// It shares no code with the Rust implementation; keep it that way.
import { mnemonicToEntropy, validateMnemonic } from '@scure/bip39';
import { wordlist } from '@scure/bip39/wordlists/english.js';

const subtle = globalThis.crypto.subtle;
const enc = (s) => new TextEncoder().encode(s);
const SALT = enc('sbt-local-first-v1');

export const b64url = (bytes) => Buffer.from(bytes).toString('base64url');
export const fromB64url = (s) => new Uint8Array(Buffer.from(s, 'base64url'));
export const hex = (bytes) => Buffer.from(bytes).toString('hex');
export const fromHex = (s) => new Uint8Array(Buffer.from(s, 'hex'));

// JSON.stringify with object keys sorted recursively (default sort: UTF-16 code units).
export function canonicalJson(v) {
  if (Array.isArray(v)) return '[' + v.map((x) => (x === undefined ? 'null' : canonicalJson(x))).join(',') + ']';
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
    return '{' + keys.map((k) => JSON.stringify(k) + ':' + canonicalJson(v[k])).join(',') + '}';
  }
  return JSON.stringify(v);
}

async function hkdf(ikm, info, length) {
  const key = await subtle.importKey('raw', ikm, 'HKDF', false, ['deriveBits']);
  const bits = await subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt: SALT, info: enc(info) }, key, length * 8);
  return new Uint8Array(bits);
}

async function hmac(hash, keyBytes, data) {
  const key = await subtle.importKey('raw', keyBytes, { name: 'HMAC', hash }, false, ['sign']);
  return new Uint8Array(await subtle.sign('HMAC', key, data));
}

async function slip21(seed, path) {
  let node = await hmac('SHA-512', enc('Symmetric key seed'), seed);
  for (const label of path) {
    node = await hmac('SHA-512', node.slice(0, 32), new Uint8Array([0, ...enc(label)]));
  }
  return node.slice(32, 64);
}

export async function sha256b64url(bytes) {
  return b64url(new Uint8Array(await subtle.digest('SHA-256', bytes)));
}

export function normalizeMnemonic(s) {
  return s.normalize('NFKD').toLowerCase().trim().split(/\s+/).join(' ');
}

export async function deriveIdentity(secret) {
  const s = secret.trim();
  let ownerId, relayAuth, dataKey, streamKey, kind;
  if (s.startsWith('sf1_')) {
    kind = 'sf1';
    const ikm = fromB64url(s.slice(4));
    if (ikm.length !== 32 || b64url(ikm) !== s.slice(4)) throw new Error('bad sf1_ key');
    ownerId = b64url(await hkdf(ikm, 'owner-id', 16));
    dataKey = await hkdf(ikm, 'data-key', 32);
    relayAuth = b64url(await hkdf(ikm, 'relay-auth', 32));
    streamKey = await hkdf(ikm, 'stream-key', 32);
  } else {
    kind = 'mnemonic';
    const phrase = normalizeMnemonic(s);
    if (!validateMnemonic(phrase, wordlist)) throw new Error('bad mnemonic');
    const entropy = mnemonicToEntropy(phrase, wordlist);
    ownerId = b64url((await slip21(entropy, ['SimplySync', 'OwnerIdBytes'])).slice(0, 16));
    dataKey = await slip21(entropy, ['SimplySync', 'OwnerEncryptionKey']);
    relayAuth = b64url((await slip21(entropy, ['SimplySync', 'OwnerWriteKey'])).slice(0, 16));
    streamKey = await hkdf(dataKey, 'stream-key', 32);
  }
  return { kind, ownerId, relayAuth, dataKey, streamKey };
}

export async function deriveStreamId(identity, table, rowId) {
  const tag = await hmac('SHA-256', identity.streamKey, enc(canonicalJson([table, rowId])));
  return b64url(tag.slice(0, 16));
}

async function aesKey(identity) {
  return subtle.importKey('raw', identity.dataKey, 'AES-GCM', false, ['encrypt', 'decrypt']);
}

export function headerAad(h) {
  const header = { version: h.version, ownerId: h.ownerId, eventId: h.eventId, deviceId: h.deviceId, createdAt: h.createdAt };
  if (h.streamId !== undefined && h.streamId !== null) header.streamId = h.streamId;
  return canonicalJson(header);
}

export async function encryptPayload(identity, meta, payload, nonce) {
  const header = { version: 1, ownerId: identity.ownerId, ...meta };
  const aad = headerAad(header);
  const plaintext = canonicalJson(payload);
  const ct = await subtle.encrypt({ name: 'AES-GCM', iv: nonce, additionalData: enc(aad) }, await aesKey(identity), enc(plaintext));
  const envelope = { ...header, nonce: b64url(nonce), ciphertext: b64url(new Uint8Array(ct)) };
  return { aad, plaintext, envelope };
}

export async function decryptEnvelope(identity, envelope) {
  if (envelope.ownerId !== identity.ownerId) throw new Error('foreign owner');
  const pt = await subtle.decrypt(
    { name: 'AES-GCM', iv: fromB64url(envelope.nonce), additionalData: enc(headerAad(envelope)) },
    await aesKey(identity),
    fromB64url(envelope.ciphertext),
  );
  return JSON.parse(new TextDecoder().decode(pt));
}

export async function encryptBlob(identity, data, { mimeType, chunkSize = 262144, blobIdBytes, nonces, createdAt }) {
  const blobId = b64url(blobIdBytes);
  const key = await aesKey(identity);
  const chunks = [];
  const refs = [];
  for (let index = 0, off = 0; off < data.length; index++, off += chunkSize) {
    const plain = data.slice(off, off + chunkSize);
    const aad = canonicalJson({ v: 1, ownerId: identity.ownerId, blobId, index });
    const nonce = nonces[index];
    const ct = new Uint8Array(await subtle.encrypt({ name: 'AES-GCM', iv: nonce, additionalData: enc(aad) }, key, plain));
    const stored = new Uint8Array(nonce.length + ct.length);
    stored.set(nonce, 0);
    stored.set(ct, nonce.length);
    const hash = await sha256b64url(stored);
    refs.push({ hash, size: stored.length, plaintextSize: plain.length });
    chunks.push({ hash, bytes: b64url(stored) });
  }
  const manifest = {
    version: 1,
    ownerId: identity.ownerId,
    blobId,
    mimeType,
    byteSize: data.length,
    chunkSize,
    chunks: refs,
    sha256: await sha256b64url(data),
    createdAt,
  };
  return { manifest, chunks };
}
