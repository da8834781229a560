// A static export: the probe page is served as files (no Next.js server is needed for a
// client-only app), like the other probe apps. Its root is this directory (the test suite's
// own lockfile one level up is not this app's workspace).
export default { output: 'export', turbopack: { root: import.meta.dirname } };
