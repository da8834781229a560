'use client';
// The engine opens in the browser only (an effect), once: StrictMode's second effect run
// reuses the same promise.
import { useEffect, useState } from 'react';
import { createEngine, createMnemonic, defineSchema } from 'simplysync';
import { EngineProvider, createHooks } from 'simplysync/react';

const schema = defineSchema({
  tables: [{ name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }] }],
});
const { useEngine, useQuery, useStatus } = createHooks(schema);
let opening = null;

function open() {
  const relay = new URLSearchParams(location.search).get('relay');
  opening ??= createMnemonic().then((secret) => createEngine({ secret, relays: relay ? [relay] : [], schema, dbName: 'next.db' }));
  return opening;
}

function List() {
  const engine = useEngine();
  const { data: todos = [] } = useQuery('todos', { orderBy: 'title' });
  const { relays } = useStatus();
  return (
    <main>
      <p data-testid="relay">{relays[0]?.state ?? 'none'}</p>
      <ul data-testid="todos">{todos.map((t) => <li key={t.id}>{t.title}</li>)}</ul>
      <button onClick={() => engine.insert('todos', { id: crypto.randomUUID(), title: `todo ${todos.length + 1}`, done: false })}>Add</button>
    </main>
  );
}

export default function Todos() {
  const [engine, setEngine] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    open().then(setEngine, (e) => setError(`${e.code}: ${e.message}`));
  }, []);
  if (error) return <p data-testid="error">{error}</p>;
  if (!engine) return <p>Opening…</p>;
  return (
    <EngineProvider engine={engine}>
      <List />
    </EngineProvider>
  );
}
