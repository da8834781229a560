//! Durable browser storage without OPFS sync access handles (WebKit, Firefox private windows,
//! some WebViews): the "IndexedDB mirror" VFS.
//!
//! SQLite needs synchronous file I/O and IndexedDB is asynchronous, so the database is kept
//! whole in memory (one chunk per SQLite page) and mirrored to IndexedDB:
//! - reads and writes are synchronous, in memory; every write marks its pages dirty;
//! - [`flush`] — which the web edge awaits after every call that may have written, *between*
//!   SQLite transactions — hands the dirty pages and the file size to a JavaScript `store`
//!   function that writes them in **one** IndexedDB transaction (durability `strict`). IndexedDB
//!   transactions are atomic, so the mirror always holds a committed state of the database: a
//!   crash loses at most the commits not flushed yet, which no call acknowledged;
//! - a page dirtied again while its flush is in flight stays dirty for the next flush; a failed
//!   flush keeps everything dirty, to be retried.
//!
//! Rollback journals stay in memory (`journal_mode = MEMORY`): the mirror never sees a half
//! transaction, because flushes happen only between transactions.
//!
//! The JavaScript side (`js/idb-pages.js`) provides `load(name) → {pageSize, size, pages:
//! [[index, bytes]…]}` and `store(name, pageSize, size, pages)`; the byte layout is in
//! PROTOCOL.md ("IndexedDB storage").

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
use rusqlite::{Connection, OpenFlags};
use sqlite_wasm_rs::vfs::{
    register_vfs, AccessMode, FileKind, LockLevel, MemChunksFile, OpenOptions, OpenRequest, OpenedFile, OsCallback,
    SQLiteIoMethods, SQLiteVfs, SyncOptions, VfsError, VfsErrorCode, VfsFile, VfsResult, VfsStore,
};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::dirty_pages::DirtyPages;
use super::StoreError;

/// The VFS name.
pub const VFS_NAME: &str = "simplysync-idb";

/// One mirrored database: its pages in memory and which ones IndexedDB lacks.
struct Mirror {
    data: MemChunksFile,
    page_size: usize,
    size: u64,
    /// Page index → generation of its last write (a flush clears only what it wrote).
    dirty: DirtyPages,
    /// The size changed since the last flush.
    resized: bool,
    generation: u64,
}

impl Mirror {
    fn new(page_size: usize) -> Mirror {
        Mirror {
            data: MemChunksFile::new(page_size),
            page_size,
            size: 0,
            dirty: DirtyPages::default(),
            resized: false,
            generation: 0,
        }
    }
}

/// Open files by name: a list, not a map (a database has two or three files).
struct Named<T>(Vec<(String, Rc<RefCell<T>>)>);

impl<T> Default for Named<T> {
    fn default() -> Self {
        Named(Vec::new())
    }
}

impl<T> Named<T> {
    fn get(&self, name: &str) -> Option<&Rc<RefCell<T>>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Adds or replaces the file `name`.
    fn insert(&mut self, name: String, file: Rc<RefCell<T>>) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = file,
            None => self.0.push((name, file)),
        }
    }

    fn remove(&mut self, name: &str) {
        self.0.retain(|(n, _)| n != name);
    }
}

type Mirrors = Rc<RefCell<Named<Mirror>>>;

#[derive(Clone)]
struct AppData {
    os: Rc<dyn OsCallback>,
    /// Main database files (mirrored), by name.
    mirrors: Mirrors,
    /// Other files (journals, temporary files): memory only.
    scratch: Rc<RefCell<Named<MemChunksFile>>>,
    error: Rc<RefCell<Option<VfsError>>>,
}

enum Handle {
    Mirror(Rc<RefCell<Mirror>>),
    Scratch(Rc<RefCell<MemChunksFile>>),
}

