// Entry point: opens the engine before React renders anything that needs it (in event handlers,
// never in an effect: StrictMode runs effects twice, and each run would open another engine).
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { createEngine, hasStoredSecret, type Engine } from 'simplysync';
import { EngineProvider } from 'simplysync/react';

import { Todos } from './Todos';
import { Welcome } from './Welcome';
import { schema } from './schema';

const DB = 'react-todos.db';
const root = createRoot(document.getElementById('root')!);

/** The relays: from /config.json where the page is served by example-web/serve.mjs. */
async function relays(): Promise<string[]> {
  try {
    const config = await (await fetch('/config.json')).json();
    if (Array.isArray(config.relays)) return config.relays;
  } catch {
    // `npm run dev` serves no config: the main command's relay.
  }
  return ['http://127.0.0.1:8787'];
}

function show(engine: Engine<typeof schema>) {
  root.render(
    <StrictMode>
      <EngineProvider engine={engine}>
        <Todos />
      </EngineProvider>
    </StrictMode>,
  );
}

async function start() {
  const options = { relays: await relays(), schema, dbName: DB };
  if (await hasStoredSecret(DB)) {
    show(await createEngine(options)); // welcome back: the engine keeps the phrase
    return;
  }
  root.render(
    <StrictMode>
      <Welcome onSecret={async (secret) => show(await createEngine({ ...options, secret }))} />
    </StrictMode>,
  );
}

start().catch((e) => {
  root.render(<p className="error">Could not start: {String(e?.message ?? e)}</p>);
});
