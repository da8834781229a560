//! The bytes of a [`JsonString`](crate::json::JsonString): short ones in place, longer ones in
//! an allocation of their exact size. Most strings a page of events or a payload holds — every
//! object key, short ids and names — fit in place, so parsing them allocates nothing (an
//! allocation and its free were a large part of a restore's time: BENCHMARKS.md, issue 17
//! round twenty-nine). The type is as large as a `Vec<u8>` on every target.

use std::hash::{Hash, Hasher};

/// Bytes kept in place: as many as fit beside a tag and a length in the size of a boxed slice
/// and a word (22 on 64-bit targets, 10 on wasm32).
const INLINE: usize = std::mem::size_of::<Box<[u8]>>() + std::mem::size_of::<usize>() - 2;

// On every target, wasm32 included (where the package is built), not only where tests run.
const _: () = assert!(std::mem::size_of::<Wtf8>() == std::mem::size_of::<Vec<u8>>());

#[derive(Clone)]
pub(crate) enum Wtf8 {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl Wtf8 {
    #[inline(never)] // one copy of it in the package: every `Json::from("…")` calls it
    pub(crate) fn from_slice(bytes: &[u8]) -> Wtf8 {
        if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            Wtf8::Inline(bytes.len() as u8, buf)
        } else {
            Wtf8::Heap(bytes.into())
        }
    }

    /// Takes `bytes` over: kept in place when short, else in its allocation (shrunk to fit).
    #[inline(never)]
    pub(crate) fn from_vec(bytes: Vec<u8>) -> Wtf8 {
        if bytes.len() <= INLINE {
            Wtf8::from_slice(&bytes)
        } else {
            Wtf8::Heap(bytes.into_boxed_slice())
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Wtf8::Inline(len, buf) => &buf[..usize::from(*len)],
            Wtf8::Heap(bytes) => bytes,
        }
    }

    #[inline(never)]
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Wtf8::Inline(len, buf) => buf[..usize::from(len)].to_vec(),
            Wtf8::Heap(bytes) => bytes.into_vec(),
        }
    }
}

impl Default for Wtf8 {
    fn default() -> Self {
        Wtf8::Inline(0, [0; INLINE])
    }
}

impl PartialEq for Wtf8 {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Wtf8 {}

impl Hash for Wtf8 {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bytes_stay_in_place_and_long_ones_are_boxed_and_both_read_back() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 200] {
            let bytes: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for w in [Wtf8::from_slice(&bytes), Wtf8::from_vec(bytes.clone())] {
                assert_eq!(matches!(w, Wtf8::Inline(..)), len <= INLINE, "{len}");
                assert_eq!(w.as_slice(), &bytes[..]);
                assert_eq!(w.clone().into_vec(), bytes);
            }
        }
    }

    #[test]
    fn equal_bytes_are_equal_and_hash_alike_wherever_they_are_kept() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |w: &Wtf8| {
            let mut h = DefaultHasher::new();
            w.hash(&mut h);
            h.finish()
        };
        let short = Wtf8::from_slice(b"key");
        let boxed = Wtf8::Heap(b"key".as_slice().into());
        assert!(short == boxed);
        assert_eq!(hash(&short), hash(&boxed));
        assert!(short != Wtf8::from_slice(b"kez"));
    }

    #[test]
    fn it_is_as_large_as_a_vec() {
        assert_eq!(std::mem::size_of::<Wtf8>(), std::mem::size_of::<Vec<u8>>());
    }
}