impl VfsFile for Handle {
    fn read(&mut self, buf: &mut [u8], offset: u64) -> VfsResult<usize> {
        match self {
            Handle::Mirror(m) => {
                let mut m = m.borrow_mut();
                let size = m.size;
                let n = m.data.read(buf, offset)?;
                // Bytes past the end read as zeros (SQLite handles short reads).
                Ok(if offset >= size { 0 } else { n })
            }
            Handle::Scratch(f) => f.borrow_mut().read(buf, offset),
        }
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> VfsResult<()> {
        match self {
            Handle::Mirror(m) => {
                let mut m = m.borrow_mut();
                m.data.write(buf, offset)?;
                m.generation += 1;
                let (gen, page) = (m.generation, m.page_size as u64);
                let end = offset + buf.len() as u64;
                for index in offset / page..end.div_ceil(page) {
                    m.dirty.mark(index, gen);
                }
                if end > m.size {
                    m.size = end;
                    m.resized = true;
                }
                Ok(())
            }
            Handle::Scratch(f) => f.borrow_mut().write(buf, offset),
        }
    }

    fn truncate(&mut self, size: u64) -> VfsResult<()> {
        match self {
            Handle::Mirror(m) => {
                let mut m = m.borrow_mut();
                if size < m.size {
                    m.data.truncate(size)?;
                    m.size = size;
                    m.resized = true;
                    let page = m.page_size as u64;
                    m.dirty.keep_first(size.div_ceil(page) as usize);
                }
                Ok(())
            }
            Handle::Scratch(f) => f.borrow_mut().truncate(size),
        }
    }

    fn sync(&mut self, _options: SyncOptions) -> VfsResult<()> {
        // Durability comes from `flush`, which the web edge awaits before it acknowledges a call.
        Ok(())
    }

    fn size(&self) -> VfsResult<u64> {
        match self {
            Handle::Mirror(m) => Ok(m.borrow().size),
            Handle::Scratch(f) => f.borrow().size(),
        }
    }

    fn lock(&mut self, _level: LockLevel) -> VfsResult<()> {
        Ok(()) // one connection per database, in the one worker that runs it
    }

    fn unlock(&mut self, _level: LockLevel) -> VfsResult<()> {
        Ok(())
    }

    fn check_reserved_lock(&self) -> VfsResult<bool> {
        Ok(false)
    }
}

#[derive(Default, Clone, Copy)]
struct Store;

impl VfsStore for Store {
    type File = Handle;
    type AppData = AppData;

    fn record_error(data: &AppData, error: VfsError) {
        data.error.replace(Some(error));
    }

    fn last_error(data: &AppData) -> Option<VfsError> {
        data.error.borrow().clone()
    }

    fn open_file(data: &AppData, request: OpenRequest<'_>) -> VfsResult<OpenedFile<Handle>> {
        let options = request.options;
        let access = options.access();
        let Some(filename) = request.filename else {
            return Ok(OpenedFile { file: Handle::Scratch(Rc::default()), access });
        };
        let name = filename.path();
        if options.kind() == Some(FileKind::MainDb) {
            let mirror = data.mirrors.borrow().get(name).cloned().ok_or_else(|| {
                VfsError::new(VfsErrorCode::CantOpen, format!("{name:?} was not loaded from IndexedDB first").into())
            })?;
            return Ok(OpenedFile { file: Handle::Mirror(mirror), access });
        }
        let mut scratch = data.scratch.borrow_mut();
        let file = match scratch.get(name) {
            Some(f) => f.clone(),
            None if options.create() => {
                let f: Rc<RefCell<MemChunksFile>> = Rc::default();
                scratch.insert(name.into(), f.clone());
                f
            }
            None => return Err(VfsError::new(VfsErrorCode::CantOpen, format!("no file {name:?}").into())),
        };
        Ok(OpenedFile { file: Handle::Scratch(file), access })
    }

    fn close_file(data: &AppData, name: Option<&str>, _file: Handle, options: OpenOptions) -> VfsResult<()> {
        if let (Some(name), true) = (name, options.delete_on_close()) {
            data.scratch.borrow_mut().remove(name);
        }
        Ok(())
    }

    fn access(data: &AppData, name: &str, _mode: AccessMode) -> VfsResult<bool> {
        Ok(data.mirrors.borrow().contains_key(name) || data.scratch.borrow().contains_key(name))
    }

    fn full_pathname(_data: &AppData, name: &str) -> VfsResult<String> {
        Ok(name.into())
    }

    fn delete_file(data: &AppData, name: &str, _sync_dir: bool) -> VfsResult<()> {
        data.scratch.borrow_mut().remove(name);
        Ok(())
    }
}

#[derive(Default, Clone, Copy)]
struct Io;

impl SQLiteIoMethods for Io {
    type Store = Store;
}

#[derive(Default, Clone, Copy)]
struct Vfs;

impl SQLiteVfs<Io> for Vfs {
    type Os = dyn OsCallback;

