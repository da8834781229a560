//! A pulled page opened away from the engine's thread: the helper's half of [`super::io::PageOpener`]
//! (the browser's opener worker reads pages with [`PageToOpen`] in a second wasm instance with the same
//! keys), so a page sent ahead is decrypted while the engine applies the one before.

use super::io::Openings;
use super::relay_api::PullPage;
use crate::protocol::envelope::decrypt_envelope_bytes;
use crate::protocol::json_fields::FromJson;
use crate::protocol::{Identity, SyncEnvelope};

/// A pull's answer, read once for an opener: where the next page starts, then its openings.
#[derive(Debug)]
pub struct PageToOpen<'b> {
    page: PullPage<'b>,
}

impl<'b> PageToOpen<'b> {
    /// Reads a pull's answer `body`; `None` if it is not a page.
    pub fn read(body: &'b [u8]) -> Option<PageToOpen<'b>> {
        PullPage::read(body).ok().map(|page| PageToOpen { page })
    }

    /// The URL of the page after this one, for a pull sent to `url`, when the engine will ask
    /// for it (as its pull loop decides: events came, the cursor moved, the relay's head is
    /// not reached). An opener may fetch it ahead.
    pub fn next_url(&self, url: &str) -> Option<String> {
        let next = &self.page.next_cursor;
        let at_head = matches!((self.page.head_seq, next.parse::<u64>()), (Some(h), Ok(c)) if c >= h);
        if self.page.events.is_empty() || at_head {
            return None;
        }
        super::relay_api::RelayApi::next_pull_url(url, next)
    }

    /// Opens each envelope with `identity`, in page order: `None` for an item that is not an
    /// envelope or does not open (the engine opens that one again itself and files what
    /// fails). `None` for the whole page when `owner_id` is not `identity`'s (after a re-key,
    /// until the opener has the new keys).
    pub fn open(mut self, identity: &Identity, owner_id: &str) -> Option<Openings> {
        if owner_id != identity.owner_id() {
            return None;
        }
        let openings = self
            .page
            .events
            .iter_mut()
            .map(|item| {
                let env = match &mut item.members {
                    Ok(members) => SyncEnvelope::from_members(members, "envelope"),
                    Err(value) => SyncEnvelope::from_json(value, "envelope"),
                };
                decrypt_envelope_bytes(identity, &env.ok()?).ok()
            })
            .collect();
        Some(openings)
    }
}

/// [`PageToOpen::open`] of a pull's answer `body`.
pub fn open_page(identity: &Identity, owner_id: &str, body: &[u8]) -> Option<Openings> {
    PageToOpen::read(body)?.open(identity, owner_id)
}

/// `ends[i]` of an envelope that was not opened.
const NOT_OPENED: u32 = u32::MAX;

/// Openings as bytes: their count `n`, then each one's end in the plaintexts (or
/// `0xffffffff`), as little-endian u32s, then the plaintexts one after another.
pub fn pack_openings(openings: &Openings) -> Vec<u8> {
    let n = openings.len();
    let mut out = Vec::with_capacity(4 + 4 * n + openings.iter().flatten().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let mut end = 0u32;
    for o in openings {
        let e = o.as_ref().map_or(NOT_OPENED, |p| {
            end += p.len() as u32;
            end
        });
        out.extend_from_slice(&e.to_le_bytes());
    }
    openings.iter().flatten().for_each(|p| out.extend_from_slice(p));
    out
}

/// [`pack_openings`] undone; `None` if the bytes do not hold what they say (then nothing is used).
pub fn unpack_openings(bytes: &[u8]) -> Option<Openings> {
    let word = |i: usize| Some(u32::from_le_bytes(bytes.get(4 * i..4 * i + 4)?.try_into().ok()?));
    let n = word(0)? as usize;
    let plain = bytes.get(n.checked_add(1)?.checked_mul(4)?..)?;
    let mut start = 0usize;
    (1..=n)
        .map(|i| match word(i)? {
            NOT_OPENED => Some(None),
            end => {
                let p = plain.get(start..end as usize)?.to_vec();
                start = end as usize;
                Some(Some(p))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://r.example/base/v1/events?ownerId=o1&after=41&limit=1000";

    fn next_url(body: &str) -> Option<String> {
        PageToOpen::read(body.as_bytes()).unwrap().next_url(URL)
    }

    #[test]
    fn the_page_after_is_the_same_pull_after_the_new_cursor() {
        let page = r#"{"events":[{"x":1}],"nextCursor":"a b/42","headSeq":99}"#;
        assert_eq!(
            next_url(page).as_deref(),
            Some("http://r.example/base/v1/events?ownerId=o1&after=a%20b%2F42&limit=1000")
        );
        assert!(next_url(r#"{"events":[{"x":1}],"nextCursor":"42"}"#).is_some(), "no head reported");
    }

    #[test]
    fn no_page_after_an_empty_page_a_still_cursor_or_the_head() {
        assert_eq!(next_url(r#"{"events":[],"nextCursor":"42"}"#), None);
        assert_eq!(next_url(r#"{"events":[{"x":1}],"nextCursor":"41"}"#), None);
        assert_eq!(next_url(r#"{"events":[{"x":1}],"nextCursor":"99","headSeq":99}"#), None);
        assert!(PageToOpen::read(b"[]").is_none(), "not a page");
        assert!(PageToOpen::read(br#"{"nextCursor":"1"}"#).is_none());
        assert_eq!(super::super::relay_api::RelayApi::next_pull_url("http://r/v1/status", "1"), None);
    }
}

#[cfg(test)]
mod packing {
    use super::*;

    #[test]
    fn openings_pack_and_unpack_as_they_were() {
        let o: Openings = vec![Some(b"ab".to_vec()), None, Some(Vec::new()), Some(b"xyz".to_vec())];
        assert_eq!(unpack_openings(&pack_openings(&o)), Some(o));
        assert_eq!(unpack_openings(&pack_openings(&Vec::new())), Some(Vec::new()));
        let mut bad = pack_openings(&vec![Some(b"ab".to_vec())]);
        bad.pop();
        assert_eq!(unpack_openings(&bad), None, "an end past the plaintexts");
        assert_eq!(unpack_openings(&[5, 0, 0, 0]), None, "fewer ends than the count");
        assert_eq!(unpack_openings(&[0xff, 0xff, 0xff, 0xff]), None, "a count past any length");
    }
}
