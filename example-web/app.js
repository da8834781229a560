// The SimplySync todo example: plain ES modules on top of the built npm package (/pkg/).
// The engine keeps the recovery phrase itself (sealed in its own database): the page never
// stores it. First visit: create a phrase (and write it down) or restore one; later visits
// reopen the engine without it.
import { createEngine, createMnemonic, hasStoredSecret, validateSecret } from '/pkg/index.js';

const $ = (id) => document.getElementById(id);
const DB = 'todos.db';
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
let statusTimer = null;
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

/** Asks in the page (not a browser dialog) and resolves to the answer. */
function confirmInPage(text, yes) {
  $('confirm-text').textContent = text;
  $('confirm-yes').textContent = yes;
  $('confirm-panel').hidden = false;
  return new Promise((resolve) => {
    const done = (answer) => {
      $('confirm-panel').hidden = true;
      resolve(answer);
    };
    $('confirm-yes').onclick = () => done(true);
    $('confirm-no').onclick = () => done(false);
  });
}

// ---- identity -------------------------------------------------------------------------

function showWelcome() {
  $('welcome').hidden = false;
  $('controls').disabled = true;
  $('todos').replaceChildren();
  $('identity').textContent = '';
  document.body.dataset.ready = 'welcome';
}

/** Opens the engine: with `secret` for a new or restored identity, without it to reopen. */
async function start(secret) {
  $('welcome').hidden = true;
  engine = await createEngine({ secret, relays: config.relays, schema: SCHEMA, dbName: DB });
  window.engine = engine; // for the end-to-end tests and for curious developers
  unsubscribers.push(engine.subscribe(['todos'], () => render()));
  unsubscribers.push(engine.onStatus((s) => showStatuses(s)));
  unsubscribers.push(engine.onProgress((p) => showProgress(p)));
  unsubscribers.push(
    engine.onClose(() => {
      // Another tab logged out: this one has no engine any more.
      if (engine) stop().then(showWelcome);
    }),
  );
  const storage = await engine.storage();
  $('identity').textContent = `owner ${engine.ownerId} · device ${engine.deviceId ?? '…'} · ${storage.mode}${engine.role === 'follower' ? ' · via another tab' : ''}`;
  if (!storage.durable) say(`Not saved on this device: ${storage.reason}`, 'info');
  $('controls').disabled = false;
  statusTimer = setInterval(refreshStatuses, 10000);
  await render();
  refreshStatuses();
  document.body.dataset.ready = 'app';
}

/** Detaches the page from the engine (timers, listeners, image URLs); returns the engine. */
function detach() {
  clearInterval(statusTimer);
  statusTimer = null;
  $('controls').disabled = true;
  while (unsubscribers.length) unsubscribers.pop()();
  const old = engine;
  engine = null;
  for (const url of imageUrls.values()) old?.revokeBlobUrl(url);
  imageUrls.clear();
  return old;
}

async function stop() {
  await detach()?.close();
}

/** Logs out on this device: the engine deletes its database and its copy of the secret. */
async function forgetThisDevice() {
  await detach()?.resetLocalData();
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
      // Live: other devices' changes arrive at once; otherwise the relay is polled (and why).
      const live = s.live?.state ?? 'off';
      el.dataset.live = live;
      if (live === 'live') text += ' · live';
      else if (live !== 'off') text += ` · ${live === 'polling' ? 'polling' : 'reconnecting…'}`;
      el.textContent = text;
      el.title = s.reseedReason ?? s.error?.message ?? s.live?.reason ?? '';
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
  // One render at a time; a failed render is reported and the next one still runs.
  rendering = rendering
    .then(async () => {
      if (!engine) return;
      const todos = await engine.list('todos', { orderBy: 'createdAt', includeDeleted: $('show-deleted').checked });
      $('todos').replaceChildren(...todos.map(todoItem));
      $('empty').hidden = todos.length > 0;
      // Images no longer listed give their memory back.
      const shown = new Set(todos.map((t) => t.image).filter(Boolean));
      for (const [blobId, url] of imageUrls) {
        if (!shown.has(blobId)) {
          engine.revokeBlobUrl(url);
          imageUrls.delete(blobId);
        }
      }
    })
    .catch((e) => say(`Could not show the todos: ${describe(e)}`));
  return rendering;
}

async function act(fn) {
  if (!engine) {
    say('Still starting — try again in a moment.', 'info');
    return;
  }
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
$('have-phrase').onclick = () => {
  $('phrase-form').hidden = false;
  $('phrase-input').focus();
};
$('cancel-phrase').onclick = () => ($('phrase-form').hidden = true);
$('phrase-form').onsubmit = async (e) => {
  e.preventDefault();
  const phrase = $('phrase-input').value.trim();
  const check = await validateSecret(phrase);
  if (!check.ok) {
    say(`That phrase is not valid: ${check.message}`);
    return;
  }
  if (engine) {
    const replace = await confirmInPage(
      'Restoring replaces the todos on this device with those of the phrase. Changes not synced yet are lost.',
      'Replace this device\'s todos',
    );
    if (!replace) return;
  }
  $('phrase-form').hidden = true;
  $('phrase-input').value = '';
  try {
    if (engine) await forgetThisDevice();
    say('Restoring from the relay…', 'info');
    await start(phrase);
    const report = await engine.sync();
    const failed = report.relays.find((r) => r.error);
    say(failed ? `Could not restore from ${failed.url}: ${failed.error.message}` : '');
  } catch (err) {
    say(`Could not restore: ${describe(err)}`);
    if (!engine) showWelcome();
  }
};

$('start-fresh').onclick = async () => {
  const phrase = await createMnemonic();
  $('welcome').hidden = true;
  $('new-phrase').textContent = phrase;
  $('saved-it').checked = false;
  $('phrase-continue').disabled = true;
  $('new-phrase-panel').hidden = false;
};
$('saved-it').onchange = () => ($('phrase-continue').disabled = !$('saved-it').checked);
$('phrase-continue').onclick = async () => {
  const phrase = $('new-phrase').textContent;
  $('new-phrase-panel').hidden = true;
  $('new-phrase').textContent = '';
  try {
    await start(phrase);
  } catch (e) {
    say(`Could not start: ${describe(e)}`);
    showWelcome();
  }
};

$('log-out').onclick = async () => {
  $('menu').open = false;
  if (!engine) return;
  const out = await confirmInPage(
    'Log out on this device? Its todos and its copy of your recovery phrase are deleted here; your other devices and the relay keep theirs.',
    'Log out',
  );
  if (!out) return;
  try {
    await engine.sync().catch(() => {}); // send what is left, if the relay is reachable
    await forgetThisDevice();
    say('Logged out on this device.', 'info');
  } catch (e) {
    say(describe(e));
  }
  showWelcome();
};

$('purge').onclick = () =>
  act(async () => {
    const n = await engine.purgeDeleted();
    $('menu').open = false;
    say(`Purged ${n} deleted todo${n === 1 ? '' : 's'} here and on the relays.`, 'info');
  });

(async () => {
  try {
    config = await (await fetch('/config.json')).json();
    if (await hasStoredSecret(DB)) await start(); // welcome back: the engine has the secret
    else showWelcome();
  } catch (e) {
    say(`Could not start: ${describe(e)}`);
    if (e?.code === 'SECRET_LOST' || e?.code === 'NO_SECRET') showWelcome();
  }
})();