    fn os(data: &AppData) -> &Self::Os {
        &*data.os
    }
}

thread_local! {
    static INSTALLED: RefCell<Option<AppData>> = const { RefCell::new(None) };
}

#[allow(unsafe_code)]
fn installed() -> Result<AppData, StoreError> {
    if let Some(data) = INSTALLED.with(|i| i.borrow().clone()) {
        return Ok(data);
    }
    let data = AppData {
        os: Rc::new(sqlite_wasm_rs::WasmOsCallback),
        mirrors: Rc::default(),
        scratch: Rc::default(),
        error: Rc::default(),
    };
    // SAFETY: registration happens once per module instance, on the one wasm32 thread that
    // also runs every SQLite call (so registration is serialized); the registration is kept for
    // the module's life (`into_raw`), so the VFS and its app data outlive every connection.
    let registration = unsafe { register_vfs::<Io, Vfs>(VFS_NAME, data.clone(), false) }
        .map_err(|e| StoreError::Opfs(format!("cannot register the IndexedDB VFS: {e}")))?;
    let _ = registration.into_raw();
    INSTALLED.with(|i| *i.borrow_mut() = Some(data.clone()));
    Ok(data)
}

/// The JavaScript side of the mirror: `load` and `store`.
#[derive(Clone)]
pub struct PageStore {
    load: Function,
    store: Function,
    /// `has(name) → Promise<bool>`: whether IndexedDB holds database `name` (optional).
    has: Option<Function>,
    /// `opfsHas(name) → Promise<bool>`: whether OPFS holds a pool for `name` (optional).
    opfs_has: Option<Function>,
}

impl std::fmt::Debug for PageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageStore")
    }
}

fn js_err(what: &str, e: JsValue) -> StoreError {
    let message = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"));
    StoreError::Opfs(format!("IndexedDB {what}: {message}"))
}

impl PageStore {
    /// Reads `{load, store}` functions from a JavaScript object.
    pub fn from_js(v: &JsValue) -> Result<PageStore, StoreError> {
        let f = |name: &str| -> Result<Function, StoreError> {
            Reflect::get(v, &name.into())
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok())
                .ok_or_else(|| StoreError::Opfs(format!("the IndexedDB page store lacks {name}()")))
        };
        let optional = |name: &str| Reflect::get(v, &name.into()).ok().and_then(|f| f.dyn_into::<Function>().ok());
        Ok(PageStore { load: f("load")?, store: f("store")?, has: optional("has"), opfs_has: optional("opfsHas") })
    }

    async fn ask(f: Option<&Function>, name: &str) -> bool {
        let Some(f) = f else { return false };
        let Ok(p) = f.call1(&JsValue::NULL, &name.into()) else { return false };
        JsFuture::from(Promise::from(p)).await.ok().and_then(|v| v.as_bool()).unwrap_or(false)
    }

    /// Whether IndexedDB already holds database `name` (`false` if unknown).
    pub async fn holds(&self, name: &str) -> bool {
        Self::ask(self.has.as_ref(), name).await
    }

    /// Whether OPFS holds a pool directory for database `name` (`false` if unknown).
    pub async fn opfs_holds(&self, name: &str) -> bool {
        Self::ask(self.opfs_has.as_ref(), name).await
    }
}

