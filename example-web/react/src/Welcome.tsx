// First visit: a new recovery phrase (to write down), or one from another device.
import { useState } from 'react';
import { createMnemonic, validateSecret } from 'simplysync';

export function Welcome({ note, onSecret }: { note?: string; onSecret: (secret: string) => Promise<void> }) {
  const [phrase, setPhrase] = useState<string | null>(null);
  const [typed, setTyped] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function use(secret: string) {
    setBusy(true);
    setError(null);
    try {
      const check = await validateSecret(secret);
      if (!check.ok) throw new Error(check.message);
      await onSecret(secret);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  }

  if (phrase) {
    return (
      <main>
        <h1>Your recovery phrase</h1>
        <p>Write it down: it is the only way to get your todos on another device.</p>
        <p className="phrase" data-testid="new-phrase">{phrase}</p>
        <button disabled={busy} onClick={() => use(phrase)}>I saved it</button>
        {error && <p className="error">{error}</p>}
      </main>
    );
  }
  return (
    <main>
      <h1>Todos (React)</h1>
      {note && <p className="error">{note}</p>}
      <button disabled={busy} onClick={async () => setPhrase(await createMnemonic())}>Start fresh</button>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          use(typed.trim());
        }}
      >
        <label>
          I have a recovery phrase
          <input value={typed} onChange={(e) => setTyped(e.target.value)} placeholder="twelve words…" aria-label="recovery phrase" />
        </label>
        <button disabled={busy || !typed.trim()}>Restore</button>
      </form>
      {error && <p className="error">{error}</p>}
    </main>
  );
}
