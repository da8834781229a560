/**
 * The engine's dedicated worker (`simplysync/worker.js`): the package starts it itself with
 * `new Worker(new URL('./worker.js', import.meta.url), { type: 'module' })`. It is exported so
 * that bundlers and CSPs can name it; it exports nothing for an app to import.
 *
 * @packageDocumentation
 */
export {};
