//! A stable sort small in code. The standard library's sorts are fast on every input, but each
//! element type one sorts adds ~4 KB (gzip) of their machinery to the npm package (BENCHMARKS.md,
//! issue 17 round twenty-eight); the package sorts a JSON object's members, a table's fields and
//! a run of rows through this one instead.

/// Runs sorted by insertion before they are merged: what most sorts are (a JSON object's
/// members, a table's fields) is sorted this way alone, in place.
const RUN: usize = 16;

/// Sorts `v` by `less` (a strict "comes before"), stably: items neither before the other keep
/// their order. Insertion in runs of 16, then runs merged bottom up — through their indexes,
/// so `T` is moved once, at the end. O(n log n) comparisons.
pub fn stable_sort_by<T>(v: &mut Vec<T>, less: impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n <= RUN {
        insertion_sort(v, &less);
        return;
    }
    let before = |a: &usize, b: &usize| less(&v[*a], &v[*b]);
    let mut from: Vec<usize> = (0..n).collect();
    for run in from.chunks_mut(RUN) {
        insertion_sort(run, &before);
    }
    let mut to = from.clone();
    let mut width = RUN;
    while width < n {
        for start in (0..n).step_by(2 * width) {
            let (mid, end) = ((start + width).min(n), (start + 2 * width).min(n));
            let (mut i, mut j) = (start, mid);
            for slot in &mut to[start..end] {
                // From the right run only when strictly before: equal items keep their order.
                if j < end && (i == mid || before(&from[j], &from[i])) {
                    *slot = from[j];
                    j += 1;
                } else {
                    *slot = from[i];
                    i += 1;
                }
            }
        }
        std::mem::swap(&mut from, &mut to);
        width *= 2;
    }
    let mut items: Vec<Option<T>> = std::mem::take(v).into_iter().map(Some).collect();
    v.extend(from.iter().filter_map(|&i| items[i].take()));
}

fn insertion_sort<T>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && less(&v[j], &v[j - 1]) {
            v.swap(j, j - 1);
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably_at_every_length_as_the_standard_librarys_stable_sort() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in [0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 100, 257, 1000] {
            // Keys with many repeats, each item tagged with its place.
            let items: Vec<(u64, usize)> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 7, i)
                })
                .collect();
            let mut expected = items.clone();
            expected.sort_by_key(|item| item.0);
            let mut sorted = items;
            stable_sort_by(&mut sorted, |a, b| a.0 < b.0);
            assert_eq!(sorted, expected, "{n} items");
        }
    }

    #[test]
    fn sorts_items_that_are_not_copied() {
        let mut words: Vec<String> = (0..40).rev().map(|i| format!("w{i:02}")).collect();
        stable_sort_by(&mut words, |a, b| a < b);
        assert_eq!(words, (0..40).map(|i| format!("w{i:02}")).collect::<Vec<_>>());
    }
}