/// Loads database `name` from IndexedDB into memory and opens it on the mirror VFS. A new
/// database gets `page_size` pages.
pub async fn open_database(pages: &PageStore, name: &str, page_size: u32) -> Result<Connection, StoreError> {
    let data = installed()?;
    if !data.mirrors.borrow().contains_key(name) {
        let loaded = pages.load.call1(&JsValue::NULL, &name.into()).map_err(|e| js_err("load", e))?;
        let loaded = JsFuture::from(Promise::from(loaded)).await.map_err(|e| js_err("load", e))?;
        let get = |k: &str| Reflect::get(&loaded, &k.into()).ok().and_then(|v| v.as_f64());
        let stored_page = get("pageSize").map(|p| p as usize).filter(|p| *p > 0);
        let mut mirror = Mirror::new(stored_page.unwrap_or(page_size as usize));
        let size = get("size").unwrap_or(0.0) as u64;
        let list: Array = Reflect::get(&loaded, &"pages".into()).map_err(|e| js_err("load", e))?.into();
        for entry in list.iter() {
            let entry: Array = entry.into();
            let index = entry.get(0).as_f64().unwrap_or(0.0) as u64;
            let bytes = Uint8Array::new(&entry.get(1)).to_vec();
            mirror.data.write(&bytes, index * mirror.page_size as u64).map_err(|e| StoreError::Opfs(e.to_string()))?;
        }
        mirror.data.truncate(size).map_err(|e| StoreError::Opfs(e.to_string()))?;
        mirror.size = size;
        if size == 0 {
            // A new database: prove IndexedDB takes writes here (a private mode or a full quota
            // may refuse them) before anyone relies on it being durable.
            let args = Array::of4(&name.into(), &(mirror.page_size as f64).into(), &0.into(), &Array::new().into());
            let probe = pages.store.apply(&JsValue::NULL, &args).map_err(|e| js_err("first write", e))?;
            JsFuture::from(Promise::from(probe)).await.map_err(|e| js_err("first write", e))?;
        }
        data.mirrors.borrow_mut().insert(name.to_owned(), Rc::new(RefCell::new(mirror)));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(name, flags, VFS_NAME)?;
    super::size_lookaside(&conn);
    conn.execute_batch(&format!("PRAGMA page_size = {page_size};"))?;
    // Journals live in memory: flushes see only committed states (module docs).
    conn.execute_batch(
        "PRAGMA journal_mode = MEMORY; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY; PRAGMA cache_size = -32768;",
    )?;
    Ok(conn)
}

/// Writes what changed in database `name` since the last flush to IndexedDB, in one
/// transaction, and resolves once it committed. Call it between transactions.
pub async fn flush(pages: &PageStore, name: &str) -> Result<(), StoreError> {
    let Some(mirror) = INSTALLED.with(|i| i.borrow().as_ref().and_then(|d| d.mirrors.borrow().get(name).cloned()))
    else {
        return Ok(());
    };
    let (batch, taken, page_size, size) = {
        let mut m = mirror.borrow_mut();
        if m.dirty.is_empty() && !m.resized {
            return Ok(());
        }
        let page = m.page_size;
        let batch = Array::new();
        let taken = m.dirty.list();
        for &(index, _) in &taken {
            let start = index * page as u64;
            if start >= m.size {
                continue;
            }
            let mut buf = vec![0u8; page.min((m.size - start) as usize)];
            m.data.read(&mut buf, start).map_err(|e| StoreError::Opfs(e.to_string()))?;
            let pair = Array::new();
            pair.push(&JsValue::from_f64(index as f64));
            pair.push(&Uint8Array::from(buf.as_slice()).into());
            batch.push(&pair.into());
        }
        m.resized = false;
        (batch, taken, page, m.size)
    };
    let args = Array::of4(&name.into(), &(page_size as f64).into(), &(size as f64).into(), &batch.into());
    let out = pages.store.apply(&JsValue::NULL, &args);
    let result = match out {
        Ok(p) => JsFuture::from(Promise::from(p)).await.map(|_| ()),
        Err(e) => Err(e),
    };
    let mut m = mirror.borrow_mut();
    match result {
        Ok(()) => {
            for (index, gen) in taken {
                m.dirty.clear_if(index, gen);
            }
            Ok(())
        }
        Err(e) => {
            m.resized = true; // everything stays dirty for the next attempt
            Err(js_err("commit", e))
        }
    }
}

/// Forgets database `name`'s in-memory copy (after its IndexedDB database was deleted).
pub fn forget(name: &str) {
    INSTALLED.with(|i| {
        if let Some(d) = i.borrow().as_ref() {
            d.mirrors.borrow_mut().remove(name);
        }
    });
}

/// Pages not yet flushed, for tests.
pub fn dirty_pages(name: &str) -> usize {
    INSTALLED.with(|i| {
        i.borrow().as_ref().and_then(|d| d.mirrors.borrow().get(name).map(|m| m.borrow().dirty.len())).unwrap_or(0)
    })
}
