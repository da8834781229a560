// The todo list: live queries re-render it when this tab, another tab or another device (after
// a sync) changes a todo; the relay badges follow each relay's status. The list suspends until
// its first result (<Suspense>); a closed engine (logged out in another tab, a newer version of
// the app opened, the key lost) shows why, instead of a list that no longer updates.
import { Suspense, useState } from 'react';

import { useEngine, useRelayStatuses, useSqlQuery, useStatus, useSuspenseQuery, useSyncProgress } from './schema';

export function Todos({ onSignedOut }: { onSignedOut: () => void }) {
  const { closed } = useStatus();
  if (closed) return <Closed code={closed.code} message={closed.message} onSignedOut={onSignedOut} />;
  return <TodoApp />;
}

function Closed({ code, message, onSignedOut }: { code: string; message: string; onSignedOut: () => void }) {
  if (code === 'OUTDATED') {
    return (
      <main data-testid="closed" data-code={code}>
        <p>A newer version of this app is open in another tab.</p>
        <button onClick={() => location.reload()}>Reload</button>
      </main>
    );
  }
  return (
    <main data-testid="closed" data-code={code}>
      <p>{code === 'SECRET_LOST' ? 'This browser lost the key to your todos.' : 'You were signed out on this device.'}</p>
      <p className="error">{message}</p>
      <button onClick={onSignedOut}>Continue</button>
    </main>
  );
}

function TodoApp() {
  const engine = useEngine();
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
      {failure && <p className="error">{failure}</p>}
      <Suspense fallback={<p>Loading…</p>}>
        <TodoList run={run} />
      </Suspense>
      <p data-testid="open-count">{counts ? `${counts[0]?.open ?? 0} open` : ''}</p>
      <footer>
        <button onClick={() => run(engine.sync())}>Sync now</button>
        <button onClick={() => run(engine.resetLocalData({ requireSynced: true }))}>Log out on this device</button>
        <details>
          <summary>Recovery phrase</summary>
          <Phrase />
        </details>
      </footer>
    </main>
  );
}

function TodoList({ run }: { run: (work: Promise<unknown>) => void }) {
  const engine = useEngine();
  const todos = useSuspenseQuery('todos', { orderBy: 'createdAt' });
  return (
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
