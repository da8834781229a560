// The SimplySync todo example: plain ES modules on top of the built npm package (/pkg/).
import { createEngine, createMnemonic, deriveIdentity, validateSecret } from '/pkg/index.js';

const $ = (id) => document.getElementById(id);
const SECRET_KEY = 'simplysync-example.secret';
const SCHEMA = {
  schemaVersion: 1,
  tables: [
    {
      name: 'todos',
      columns: [
        { name: 'title', type: 'text' },
        { name: 'done', type: 'boolean' },
        { name: 'image', type: 'blob' },
        { name: 'createdAt', type: 'integer' },
      ],
    },
  ],
};

let engine = null;
let config = { relays: [] };
const imageUrls = new Map();
const unsubscribers = [];

function say(text, kind = 'error') {
  const m = $('message');
  m.textContent = text;
  m.className = kind;
  m.hidden = !text;
}

function describe(e) {
  return e?.code ? `${e.message} (${e.code})` : String(e?.message ?? e);
}

// ---- identity -------------------------------------------------------------------------

async function start(secret) {
  const id = await deriveIdentity(secret);
  const ownerId = id.ownerId;
  id.free();
  // One database per owner: restoring another phrase never mixes two owners' data.
  engine = await createEngine({ secret, relays: config.relays, schema: SCHEMA, dbName: `todos-${ownerId}.db` });
  window.engine = engine; // for the end-to-end tests and for curious developers
  unsubscribers.push(engine.subscribe(['todos'], () => render()));
  unsubscribers.push(engine.onStatus((s) => showStatuses(s)));
  unsubscribers.push(engine.onProgress((p) => showProgress(p)));
  const storage = await engine.storage();
  $('identity').textContent = `owner ${ownerId} · device ${engine.deviceId ?? '…'} · ${storage.mode}${engine.role === 'follower' ? ' · via another tab' : ''}`;
  if (!storage.durable) say(`Not saved on this device: ${storage.reason}`, 'info');
  await render();
  refreshStatuses();
}

async function stop() {
  while (unsubscribers.length) unsubscribers.pop()();
  await engine?.close();
  engine = null;
}

// ---- relays, progress -------------------------------------------------------------------

const LABELS = { synced: 'synced', syncing: 'syncing…', pending: 'pending', offline: 'offline', reseeding: 're-uploading', error: 'error', closed: 'closed' };

function showStatuses(statuses) {
  const box = $('relays');
  box.replaceChildren(
    ...statuses.map((s) => {
      const el = document.createElement('span');
      el.className = `relay ${s.state}`;
      el.dataset.state = s.state;
      const host = new URL(s.url).host;
      let text = `${host}: ${LABELS[s.state] ?? s.state}`;
      if (s.state === 'error' && s.error) text += ` — ${s.error.message}`;
      if (s.account) text += ` · ${s.account.usedPct}% of quota`;
      if (s.pending) text += ` · ${s.pending} to send`;
      el.textContent = text;
      el.title = s.reseedReason ?? s.error?.message ?? '';
      return el;
    }),
  );
  const down = statuses.find((s) => s.state === 'offline');
  if (down) say(`Relay ${down.url} is unreachable: ${down.error?.message ?? 'no answer'}. Changes are kept and sent when it is back.`);
  else if ($('message').textContent.startsWith('Relay ')) say('');
}

async function refreshStatuses() {
  if (!engine) return;
  try {
    showStatuses(await engine.getRelayStatuses());
  } catch (e) {
    say(describe(e));
  }
}

function showProgress(p) {
  const bar = $('progress');
  if (p.done) {
    bar.hidden = true;
    return;
  }
  bar.hidden = false;
  const cursor = Number(p.cursor);
  if (p.headSeq && Number.isFinite(cursor)) {
    bar.max = p.headSeq;
    bar.value = Math.min(cursor, p.headSeq);
  } else {
    bar.removeAttribute('value');
  }
  bar.title = `${p.eventsReceived} events received`;
}

// ---- todos --------------------------------------------------------------------------------

const observer = new IntersectionObserver(async (entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    const slot = entry.target;
    observer.unobserve(slot);
    try {
      const blobId = slot.dataset.blob;
      if (!imageUrls.has(blobId)) imageUrls.set(blobId, await engine.getBlobUrl(blobId));
      const img = document.createElement('img');
      img.alt = 'attachment';
      img.src = imageUrls.get(blobId);
      slot.replaceChildren(img);
    } catch (e) {
      slot.textContent = `image not available yet (${e.code ?? e.message})`;
    }
  }
});

