// Cross-checks driven by tests/reference_crosscheck.rs.
//   node crosscheck.mjs corpus SEED COUNT   -> lines "<JSON.stringify(v)>\t<canonicalJson(v)>"
//   node crosscheck.mjs open FILE           -> FILE = {secret, envelopes}; prints one line per
//                                              envelope: canonicalJson(decrypted payload)
//   node crosscheck.mjs identities FILE     -> FILE = [secret...]; prints derived identities JSON
//   node crosscheck.mjs apply FILE          -> FILE = {secret, tables: {name: [column...]}, envelopes};
//                                              applies them as a client of the spec that knows only
//                                              whole-row tables: prints {rows, deferred}
import { readFileSync } from 'node:fs';
import * as ref from './reference.mjs';

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function corpus(seed, count) {
  const rnd = mulberry32(seed);
  const int = (n) => Math.floor(rnd() * n);
  const pick = (xs) => xs[int(xs.length)];
  const f64 = new Float64Array(1);
  const u32 = new Uint32Array(f64.buffer);
  const specialNumbers = [0, -0, 1, -1, 0.1, 0.2 + 0.1, 1e21, 1e20, 1e-6, 1e-7, 1.5e-7, 5e-324, Number.MAX_VALUE,
    Number.MIN_VALUE, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 2, 2 ** 53, 123456789012345680000, 1e15, 1e16,
    999999999999999.9, 0.000001234, 12345.678e-30];
  const number = () => {
    switch (int(5)) {
      case 0: return pick(specialNumbers);
      case 1: return int(2 ** 31) - 2 ** 30;
      case 2: return Math.round((rnd() - 0.5) * 10 ** int(12)) / 10 ** int(8);
      case 3: return (rnd() - 0.5) * 10 ** (int(80) - 40);
      default: {
        for (;;) {
          u32[0] = int(2 ** 32);
          u32[1] = int(2 ** 32);
          if (Number.isFinite(f64[0])) return f64[0];
        }
      }
    }
  };
  const unitPools = [
    () => 0x20 + int(0x5f), // printable ASCII
    () => int(0x20), // controls
    () => pick([0x22, 0x5c, 0x2f, 0x7f, 0x2028, 0x2029, 0xfeff, 0xfffd, 0xffff, 0xe000]),
    () => 0xa0 + int(0xd7ff - 0xa0), // BMP below surrogates
    () => 0xe000 + int(0x2000), // BMP above surrogates
    () => 0xd800 + int(0x800), // lone surrogate
  ];
  const string = () => {
    let s = '';
    const n = int(12);
    for (let i = 0; i < n; i++) {
      if (int(8) === 0) s += String.fromCodePoint(0x10000 + int(0xfffff)); // astral (a pair)
      else s += String.fromCharCode(pick(unitPools)());
    }
    return s;
  };
  const key = () => pick([() => String(int(20)), () => pick(['', '__proto__', '-1', '01', '1.5', '10', '2', 'a', 'B', 'constructor']), string])();
  const value = (depth) => {
    const k = depth > 4 ? int(4) : int(7);
    switch (k) {
      case 0: return pick([null, true, false]);
      case 1: return number();
      case 2: case 3: return string();
      case 4: return Array.from({ length: int(5) }, () => value(depth + 1));
      default: {
        const o = {};
        const n = int(6);
        for (let i = 0; i < n; i++) {
          Object.defineProperty(o, key(), { value: value(depth + 1), enumerable: true, writable: true, configurable: true });
        }
        return o;
      }
    }
  };
  const lines = [];
  for (let i = 0; i < count; i++) {
    const v = value(0);
    lines.push(JSON.stringify(v) + '\t' + ref.canonicalJson(v));
  }
  return lines.join('\n') + '\n';
}

const [mode, a, b] = process.argv.slice(2);
if (mode === 'corpus') {
  process.stdout.write(corpus(Number(a), Number(b)));
} else if (mode === 'open') {
  const { secret, envelopes } = JSON.parse(readFileSync(a, 'utf8'));
  const id = await ref.deriveIdentity(secret);
  const out = [];
  for (const e of envelopes) out.push(ref.canonicalJson(await ref.decryptEnvelope(id, e)));
  process.stdout.write(out.join('\n') + '\n');
} else if (mode === 'identities') {
  const secrets = JSON.parse(readFileSync(a, 'utf8'));
  const out = [];
  for (const s of secrets) {
    const id = await ref.deriveIdentity(s);
    out.push({ ownerId: id.ownerId, relayAuth: id.relayAuth, dataKey: ref.hex(id.dataKey), streamKey: ref.hex(id.streamKey),
      streamId: await ref.deriveStreamId(id, 'todos', s.slice(0, 7)) });
  }
  process.stdout.write(JSON.stringify(out) + '\n');
} else if (mode === 'apply') {
  // The spec's pull loop, with its classification, and nothing more: decrypt, read the schema
  // version, table and HLC first, defer what it cannot apply, apply a row whole when its HLC is
  // newer than the local row's. (An unknown column is deferred too: the spec gives no rule.)
  const { secret, tables, envelopes } = JSON.parse(readFileSync(a, 'utf8'));
  const id = await ref.deriveIdentity(secret);
  const rows = {};
  const deferred = [];
  for (const e of envelopes) {
    const p = await ref.decryptEnvelope(id, e);
    const known = tables[p.table];
    if (p.schemaVersion > 1) deferred.push({ eventId: e.eventId, reason: 'FUTURE_SCHEMA', table: p.table });
    else if (!known) deferred.push({ eventId: e.eventId, reason: 'UNKNOWN_TABLE', table: p.table });
    else if (Object.keys(p.row).some((c) => !known.includes(c))) deferred.push({ eventId: e.eventId, reason: 'UNKNOWN_COLUMN', table: p.table });
    else {
      const key = `${p.table}/${p.rowId}`;
      if (!rows[key] || rows[key].updatedAt < p.hlc) {
        rows[key] = { ...Object.fromEntries(known.map((c) => [c, null])), ...p.row, id: p.rowId, updatedAt: p.hlc, deleted: p.deleted };
      }
    }
  }
  process.stdout.write(ref.canonicalJson({ rows, deferred }) + '\n');
} else {
  console.error('usage: node crosscheck.mjs corpus SEED COUNT | open FILE | identities FILE | apply FILE');
  process.exit(2);
}
