//! What the engine tells the app: row changes (after each committed local batch and each
//! applied remote page), pull progress, and relay status changes.

use super::sorted;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::relay::RelayStatus;

/// Where a change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeSource {
    /// A mutation on this device.
    Local,
    /// Events pulled from a relay.
    Remote,
}

/// One changed row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RowChange {
    /// Table.
    pub table: String,
    /// Row id.
    pub id: String,
}

/// One committed batch of changes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangeEvent {
    /// Local or remote.
    pub source: ChangeSource,
    /// The tables touched.
    pub tables: Vec<String>,
    /// The rows touched.
    pub rows: Vec<RowChange>,
}

impl ChangeEvent {
    pub(crate) fn new(source: ChangeSource, rows: Vec<RowChange>) -> ChangeEvent {
        // Each table name cloned once, not once per row (and no sort of a vector of them).
        let mut tables: Vec<String> = Vec::new();
        for r in &rows {
            if let Err(at) = tables.binary_search(&r.table) {
                tables.insert(at, r.table.clone());
            }
        }
        ChangeEvent { source, tables, rows }
    }
}

/// Progress of a pull from one relay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The relay.
    pub relay: String,
    /// Pages pulled so far in this pass.
    pub pages: u64,
    /// Events received so far.
    pub events_received: u64,
    /// Events applied so far.
    pub events_applied: u64,
    /// Response bytes received so far.
    pub bytes: u64,
    /// The relay's head seq, when it reported one (for a percentage).
    pub head_seq: Option<u64>,
    /// The cursor after the last page.
    pub cursor: String,
    /// True on the last report of the pass.
    pub done: bool,
}

type ChangeFn = Rc<dyn Fn(&ChangeEvent)>;
type ProgressFn = Rc<dyn Fn(&Progress)>;
type StatusFn = Rc<dyn Fn(&[RelayStatus])>;
/// A change subscription: id, table filter (None = all), callback.
/// A subscription: its id, the tables it listens to (sorted; all when `None`), its callback.
type ChangeSub = (u64, Option<Vec<String>>, ChangeFn);

#[derive(Default)]
pub(crate) struct Listeners {
    next: Cell<u64>,
    changes: RefCell<Vec<ChangeSub>>,
    progress: RefCell<Vec<(u64, ProgressFn)>>,
    status: RefCell<Vec<(u64, StatusFn)>>,
}

impl Listeners {
    fn id(&self) -> u64 {
        let n = self.next.get() + 1;
        self.next.set(n);
        n
    }

    pub(crate) fn emit_change(&self, event: &ChangeEvent) {
        if event.rows.is_empty() {
            return;
        }
        // Clone the list first: a callback may subscribe or unsubscribe.
        let subs: Vec<_> = self.changes.borrow().iter().map(|(_, t, f)| (t.clone(), f.clone())).collect();
        for (tables, f) in subs {
            match tables {
                Some(t) if !event.tables.iter().any(|x| sorted::contains(&t, x)) => {}
                Some(t) => {
                    let rows: Vec<RowChange> =
                        event.rows.iter().filter(|r| sorted::contains(&t, &r.table)).cloned().collect();
                    f(&ChangeEvent::new(event.source, rows));
                }
                None => f(event),
            }
        }
    }

    pub(crate) fn emit_progress(&self, p: &Progress) {
        let subs: Vec<ProgressFn> = self.progress.borrow().iter().map(|(_, f)| f.clone()).collect();
        for f in subs {
            f(p);
        }
    }

    pub(crate) fn emit_status(&self, s: &[RelayStatus]) {
        let subs: Vec<StatusFn> = self.status.borrow().iter().map(|(_, f)| f.clone()).collect();
        for f in subs {
            f(s);
        }
    }
}

impl super::Engine {
    /// Calls `callback` after each committed local batch and each applied remote page that
    /// touches one of `tables` (all tables when `None`). Returns an id for [`Self::unsubscribe`].
    pub fn subscribe(&self, tables: Option<Vec<String>>, callback: impl Fn(&ChangeEvent) + 'static) -> u64 {
        let id = self.listeners.id();
        let set = tables.map(|t| {
            let mut set = Vec::with_capacity(t.len());
            for table in t {
                sorted::insert(&mut set, table);
            }
            set
        });
        self.listeners.changes.borrow_mut().push((id, set, Rc::new(callback)));
        id
    }

    /// Calls `callback` with pull progress (each page, and once done).
    pub fn on_progress(&self, callback: impl Fn(&Progress) + 'static) -> u64 {
        let id = self.listeners.id();
        self.listeners.progress.borrow_mut().push((id, Rc::new(callback)));
        id
    }

    /// Calls `callback` with every relay's status whenever one changes.
    pub fn on_status(&self, callback: impl Fn(&[RelayStatus]) + 'static) -> u64 {
        let id = self.listeners.id();
        self.listeners.status.borrow_mut().push((id, Rc::new(callback)));
        id
    }

    /// Removes a subscription or listener; returns whether it existed.
    pub fn unsubscribe(&self, id: u64) -> bool {
        let l = &self.listeners;
        let before = l.changes.borrow().len() + l.progress.borrow().len() + l.status.borrow().len();
        l.changes.borrow_mut().retain(|(i, _, _)| *i != id);
        l.progress.borrow_mut().retain(|(i, _)| *i != id);
        l.status.borrow_mut().retain(|(i, _)| *i != id);
        before != l.changes.borrow().len() + l.progress.borrow().len() + l.status.borrow().len()
    }
}
