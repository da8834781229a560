//! Which pages of a mirrored database (the IndexedDB VFS, `idb.rs`) IndexedDB lacks.

/// The pages written since their last flush, each with the generation of its last write.
/// Dense, by page index (0: clean; generations start at 1): the whole database is in memory
/// already, this adds 8 bytes a page, and a flush walks the pages in order.
#[derive(Default)]
pub(crate) struct DirtyPages {
    generations: Vec<u64>,
    count: usize,
}

impl DirtyPages {
    pub(crate) fn mark(&mut self, index: u64, generation: u64) {
        let i = index as usize;
        if i >= self.generations.len() {
            self.generations.resize(i + 1, 0);
        }
        if self.generations[i] == 0 {
            self.count += 1;
        }
        self.generations[i] = generation;
    }

    /// Clears page `index` if its last write is still `generation` (not written again since).
    pub(crate) fn clear_if(&mut self, index: u64, generation: u64) {
        if let Some(g) = self.generations.get_mut(index as usize).filter(|g| **g == generation) {
            *g = 0;
            self.count -= 1;
        }
    }

    /// Forgets the pages at `pages` and beyond (the file was truncated).
    pub(crate) fn keep_first(&mut self, pages: usize) {
        if pages < self.generations.len() {
            self.count -= self.generations[pages..].iter().filter(|g| **g != 0).count();
            self.generations.truncate(pages);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `(page index, generation)` of every dirty page, in page order.
    pub(crate) fn list(&self) -> Vec<(u64, u64)> {
        let dirty = self.generations.iter().enumerate().filter(|(_, g)| **g != 0);
        dirty.map(|(i, g)| (i as u64, *g)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::DirtyPages;

    #[test]
    fn a_page_is_clean_again_only_once_its_last_write_was_flushed() {
        let mut d = DirtyPages::default();
        assert!(d.is_empty());
        d.mark(5, 1);
        d.mark(2, 1);
        d.mark(5, 2);
        assert_eq!(d.list(), [(2, 1), (5, 2)], "in page order, each with its last write");
        assert_eq!(d.len(), 2);
        d.clear_if(5, 1); // a flush of the first write: page 5 was written again since
        d.clear_if(2, 1);
        assert_eq!(d.list(), [(5, 2)]);
        d.clear_if(5, 2);
        d.clear_if(9, 1); // never written: nothing to clear
        assert!(d.is_empty() && d.list().is_empty());
    }

    #[test]
    fn a_truncation_forgets_the_pages_past_the_new_end_and_only_those() {
        let mut d = DirtyPages::default();
        for i in [0, 3, 4, 7] {
            d.mark(i, 1);
        }
        d.keep_first(4);
        assert_eq!(d.list(), [(0, 1), (3, 1)]);
        assert_eq!(d.len(), 2);
        d.keep_first(10); // growing keeps everything
        assert_eq!(d.len(), 2);
        d.keep_first(0);
        assert!(d.is_empty());
        d.mark(1, 3);
        assert_eq!(d.list(), [(1, 3)]);
    }
}
