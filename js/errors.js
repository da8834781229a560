// Errors of the package: every failure is a SimplySyncError with a stable `code`
// (index.d.ts lists them all as the `ErrorCode` type).

/** An error from SimplySync, with a stable machine-readable `code`. */
export class SimplySyncError extends Error {
  constructor(message, code, options) {
    super(message, options);
    this.name = 'SimplySyncError';
    this.code = code;
  }
}

/** Turns anything thrown (by the wasm engine, the worker or the platform) into a SimplySyncError. */
export function revive(e) {
  if (e instanceof SimplySyncError) return e;
  return new SimplySyncError(e?.message ?? String(e), typeof e?.code === 'string' ? e.code : 'INTERNAL');
}

/** A plain-data form of an error, to post between threads and tabs. */
export function toWire(e) {
  return { message: e?.message ?? String(e), code: typeof e?.code === 'string' ? e.code : 'INTERNAL' };
}

export const invalid = (message) => new SimplySyncError(message, 'INVALID_ARGUMENT');
export const closedError = (why = 'the engine is closed', code = 'CLOSED') => new SimplySyncError(why, code);
