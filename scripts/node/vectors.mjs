// Computes SimplySync's test vectors with the reference implementation (reference.mjs).
//   node vectors.mjs --generate          print a complete vector file from the inputs below
//   node vectors.mjs --recompute FILE    recompute every output for the inputs stored in FILE
// The Rust suite runs --recompute on each locked file and requires identical output, so the
// locked expectations are proven to be what WebCrypto + @scure/bip39 produce.
import { readFileSync } from 'node:fs';
import * as ref from './reference.mjs';

const STREAM_ROWS = [
  ['todos', '1'],
  ['todos', '10'],
  ['notes', 'h\u00e9llo "quoted" \\ back'],
  ['blob', '\u{1F600}'],
];

async function identityVector(name, secret) {
  const id = await ref.deriveIdentity(secret);
  const streamIds = [];
  for (const [table, rowId] of STREAM_ROWS) streamIds.push({ table, rowId, streamId: await ref.deriveStreamId(id, table, rowId) });
  return {
    name,
    secret,
    kind: id.kind,
    ownerId: id.ownerId,
    relayAuth: id.relayAuth,
    relayTokenHash: await ref.sha256b64url(new TextEncoder().encode(id.relayAuth)),
    dataKey: ref.hex(id.dataKey),
    streamKey: ref.hex(id.streamKey),
    streamIds,
  };
}

async function envelopeVector(v, identities) {
  const id = await ref.deriveIdentity(identities.find((i) => i.name === v.identity).secret);
  const out = await ref.encryptPayload(id, v.meta, JSON.parse(v.payloadJson), ref.fromHex(v.nonce));
  return { ...v, aad: out.aad, plaintext: out.plaintext, envelope: out.envelope };
}

async function blobVector(v, identities) {
  const id = await ref.deriveIdentity(identities.find((i) => i.name === v.identity).secret);
  const out = await ref.encryptBlob(id, ref.fromHex(v.data), {
    mimeType: v.mimeType,
    chunkSize: v.chunkSize,
    blobIdBytes: ref.fromHex(v.blobIdBytes),
    nonces: v.nonces.map(ref.fromHex),
    createdAt: v.createdAt,
  });
  return { ...v, manifest: out.manifest, chunks: out.chunks };
}

async function compute(inputs) {
  const identities = [];
  for (const i of inputs.identities) identities.push(await identityVector(i.name, i.secret));
  const envelopes = [];
  for (const e of inputs.envelopes) envelopes.push(await envelopeVector(e, identities));
  const blobs = [];
  for (const b of inputs.blobs) blobs.push(await blobVector(b, identities));
  return { description: inputs.description, identities, envelopes, blobs };
}

function pick(v, keys) {
  return Object.fromEntries(keys.filter((k) => k in v).map((k) => [k, v[k]]));
}

const GENERATE_INPUTS = {
  description:
    'SimplySync protocol vectors v1, computed by scripts/node/reference.mjs (WebCrypto + @scure/bip39). LOCKED: never edit; add a new file.',
  identities: [
    { name: 'mnemonic-12', secret: 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about' },
    { name: 'mnemonic-15', secret: 'arctic live gadget display excess mandate sniff autumn people disorder affair hole retreat fancy clap' },
    { name: 'mnemonic-18', secret: 'legal winner thank year wave sausage worth useful legal winner thank year wave sausage worth useful legal will' },
    { name: 'mnemonic-21', secret: 'arctic live gadget display excess mandate sniff autumn people disorder affair hole retreat fancy close tip deer village tuition orbit cat' },
    { name: 'mnemonic-24', secret: 'zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo vote' },
    { name: 'mnemonic-12-unnormalized', secret: '  Abandon ABANDON\tabandon abandon  abandon abandon abandon abandon abandon abandon abandon About\n' },
    { name: 'sf1-counting', secret: 'sf1_' + ref.b64url(Uint8Array.from({ length: 32 }, (_, i) => i)) },
    { name: 'sf1-ff', secret: 'sf1_' + ref.b64url(new Uint8Array(32).fill(0xff)) },
  ],
  envelopes: [
    {
      name: 'row-with-stream',
      identity: 'mnemonic-12',
      meta: { eventId: '001764504000000-000000-dev1', deviceId: 'dev1', createdAt: '2025-11-30T12:00:00.000Z', streamId: 'AAAAAAAAAAAAAAAAAAAAAA' },
      nonce: '000102030405060708090a0b',
      payloadJson:
        '{"schemaVersion":1,"table":"todos","rowId":"r1","hlc":"001764504000000-000000-dev1","deleted":false,"row":{"title":"milk \\u00e9 \\ud83d\\ude00","done":false,"n":1.5e-7,"big":1e21,"10":1,"2":2}}',
    },
    {
      name: 'no-stream-lone-surrogate',
      identity: 'sf1-counting',
      meta: { eventId: '001764504000001-000007-devB', deviceId: 'devB', createdAt: '2025-11-30T12:00:01.000Z' },
      nonce: 'ffffffffffffffffffffffff',
      payloadJson: '{"schemaVersion":2,"table":"notes","rowId":"x","hlc":"001764504000001-000007-devB","deleted":true,"row":{"s":"\\ud800 lone","ctl":"\\u0001\\n"}}',
    },
    {
      name: 'mnemonic-24-row',
      identity: 'mnemonic-24',
      meta: { eventId: '001764504000002-000001-devC', deviceId: 'devC', createdAt: '2025-11-30T12:00:02.000Z', streamId: 'ZZZZZZZZZZZZZZZZZZZZZw' },
      nonce: '0a0b0c0d0e0f101112131415',
      payloadJson: '{"schemaVersion":1,"table":"todos","rowId":"r2","hlc":"001764504000002-000001-devC","deleted":false,"row":{"tags":["a",{"z":1,"a":[null,true]}],"neg":-0}}',
    },
  ],
  blobs: [
    {
      name: 'two-chunks',
      identity: 'mnemonic-12',
      data: Buffer.from('SimplySync blob vector: twenty+ bytes.').toString('hex'),
      mimeType: 'text/plain',
      chunkSize: 24,
      createdAt: '2025-11-30T12:00:03.000Z',
      blobIdBytes: '101112131415161718191a1b1c1d1e1f',
      nonces: ['202122232425262728292a2b', '303132333435363738393a3b'],
    },
  ],
};

const mode = process.argv[2];
if (mode === '--generate') {
  process.stdout.write(JSON.stringify(await compute(GENERATE_INPUTS), null, 2) + '\n');
} else if (mode === '--recompute') {
  const locked = JSON.parse(readFileSync(process.argv[3], 'utf8'));
  const inputs = {
    description: locked.description,
    identities: locked.identities.map((i) => pick(i, ['name', 'secret'])),
    envelopes: locked.envelopes.map((e) => pick(e, ['name', 'identity', 'meta', 'nonce', 'payloadJson'])),
    blobs: locked.blobs.map((b) => pick(b, ['name', 'identity', 'data', 'mimeType', 'chunkSize', 'createdAt', 'blobIdBytes', 'nonces'])),
  };
  process.stdout.write(JSON.stringify(await compute(inputs), null, 2) + '\n');
} else {
  console.error('usage: node vectors.mjs --generate | --recompute FILE');
  process.exit(2);
}
