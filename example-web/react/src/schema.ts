// The schema, declared once: every call and hook below is typed by it (table and column names,
// value types). The same tables as the plain example, so one recovery phrase works in both.
import { defineSchema } from 'simplysync';
import { createHooks } from 'simplysync/react';

export const schema = defineSchema({
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
});

export const { useEngine, useSuspenseQuery, useSqlQuery, useRelayStatuses, useStatus, useSyncProgress } = createHooks(schema);
