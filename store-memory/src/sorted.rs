//! The tables of `SpinMemoryStore`: one vector of entries per table, kept
//! sorted by key (crate docs, "Two stores, one transaction code").

use alloc::vec::Vec;
use core::ops::Bound;

use portcullis_core::store::{Entry, Table};

use crate::Key;
use crate::sealed::TableMap;

/// A table as a vector of `(key, value)` sorted by key, no key twice.
pub struct SortedMap(Vec<(Key, Vec<u8>)>);

impl SortedMap {
    /// Where `key` is, or where it would go.
    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_bytes().cmp(key))
    }

    /// How many entries sort before `key`, or up to and including it.
    fn count_below(&self, key: &[u8], including: bool) -> usize {
        self.0
            .partition_point(|(k, _)| k.as_bytes() < key || (including && k.as_bytes() == key))
    }
}

impl TableMap for SortedMap {
    fn empty() -> [Self; Table::ALL.len()] {
        Table::ALL.map(|_| Self(Vec::new()))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.find(key).ok().map(|at| &self.0[at].1)
    }

    fn insert(&mut self, key: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        match self.find(key) {
            Ok(at) => Some(core::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (Key::new(key), value));
                None
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.find(key).ok().map(|at| self.0.remove(at).1)
    }

    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Entry> {
        let from = match start {
            Bound::Unbounded => 0,
            Bound::Included(key) => self.count_below(key, false),
            Bound::Excluded(key) => self.count_below(key, true),
        };
        let to = match end {
            Bound::Unbounded => self.0.len(),
            Bound::Included(key) => self.count_below(key, true),
            Bound::Excluded(key) => self.count_below(key, false),
        };
        self.0
            .get(from..to)
            .unwrap_or_default()
            .iter()
            .take(limit)
            .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeMap;
    use core::ops::RangeBounds;

    use super::*;

    /// Inserts, replacements and removals in a scrambled order, short and
    /// long keys: the sorted vector holds what a `BTreeMap` holds and
    /// answers every range as filtering the model's entries does, empty
    /// and inverted ranges included.
    #[test]
    fn agrees_with_a_btree_map() {
        let mut map = SortedMap(Vec::new());
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let key = |n: u32| {
            let mut k = (n % 97).to_be_bytes().to_vec();
            if n.is_multiple_of(3) {
                k.extend_from_slice(&[9; 40]);
            }
            k
        };
        for i in 0u32..600 {
            let n = i.wrapping_mul(2_654_435_761) >> 7;
            let k = key(n);
            if n.is_multiple_of(5) {
                assert_eq!(map.remove(&k), model.remove(&k));
            } else {
                let v = i.to_le_bytes().to_vec();
                assert_eq!(map.insert(&k, v.clone()), model.insert(k.clone(), v));
            }
            assert_eq!(map.get(&k), model.get(&k));
        }
        assert_eq!(map.len(), model.len());
        let (a, b) = (key(20), key(60));
        let bounds = [
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(&a[..]), Bound::Excluded(&b[..])),
            (Bound::Excluded(&a[..]), Bound::Included(&b[..])),
            (Bound::Included(&b[..]), Bound::Excluded(&a[..])),
            (Bound::Excluded(&a[..]), Bound::Excluded(&a[..])),
            (Bound::Included(&a[..]), Bound::Included(&a[..])),
            (Bound::Unbounded, Bound::Excluded(&a[..])),
            (Bound::Excluded(&b[..]), Bound::Unbounded),
            (Bound::Included(&[][..]), Bound::Included(&[0xff; 50][..])),
        ];
        for (start, end) in bounds {
            for limit in [0, 1, 5, 100, usize::MAX] {
                let want: Vec<Entry> = model
                    .iter()
                    .filter(|(k, _)| (start, end).contains(&k.as_slice()))
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(
                    map.range(start, end, limit),
                    want,
                    "{start:?} {end:?} {limit}"
                );
            }
        }
        assert_eq!(map.get(&[1, 2, 3, 4, 5]), None);
        assert_eq!(map.remove(&[1, 2, 3, 4, 5]), None);
    }
}
