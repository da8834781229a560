//! Small sets as sorted vectors. A few table names or page numbers need neither a tree nor a
//! hash table, and each `BTreeSet` element type costs the npm package ~8 KB of tree code.

/// Adds `x` to the sorted, duplicate-free `set` unless it is there already.
pub(crate) fn insert<T: Ord>(set: &mut Vec<T>, x: T) {
    if let Err(at) = set.binary_search(&x) {
        set.insert(at, x);
    }
}

/// Whether the sorted `set` holds `x`.
pub(crate) fn contains<T: Ord>(set: &[T], x: &T) -> bool {
    set.binary_search(x).is_ok()
}
