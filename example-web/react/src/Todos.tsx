// The todo list: live queries re-render it when this tab, another tab or another device (after
// a sync) changes a todo; the relay badges follow each relay's status.
import { useState } from 'react';

import { useEngine, useQuery, useRelayStatuses, useSqlQuery, useSyncProgress } from './schema';

export function Todos() {
  const engine = useEngine();
  const { data: todos = [], isLoading, error } = useQuery('todos', { orderBy: 'createdAt' });
  const { data: counts } = useSqlQuery<{ open: number }>('SELECT count(*) AS open FROM todos WHERE NOT deleted AND NOT coalesce(done, 0)');
  const [title, setTitle] = useState('');
  const [failure, setFailure] = useState<string | null>(null);

  const run = (work: Promise<unknown>) => work.then(() => setFailure(null), (e) => setFailure(e.message));

  return (
    <main>
      <h1>Todos (React)</h1>
      <RelayBadges />
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!title.trim()) return;
          run(engine.insert('todos', { id: crypto.randomUUID(), title: title.trim(), done: false, createdAt: Date.now() }));
          setTitle('');
        }}
      >
        <input value={title} onChange={(e) => setTitle(e.target.value)} placeholder="What needs doing?" aria-label="new todo" />
        <button>Add</button>
      </form>
      {isLoading && <p>Loading…</p>}
      {error && <p className="error">{error.message}</p>}
      {failure && <p className="error">{failure}</p>}
      <ul data-testid="todos">
        {todos.map((t) => (
          <li key={t.id} data-done={t.done ? 'true' : 'false'}>
            <label>
              <input type="checkbox" checked={!!t.done} onChange={() => run(engine.update('todos', t.id, { done: !t.done }))} />
              <span>{t.title}</span>
            </label>
            <button aria-label={`delete ${t.title}`} onClick={() => run(engine.delete('todos', t.id))}>×</button>
          </li>
        ))}
      </ul>
      <p data-testid="open-count">{counts ? `${counts[0]?.open ?? 0} open` : ''}</p>
      <footer>
        <button onClick={() => run(engine.sync())}>Sync now</button>
        <details>
          <summary>Recovery phrase</summary>
          <Phrase />
        </details>
      </footer>
    </main>
  );
}

function RelayBadges() {
  const statuses = useRelayStatuses();
  const progress = useSyncProgress();
  const restoring = progress && !progress.done && progress.headSeq ? Math.floor((100 * progress.eventsReceived) / Math.max(1, progress.headSeq)) : null;
  return (
    <p className="relays" data-events-received={progress?.eventsReceived ?? 0}>
      {statuses.map((s) => (
        <span key={s.url} className={`badge ${s.state}`} data-state={s.state} data-live={s.live.state} title={s.error?.message ?? s.url}>
          {s.state}
          {s.live.state === 'live' ? ' · live' : ''}
          {s.pending ? ` · ${s.pending} waiting` : ''}
        </span>
      ))}
      {restoring !== null && <progress max={100} value={restoring} />}
    </p>
  );
}

function Phrase() {
  const engine = useEngine();
  const [phrase, setPhrase] = useState<string | null>(null);
  if (phrase) return <p className="phrase" data-testid="phrase">{phrase}</p>;
  return <button onClick={() => engine.showRecoveryPhrase().then(setPhrase)}>Show</button>;
}
