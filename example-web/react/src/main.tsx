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
        <Todos onSignedOut={startOrSay} />
      </EngineProvider>
    </StrictMode>,
  );
}

async function start() {
  const options = { relays: await relays(), schema, dbName: DB };
  let note: string | undefined;
  if (await hasStoredSecret(DB)) {
    try {
      show(await createEngine(options)); // welcome back: the engine keeps the phrase
      return;
    } catch (e) {
      // The browser evicted the key that sealed the phrase: the phrase opens the data again.
      if ((e as { code?: string }).code !== 'SECRET_LOST') throw e;
      note = 'This browser lost the key to your todos: enter your recovery phrase to open them again.';
    }
  }
  root.render(
    <StrictMode>
      <Welcome note={note} onSecret={async (secret) => show(await createEngine({ ...options, secret }))} />
    </StrictMode>,
  );
}

function startOrSay() {
  start().catch((e) => {
    root.render(<p className="error">Could not start: {String(e?.message ?? e)}</p>);
  });
}

startOrSay();