function todoItem(t) {
  const li = document.createElement('li');
  li.dataset.id = t.id;
  li.className = `${t.done ? 'done' : ''} ${t.deleted ? 'deleted' : ''}`;
  const box = document.createElement('input');
  box.type = 'checkbox';
  box.checked = !!t.done;
  box.disabled = t.deleted;
  box.onchange = () => act(() => engine.update('todos', t.id, { done: box.checked }));
  const text = document.createElement('span');
  text.className = 'text';
  text.textContent = t.title;
  text.onclick = () => {
    if (t.deleted) return;
    text.contentEditable = 'true';
    text.focus();
  };
  const save = () => {
    text.contentEditable = 'false';
    const title = text.textContent.trim();
    if (title && title !== t.title) act(() => engine.update('todos', t.id, { title }));
    else text.textContent = t.title;
  };
  text.onblur = save;
  text.onkeydown = (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      text.blur();
    }
  };
  const del = document.createElement('button');
  del.textContent = '✕';
  del.title = 'Delete';
  del.className = 'delete';
  del.hidden = t.deleted;
  del.onclick = () => act(() => engine.delete('todos', t.id));
  li.append(box, text, del);
  if (t.image) {
    const slot = document.createElement('span');
    slot.className = 'image-slot';
    slot.dataset.blob = t.image;
    slot.textContent = imageUrls.has(t.image) ? '' : 'loading image…';
    li.append(slot);
    observer.observe(slot);
  }
  return li;
}

let rendering = Promise.resolve();
function render() {
  rendering = rendering.then(async () => {
    if (!engine) return;
    const todos = await engine.list('todos', { orderBy: 'createdAt', includeDeleted: $('show-deleted').checked });
    $('todos').replaceChildren(...todos.map(todoItem));
    $('empty').hidden = todos.length > 0;
  });
  return rendering;
}

async function act(fn) {
  try {
    await fn();
  } catch (e) {
    say(describe(e));
    render();
  }
}

// ---- wiring -----------------------------------------------------------------------------

$('new-todo').onsubmit = (e) => {
  e.preventDefault();
  const title = $('title').value.trim();
  const file = $('image').files[0];
  if (!title) return;
  // Take the input now: the user may type the next todo while this one is stored.
  $('title').value = '';
  $('image').value = '';
  $('image').parentElement.classList.remove('chosen');
  act(async () => {
    try {
      const image = file ? (await engine.putBlob(file, { mimeType: file.type })).blobId : null;
      await engine.insert('todos', { id: crypto.randomUUID(), title, done: false, image, createdAt: Date.now() });
    } catch (err) {
      if (!$('title').value) $('title').value = title; // give it back
      throw err;
    }
  });
};
$('image').onchange = () => $('image').parentElement.classList.toggle('chosen', $('image').files.length > 0);
$('show-deleted').onchange = () => render();

$('sync-now').onclick = () =>
  act(async () => {
    const report = await engine.sync();
    const failed = report.relays.filter((r) => r.error);
    if (failed.length) say(failed.map((r) => `${r.url}: ${r.error.message}`).join('; '));
    else say('');
    refreshStatuses();
  });

$('show-key').onclick = () =>
  act(async () => {
    $('phrase').textContent = await engine.showRecoveryPhrase();
    $('key-panel').hidden = false;
    $('menu').open = false;
  });
$('hide-key').onclick = () => {
  $('phrase').textContent = '';
  $('key-panel').hidden = true;
};

$('use-phrase').onclick = () => {
  $('phrase-form').hidden = false;
  $('menu').open = false;
  $('phrase-input').focus();
};
$('cancel-phrase').onclick = () => ($('phrase-form').hidden = true);
$('phrase-form').onsubmit = (e) => {
  e.preventDefault();
  act(async () => {
    const phrase = $('phrase-input').value;
    const check = await validateSecret(phrase);
    if (!check.ok) {
      say(`That phrase is not valid: ${check.message}`);
      return;
    }
    $('phrase-form').hidden = true;
    $('phrase-input').value = '';
    await stop();
    localStorage.setItem(SECRET_KEY, phrase.trim());
    say('Restoring from the relay…', 'info');
    await start(phrase.trim());
    const report = await engine.sync();
    const failed = report.relays.find((r) => r.error);
    say(failed ? `Could not restore from ${failed.url}: ${failed.error.message}` : '');
  });
};

$('purge').onclick = () =>
  act(async () => {
    const n = await engine.purgeDeleted();
    $('menu').open = false;
    say(`Purged ${n} deleted todo${n === 1 ? '' : 's'} here and on the relays.`, 'info');
  });

setInterval(refreshStatuses, 10000);

(async () => {
  try {
    config = await (await fetch('/config.json')).json();
    let secret = localStorage.getItem(SECRET_KEY);
    if (!secret) {
      secret = await createMnemonic();
      localStorage.setItem(SECRET_KEY, secret);
    }
    await start(secret);
    document.body.dataset.ready = 'true';
  } catch (e) {
    say(`Could not start: ${describe(e)}`);
  }
})();
