// The secret functions of the wasm module — mint a phrase or a recovery key, check one, derive
// its owner id — shared by the worker that runs them (worker.js) and the page's fallback
// (protocol.js). Plain functions of the module passed in: no import of the module here.
import { invalid } from './errors.js';

/** A secret function of the wasm module `m`: in the worker (worker.js), or on the page without one. */
export function secretCall(m, method, [secret] = []) {
  switch (method) {
    case 'createMnemonic':
      return m.createMnemonic();
    case 'createRecoveryKey':
      return m.createRecoveryKey();
    case 'validateSecret':
      try {
        return { ok: true, kind: m.validateSecret(String(secret ?? '')) };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    case 'ownerIdOf': {
      const id = m.deriveIdentity(secret);
      try {
        return id.ownerId;
      } finally {
        id.free();
      }
    }
    default:
      throw invalid(`unknown secret function ${method}`);
  }
}
