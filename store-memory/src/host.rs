//! The tables of [`MemoryStore`](crate::MemoryStore): hash maps for the
//! tables read by key only, B-trees for those the engine range-scans (crate
//! docs, "Two stores, one transaction code").

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::ops::Bound;

use hashbrown::{HashMap, hash_map::EntryRef};
use portcullis_core::store::{Entry, Table};
use siphasher::sip::SipHasher13;

use crate::Key;
use crate::sealed::TableMap;

/// Whether the engine range-scans `table`, so the store keeps it ordered.
///
/// The engine scans a user's and a site's grants (`GrantIndex`), the sweep's
/// due entries (`Expiry`), a grant's requests and their outcomes
/// (`Requests`, `Outcomes`), a user's agent tokens (`AgentTokens`) and a
/// browser session's tabs (`Tabs`), and a consent's apps at its code's
/// exchange (`GrantApps`, a one-key range); everything else (an accepted
/// client assertion's `jti`, `ClientAssertions`, and the unfinished request
/// an identical call joins, `WaitingCalls`, among them) it reads by key
/// only.
/// A table the core adds later is kept ordered until it is listed here.
const fn ordered(table: Table) -> bool {
    !matches!(
        table,
        Table::Meta
            | Table::Sites
            | Table::Clients
            | Table::Codes
            | Table::Grants
            | Table::Approvals
            | Table::ClientAssertions
            | Table::WaitingCalls
    )
}

/// The secret key of a store's hashed tables: SipHash-1-3 (the hash of
/// `std`'s `HashMap`) under 128 random bits drawn when the store is made.
/// Keys are partly chosen by callers (a request id, a subject), and a
/// caller who cannot predict the hash cannot make their keys collide and
/// turn lookups into scans of one long chain.
#[derive(Clone, Copy)]
pub struct Seed {
    k0: u64,
    k1: u64,
}

impl Seed {
    /// 128 bits from `std`'s own per-process random `SipHash` keys (drawn
    /// from the operating system), through that keyed hash.
    fn from_std() -> Self {
        use core::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        Self {
            k0: state.hash_one(0u8),
            k1: state.hash_one(1u8),
        }
    }
}

impl core::hash::BuildHasher for Seed {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

/// One table of a [`MemoryStore`](crate::MemoryStore): a hash map for a table read by key
/// only (one probe, about one cache miss, however many records), a B-tree
/// for a table the engine range-scans.
pub enum HostMap {
    /// Point reads only; a range over it sorts the keys that fall inside.
    Hashed(HashMap<Key, Vec<u8>, Seed>),
    /// Ordered keys.
    Ordered(BTreeMap<Key, Vec<u8>>),
}

impl TableMap for HostMap {
    /// Empty tables, the hashed ones under a fresh random key.
    fn empty() -> [Self; Table::ALL.len()] {
        let seed = Seed::from_std();
        Table::ALL.map(|table| {
            if ordered(table) {
                Self::Ordered(BTreeMap::new())
            } else {
                Self::Hashed(HashMap::with_hasher(seed))
            }
        })
    }

