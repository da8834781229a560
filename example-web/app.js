// The SimplySync todo example: plain ES modules on top of the built npm package (/pkg/).
// The engine keeps the recovery phrase itself (sealed in its own database): the page never
// stores it. First visit: create a phrase (and write it down) or restore one; later visits
// reopen the engine without it. The list is a live query: it follows this tab's writes, other
// tabs' and other devices', and a todo being edited is left alone while others change. When the
// engine closes, the page says why (logged out in another tab, a newer version of the app, a
// lost key) and offers what fits.
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
let stopWatch = null;
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
  $('phrase-label').textContent = 'Recovery phrase of your other device';
  $('controls').disabled = true;
  $('todos').replaceChildren();
  $('identity').textContent = '';
  document.body.dataset.ready = 'welcome';
}

/** Opens the engine: with `secret` for a new or restored identity, without it to reopen. */
async function start(secret) {
  $('welcome').hidden = true;
  engine = await createEngine({ secret, relays: config.relays, schema: SCHEMA, dbName: DB });
  watchTodos();
  unsubscribers.push(() => stopWatch?.());
  unsubscribers.push(engine.onStatus((s) => showStatuses(s)));
  unsubscribers.push(engine.onProgress((p) => showProgress(p)));
  unsubscribers.push(engine.onClose((e) => closedElsewhere(e)));
  const storage = await engine.storage();
  $('identity').textContent = `owner ${engine.ownerId} · device ${engine.deviceId ?? '…'} · ${storage.mode}${engine.role === 'follower' ? ' · via another tab' : ''}`;
  if (!storage.durable) say(`Not saved on this device: ${storage.reason}`, 'info');
  $('controls').disabled = false;
  statusTimer = setInterval(refreshStatuses, 10000);
  showStatuses(engine.status);
  refreshStatuses();
  document.body.dataset.ready = 'app';
}

/** The engine closed without this page asking: say why, and offer what fits. */
function closedElsewhere(e) {
  if (!engine) return;
  detach();
  if (e.code === 'OUTDATED') {
    // A newer version of the app took the database over in another tab.
    $('todos').replaceChildren();
    $('outdated-panel').hidden = false;
    document.body.dataset.ready = 'outdated';
    return;
  }
  showWelcome();
  if (e.code === 'SECRET_LOST') {
    // The browser evicted the key that sealed the phrase: the phrase opens the data again.
    say('This browser lost the key to your todos. Enter your recovery phrase to open them again.', 'info');
    $('phrase-form').hidden = false;
  } else if (e.code === 'CLOSED' || e.code === 'DELETED') {
    say('You were logged out on this device (in another tab).', 'info');
  } else {
    say(`The todos closed: ${describe(e)}`);
  }
}

/** Detaches the page from the engine (timers, listeners, image URLs); returns the engine. */
function detach() {
  clearInterval(statusTimer);
  statusTimer = null;
  stopWatch = null;
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
  // Every relay closed this owner: another device changed the recovery phrase (a re-key).
  if (statuses.length && statuses.every((s) => s.state === 'closed')) {
    $('phrase-label').textContent = 'Your recovery phrase was changed on another device. Enter the new one:';
    $('phrase-form').hidden = false;
    return;
  }
  const down = statuses.find((s) => s.state === 'offline');
  if (down) say(`Relay ${down.url} is unreachable: ${down.error?.message ?? 'no answer'}. Changes are kept and sent when it is back.`);
  else if ($('message').textContent.startsWith('Relay ')) say('');
}

async function refreshStatuses() {
  if (!engine) return;
  try {
    showStatuses(await engine.getRelayStatuses({ refresh: true })); // with each relay's quota
  } catch (e) {
    say(describe(e));
    // What the user changed in the list did not happen: show the todos as they are.
    for (const li of $('todos').children) updateItem(li, li.todo);
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

/** A todo's list item; {@link updateItem} keeps it current. */
function todoItem(t) {
  const li = document.createElement('li');
  li.dataset.id = t.id;
  const box = document.createElement('input');
  box.type = 'checkbox';
  box.onchange = () => act(() => engine.update('todos', li.todo.id, { done: box.checked }));
  const text = document.createElement('span');
  text.className = 'text';
  text.onclick = () => {
    if (li.todo.deleted) return;
    text.contentEditable = 'true';
    text.focus();
  };
  const save = () => {
    text.contentEditable = 'false';
    const title = text.textContent.trim();
    if (title && title !== li.todo.title) act(() => engine.update('todos', li.todo.id, { title }));
    else text.textContent = li.todo.title;
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
  del.onclick = () => act(() => engine.delete('todos', li.todo.id));
  li.append(box, text, del);
  updateItem(li, t);
  return li;
}

/** Shows `t` in its item; a title being edited here is left as the user typed it. */
function updateItem(li, t) {
  li.todo = t;
  li.className = `${t.done ? 'done' : ''} ${t.deleted ? 'deleted' : ''}`;
  const [box, text, del] = li.children;
  box.checked = !!t.done;
  box.disabled = t.deleted;
  if (text.contentEditable !== 'true') text.textContent = t.title;
  del.hidden = t.deleted;
  let slot = li.querySelector('.image-slot');
  if (slot && slot.dataset.blob !== t.image) {
    slot.remove();
    slot = null;
  }
  if (t.image && !slot) {
    slot = document.createElement('span');
    slot.className = 'image-slot';
    slot.dataset.blob = t.image;
    slot.textContent = imageUrls.has(t.image) ? '' : 'loading image…';
    li.append(slot);
    observer.observe(slot);
  }
}

/** Follows the todos with a live query (again when "show deleted" changes). */
function watchTodos() {
  stopWatch?.();
  stopWatch = engine.watch(
    'todos',
    { orderBy: 'createdAt', includeDeleted: $('show-deleted').checked },
    (todos) => render(todos),
    (e) => say(`Could not show the todos: ${describe(e)}`),
  );
}

/**
 * Shows `todos`, keeping the items already shown (moved only when out of place): an item's
 * element, and a title being edited in it, survive another device's change.
 */
function render(todos) {
  const list = $('todos');
  const shown = new Map([...list.children].map((li) => [li.dataset.id, li]));
  const wanted = new Set(todos.map((t) => t.id));
  for (const [id, li] of shown) if (!wanted.has(id)) li.remove();
  todos.forEach((t, i) => {
    let li = shown.get(t.id);
    if (li) updateItem(li, t);
    else li = todoItem(t);
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] ?? null);
  });
  $('empty').hidden = todos.length > 0;
  // Images no longer listed give their memory back.
  const images = new Set(todos.map((t) => t.image).filter(Boolean));
  for (const [blobId, url] of imageUrls) {
    if (!images.has(blobId)) {
      engine.revokeBlobUrl(url);
      imageUrls.delete(blobId);
    }
  }
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
$('show-deleted').onchange = () => engine && watchTodos();
$('reload').onclick = () => location.reload();

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
