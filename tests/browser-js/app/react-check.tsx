// simplysync/react's declarations under `tsc --strict`: typed hooks from the schema compile,
// and the lines after `@ts-expect-error` must not (a wrong table, column or value type).
import { defineSchema, type Engine } from 'simplysync';
import {
  createHooks, EngineProvider, useEngine, useQuery, useRelayStatuses, useSqlQuery, useStatus, useSuspenseQuery,
  useSuspenseSqlQuery, useSyncProgress, type EngineStatus, type QueryState,
} from 'simplysync/react';

const schema = defineSchema({
  tables: [{ name: 'todos', columns: [{ name: 'title', type: 'text' }, { name: 'done', type: 'boolean' }] }],
});
const typed = createHooks(schema);

export function TypedList() {
  const { data = [], isLoading, error } = typed.useQuery('todos', { where: { done: false }, orderBy: 'title desc' });
  const titles: (string | null)[] = data.map((t) => t.title);
  const { data: counts } = typed.useSqlQuery<{ n: number }>('SELECT count(*) AS n FROM todos');
  const engine: Engine<typeof schema> = typed.useEngine();
  const statuses = typed.useRelayStatuses();
  const progress = typed.useSyncProgress();
  // @ts-expect-error: no table "todo"
  typed.useQuery('todo');
  // @ts-expect-error: no column "titel" to filter on
  typed.useQuery('todos', { where: { titel: 'x' } });
  // @ts-expect-error: done is a boolean
  typed.useQuery('todos', { where: { done: 'no' } });
  // @ts-expect-error: rows of todos have no "label"
  console.log(data[0]?.label);
  const suspended: (boolean | null)[] = typed.useSuspenseQuery('todos', { orderBy: 'title' }).map((t) => t.done);
  const [first] = typed.useSuspenseSqlQuery<{ n: number }>('SELECT count(*) AS n FROM todos');
  const { relays, hasSynced, closed } = typed.useStatus();
  const code: string | undefined = closed?.code;
  // @ts-expect-error: no table "todo"
  typed.useSuspenseQuery('todo');
  console.log(suspended, first?.n, relays.length, hasSynced, code);
  return (
    <ul data-loading={isLoading} title={error?.message}>
      {titles.map((t, i) => <li key={i}>{t}</li>)}
      <li>{counts?.[0]?.n} {statuses[0]?.state} {progress?.eventsApplied} {engine.ownerId}</li>
    </ul>
  );
}

export function UntypedList() {
  const state: QueryState<{ id: string }[]> = useQuery('anything', { orderBy: 'id' });
  const rows = useSqlQuery('SELECT 1 AS one').data;
  const engine: Engine = useEngine();
  const statuses = useRelayStatuses();
  const progress = useSyncProgress();
  const status: EngineStatus = useStatus();
  const rows2: { id: string }[] = useSuspenseQuery('anything');
  const rows3 = useSuspenseSqlQuery('SELECT 1 AS one');
  console.log(status.hasSynced, rows2.length, rows3.length);
  return <p>{state.data?.length} {rows?.length} {engine.deviceId} {statuses.length} {progress?.done ? 'done' : ''}</p>;
}

export function Root({ engine }: { engine: Engine<typeof schema> }) {
  return (
    <EngineProvider engine={engine}>
      <TypedList />
      <UntypedList />
    </EngineProvider>
  );
}
