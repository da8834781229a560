// simplysync ships a worker and a wasm file that it finds with `new URL(..., import.meta.url)`;
// Vite 8's build and dev server handle both with no special configuration (tested).
export default {
  logLevel: 'warn',
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  worker: { format: 'es' },
};
