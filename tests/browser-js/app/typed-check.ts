// Typed rows: compiled with `tsc --strict` against the installed package. The schema is declared
// once; every call below is checked against it — the good ones compile, and each line after a
// `@ts-expect-error` must NOT compile (tsc fails if such a line compiles: the check is real).
import { createEngine, defineSchema, type Engine, type RowOf } from 'simplysync';

const schema = defineSchema({
  schemaVersion: 1,
  tables: [
    { name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }, { name: 'position', type: 'integer' }] },
    { name: 'tags', columns: [{ name: 'label', type: 'text' }, { name: 'meta', type: 'json' }, { name: 'icon', type: 'blob' }] },
    {
      name: 'notes',
      merge: 'column',
      indexes: [['rank', 'updatedAt']],
      columns: [{ name: 'body', type: 'text' }, { name: 'rank', type: 'integer', default: 0 }],
    },
  ],
});

type Todo = RowOf<typeof schema, 'todos'>;

export async function typed(secret: string): Promise<void> {
  const engine = await createEngine({ secret, relays: [], schema });
  const typedEngine: Engine<typeof schema> = engine;

  // The happy path: names and value types as declared.
  const todo: Todo = await engine.insert('todos', { id: 'a', title: 'milk', done: false, position: 1 });
  const title: string | null = todo.title;
  const done: boolean | null = todo.done;
  const position: number | null = todo.position;
  const when: string = todo.updatedAt;
  await engine.insert('todos', { id: 'b' }); // every declared column may be left out (null)
  const rank: number | null = (await engine.insert('notes', { id: 'n', body: 'x' })).rank;
  await engine.update('todos', 'a', { done: true });
  await engine.upsert('tags', { id: 't', label: 'home', meta: { color: [1, 2] }, icon: null });
  const tags = await engine.list('tags', { where: { label: 'home' }, orderBy: 'label desc', limit: 5 });
  const meta = tags[0]?.meta;
  const found = await engine.get('todos', 'a');
  const maybeTitle: string | null | undefined = found?.title;
  await engine.transaction([
    { op: 'insert', table: 'todos', row: { id: 'c', title: 'x' } },
    { op: 'update', table: 'tags', id: 't', patch: { label: 'work' } },
    { op: 'delete', table: 'todos', id: 'c' },
  ]);
  const stop = engine.watch('todos', { where: { done: false }, orderBy: 'position' }, (rows) => {
    const first: Todo | undefined = rows[0];
    console.log(first?.title);
  });
  const runs: number = stop.runs;
  stop();
  engine.watch('tags', (rows) => console.log(rows.map((r) => r.label)))();
  engine.watchQuery<{ n: number }>('SELECT count(*) AS n FROM todos', [], ([row]) => console.log(row?.n))();
  const counted = await engine.query<{ n: number }>('SELECT count(*) AS n FROM todos');
  engine.watchQuery<{ n: number }>('SELECT count(*) AS n FROM tags', ([row]) => console.log(row?.n))();
  engine.subscribe(['todos', 'tags'], () => {})();
  console.log(title, done, position, when, meta, maybeTitle, runs, counted[0]?.n, typedEngine.ownerId);

  // Each of these must fail to compile.
  // @ts-expect-error: no table "todo"
  await engine.insert('todo', { id: 'x' });
  // @ts-expect-error: no column "titel" in todos
  await engine.insert('todos', { id: 'x', titel: 'milk' });
  // @ts-expect-error: done is a boolean
  await engine.insert('todos', { id: 'x', done: 'yes' });
  // @ts-expect-error: position is a number
  await engine.update('todos', 'a', { position: '1' });
  // @ts-expect-error: every row needs its id
  await engine.upsert('todos', { title: 'no id' });
  // @ts-expect-error: label is a column of tags, not of todos
  await engine.list('todos', { where: { label: 'home' } });
  // @ts-expect-error: orderBy names a column of the table
  await engine.list('todos', { orderBy: 'label' });
  // @ts-expect-error: orderBy's direction is asc or desc
  await engine.list('todos', { orderBy: 'title up' });
  // @ts-expect-error: rows of todos have no label
  engine.watch('todos', (rows) => console.log(rows[0]?.label));
  // @ts-expect-error: a transaction's patch is checked against its table
  await engine.transaction([{ op: 'update', table: 'todos', id: 'a', patch: { label: 'x' } }]);
  // @ts-expect-error: title is a string, not a number
  const wrong: number | null = todo.title;
  // @ts-expect-error: no such table to subscribe to
  engine.subscribe(['todo'], () => {});
  const either = Math.random() < 0.5 ? 'todos' : 'tags';
  // @ts-expect-error: a table name that may be either table takes no columns of one of them
  await engine.insert(either, { id: 'x', label: 'home' });
  // @ts-expect-error: a column type the engine does not know
  defineSchema({ tables: [{ name: 't', columns: [{ name: 'c', type: 'varchar' }] }] });
  // @ts-expect-error: a merge mode the engine does not know
  defineSchema({ tables: [{ name: 't', merge: 'field', columns: [] }] });
  // @ts-expect-error: an index is a list of column names
  defineSchema({ tables: [{ name: 't', indexes: ['c'], columns: [{ name: 'c', type: 'text' }] }] });
  console.log(wrong, rank);
}

// The same object literal written inline is typed too, without defineSchema.
export async function inline(secret: string): Promise<void> {
  const engine = await createEngine({
    secret,
    relays: [],
    schema: { tables: [{ name: 'notes', columns: [{ name: 'body', type: 'text' }] }] },
  });
  const note = await engine.insert('notes', { id: 'n', body: 'hello' });
  const body: string | null = note.body;
  // @ts-expect-error: no column "text" in notes
  await engine.insert('notes', { id: 'n2', text: 'hello' });
  console.log(body);
}
