// A static export: the probe page is served as files (no Next.js server is needed for a
// client-only app), like the other probe apps.
export default { output: 'export' };