    fn len(&self) -> usize {
        match self {
            Self::Hashed(map) => map.len(),
            Self::Ordered(map) => map.len(),
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        match self {
            Self::Hashed(map) => map.get(key),
            Self::Ordered(map) => map.get(key),
        }
    }

    fn insert(&mut self, key: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        match self {
            // An update (a rotated grant) keeps the map's key and swaps
            // the value; only an insert copies the key into the map.
            Self::Hashed(map) => match map.entry_ref(key) {
                EntryRef::Occupied(mut stored) => Some(stored.insert(value)),
                EntryRef::Vacant(slot) => {
                    slot.insert_with_key(Key::new(key), value);
                    None
                }
            },
            // An inline key costs no allocation; the map keeps its own
            // copy of a key it already holds.
            Self::Ordered(map) => map.insert(Key::new(key), value),
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Hashed(map) => map.remove(key),
            Self::Ordered(map) => map.remove(key),
        }
    }

    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Entry> {
        match self {
            Self::Ordered(map) => range_of(map, start, end, limit),
            Self::Hashed(map) => {
                // A cold path (the engine never scans these tables): order
                // the keys inside through the map type ordered tables use.
                let mut inside = BTreeMap::new();
                for (k, v) in map {
                    if core::ops::RangeBounds::contains(&(start, end), &k.as_bytes()) {
                        inside.insert(k.clone(), v.clone());
                    }
                }
                range_of(&inside, Bound::Unbounded, Bound::Unbounded, limit)
            }
        }
    }
}

fn range_of(
    map: &BTreeMap<Key, Vec<u8>>,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    limit: usize,
) -> Vec<Entry> {
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (start, end)
        && (s > e || (s == e && !matches!((start, end), (Bound::Included(_), Bound::Included(_)))))
    {
        // BTreeMap::range panics on an inverted or empty-exclusive range.
        return Vec::new();
    }
    map.range::<[u8], _>((start, end))
        .take(limit)
        .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{INLINE, Tables};

    /// A range's two bounds.
    type RangeOf<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

    /// A B-tree table ranges over inline and heap keys in byte order,
    /// across the boundary.
    #[test]
    fn ranges_cross_the_inline_boundary() {
        let samples = [
            alloc::vec![7; INLINE],
            [7u8; INLINE + 1].to_vec(),
            alloc::vec![7; INLINE + 5],
        ];
        let mut map = BTreeMap::new();
        for k in [&[0][..], &[8], &[0xff; INLINE + 1]]
            .into_iter()
            .chain(samples.iter().map(Vec::as_slice))
        {
            map.insert(Key::new(k), Vec::new());
        }
        let got: Vec<Vec<u8>> = range_of(
            &map,
            Bound::Included(&[7u8][..]),
            Bound::Excluded(&[8u8][..]),
            10,
        )
        .into_iter()
        .map(|(k, _)| k)
        .collect();
        assert_eq!(got, samples.to_vec());
    }

    /// A hashed table answers every range as the ordered one does: the
    /// same entries, in key order, cut at the limit.
    #[test]
    fn hashed_ranges_agree_with_ordered_ones() {
        let mut tables = Tables {
            maps: HostMap::empty(),
        };
        assert!(matches!(tables.of(Table::Grants), HostMap::Hashed(_)));
        assert!(matches!(tables.of(Table::GrantIndex), HostMap::Ordered(_)));
        let mut ordered = core::mem::replace(
            tables.of_mut(Table::GrantIndex),
            HostMap::Ordered(BTreeMap::new()),
        );
        let hashed = tables.of_mut(Table::Grants);
        for i in 0u16..300 {
            let n = i * 7 % 300;
            let key = n.to_be_bytes();
            let mut key = key.to_vec();
            if i % 3 == 0 {
                key.extend_from_slice(&[9; INLINE]);
            }
            let value = n.to_le_bytes().to_vec();
            assert_eq!(hashed.insert(&key, value.clone()), None);
            assert_eq!(ordered.insert(&key, value), None);
        }
        let at = |n: u16| n.to_be_bytes();
        let (a, b) = (at(40), at(200));
        let bounds: [RangeOf<'_>; 7] = [
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(&a), Bound::Excluded(&b)),
            (Bound::Excluded(&a), Bound::Included(&b)),
            (Bound::Included(&b), Bound::Excluded(&a)),
            (Bound::Excluded(&a), Bound::Excluded(&a)),
            (Bound::Included(&a), Bound::Included(&a)),
            (Bound::Unbounded, Bound::Excluded(&a)),
        ];
        for (start, end) in bounds {
            for limit in [0, 1, 5, 100, usize::MAX] {
                let want = ordered.range(start, end, limit);
                assert_eq!(
                    hashed.range(start, end, limit),
                    want,
                    "{start:?} {end:?} {limit}"
                );
            }
        }
        assert_eq!(hashed.remove(&at(40)), Some(40u16.to_le_bytes().to_vec()));
        assert_eq!(hashed.get(&at(40)), None);
        assert_eq!(
            hashed.insert(&at(41), Vec::new()),
            Some(41u16.to_le_bytes().to_vec())
        );
        assert_eq!(hashed.get(&at(41)), Some(&Vec::new()));
        assert_eq!(hashed.len(), 299);
    }

    /// Every store draws its own hash key, and a key hashes as its bytes
    /// do (so a map of keys is searched by bytes), inline or not.
    #[test]
    fn each_store_keys_its_hash() {
        use core::hash::BuildHasher;
        let (a, b) = (Seed::from_std(), Seed::from_std());
        assert_ne!((a.k0, a.k1), (b.k0, b.k1));
        assert_ne!(a.k0, a.k1);
        assert_ne!(
            a.hash_one(b"grant".as_slice()),
            b.hash_one(b"grant".as_slice())
        );
        let key = Key::new(b"grant");
        assert_eq!(a.hash_one(&key), a.hash_one(b"grant".as_slice()));
        let long = [3u8; INLINE + 4];
        assert_eq!(a.hash_one(Key::new(&long)), a.hash_one(long.as_slice()));
    }
}
