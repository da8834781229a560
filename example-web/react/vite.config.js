// No React plugin needed: Vite compiles JSX/TSX itself (the automatic runtime, react/jsx-runtime).
// `base: './'` lets the built app be served under any path (serve.mjs serves it at /react/).
export default {
  base: './',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic' } },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  worker: { format: 'es' },
};
