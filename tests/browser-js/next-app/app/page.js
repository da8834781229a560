// The App Router's page is a server component; the todo list is a client one (Todos.js).
import Todos from './Todos';

export default function Page() {
  return <Todos />;
}
