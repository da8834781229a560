//! A JSON object's members: one vector of `(key, value)` pairs, keys unique and sorted in
//! UTF-16 code-unit order (the order canonical JSON writes them in).
//!
//! Not a `BTreeMap`: the objects the engine reads are small — an op, a row, a payload, a
//! page's event — and a tree allocated a node of eleven slots for each (~700 bytes for three
//! members), searched and freed it node by node. A sorted vector is one allocation of the
//! members' own size, found by binary search and built in one pass from text that is already
//! in order (every canonical payload). Text out of order is sorted once, not inserted member by
//! member, so a hostile object of n keys costs O(n log n), never O(n²) (BENCHMARKS.md, issue
//! 17 round twenty-five).

use std::fmt;

use crate::json::{cmp_wtf8, Json, JsonString};

/// An object's members, keys unique, iterated in UTF-16 code-unit order.
#[derive(Clone, PartialEq, Default)]
pub struct JsonObject(Vec<(JsonString, Json)>);

impl JsonObject {
    /// An empty object.
    pub fn new() -> Self {
        JsonObject(Vec::new())
    }

    /// The object of `members` in any order; like `JSON.parse`, a repeated key keeps its last
    /// value.
    pub fn from_members(mut members: Vec<(JsonString, Json)>) -> Self {
        let in_order = members.windows(2).all(|w| cmp_wtf8(w[0].0.as_wtf8(), w[1].0.as_wtf8()).is_lt());
        if !in_order {
            // Stable: of equal keys the last given stays last, and is the one kept.
            crate::sort::stable_sort_by(&mut members, |a, b| cmp_wtf8(a.0.as_wtf8(), b.0.as_wtf8()).is_lt());
            let mut unique: Vec<(JsonString, Json)> = Vec::with_capacity(members.len());
            for m in members {
                match unique.last_mut() {
                    Some(last) if last.0 == m.0 => *last = m,
                    _ => unique.push(m),
                }
            }
            members = unique;
        }
        JsonObject(members)
    }

    /// How many members it has.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| cmp_wtf8(k.as_wtf8(), key))
    }

    /// The value of member `key`.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.find(key.as_bytes()).ok().map(|i| &self.0[i].1)
    }

    /// Sets member `key`, returning the value it replaces. Moves the members after it: for a
    /// few members at a time, not to build a large object (use [`JsonObject::from_members`]).
    pub fn insert(&mut self, key: JsonString, value: Json) -> Option<Json> {
        match self.find(key.as_wtf8()) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Takes member `key` out.
    pub fn remove(&mut self, key: &str) -> Option<Json> {
        self.find(key.as_bytes()).ok().map(|i| self.0.remove(i).1)
    }

    /// The members in key order.
    pub fn iter(&self) -> std::slice::Iter<'_, (JsonString, Json)> {
        self.0.iter()
    }
}

impl IntoIterator for JsonObject {
    type Item = (JsonString, Json);
    type IntoIter = std::vec::IntoIter<(JsonString, Json)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a JsonObject {
    type Item = &'a (JsonString, Json);
    type IntoIter = std::slice::Iter<'a, (JsonString, Json)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Debug for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, v)| (k, v))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(o: &JsonObject) -> Vec<String> {
        o.iter().map(|(k, _)| k.to_string_lossy()).collect()
    }

    fn members(pairs: &[(&str, u32)]) -> Vec<(JsonString, Json)> {
        pairs.iter().map(|(k, v)| (JsonString::from(*k), Json::from(*v))).collect()
    }

    #[test]
    fn members_in_any_order_come_out_in_code_unit_order() {
        let o = JsonObject::from_members(members(&[("b", 1), ("\u{FFFF}", 2), ("10", 3), ("\u{10000}", 4), ("2", 5)]));
        assert_eq!(keys(&o), ["10", "2", "b", "\u{10000}", "\u{FFFF}"]);
        assert_eq!(o.get("\u{FFFF}"), Some(&Json::from(2u32)));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_in_order_or_not() {
        let sorted_dup = JsonObject::from_members(members(&[("a", 1), ("a", 2), ("b", 3)]));
        assert_eq!((sorted_dup.len(), sorted_dup.get("a")), (2, Some(&Json::from(2u32))));
        let shuffled = JsonObject::from_members(members(&[("b", 1), ("a", 2), ("b", 3), ("a", 4), ("b", 5)]));
        assert_eq!(keys(&shuffled), ["a", "b"]);
        assert_eq!((shuffled.get("a"), shuffled.get("b")), (Some(&Json::from(4u32)), Some(&Json::from(5u32))));
    }

    #[test]
    fn insert_replaces_or_places_a_key_where_it_sorts_and_remove_takes_it_out() {
        let mut o = JsonObject::new();
        for (k, v) in [("m", 1u32), ("a", 2), ("z", 3), ("m", 4)] {
            o.insert(JsonString::from(k), Json::from(v));
        }
        assert_eq!(keys(&o), ["a", "m", "z"]);
        assert_eq!(o.get("m"), Some(&Json::from(4u32)));
        assert_eq!(o.remove("m"), Some(Json::from(4u32)));
        assert_eq!((o.remove("m"), o.get("m"), keys(&o)), (None, None, vec!["a".to_owned(), "z".to_owned()]));
    }

    #[test]
    fn a_key_is_found_among_many_and_a_prefix_is_not_a_key() {
        let o = JsonObject::from_members(
            (0..300u32).rev().map(|i| (JsonString::from(format!("k{i}")), Json::from(i))).collect(),
        );
        for i in 0..300u32 {
            assert_eq!(o.get(&format!("k{i}")), Some(&Json::from(i)));
        }
        assert_eq!((o.get("k"), o.get("k3000"), o.len()), (None, None, 300));
    }
}
