//! [`LinkParams`]: a link's non-reserved parameters, one value per name.
//!
//! A link carries at most [`DeepLink::MAX_PARAMS`](super::DeepLink::MAX_PARAMS)
//! parameters, so a vector kept sorted by name does every job a B-tree would
//! (ordered iteration, lookup by binary search, replacing insert) in a
//! fraction of the code: on firmware the B-tree's monomorphised insert,
//! iterator and drop cost about 1.5 KiB of flash (embedded/README.md).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Index;
use core::slice;

/// A link's parameters: names mapped to values, iterated in byte order of
/// the name (the order the link builder writes them).
///
/// It behaves as a `BTreeMap<String, String>`: [`insert`](Self::insert)
/// replaces and returns an earlier value of the same name, `params["name"]`
/// panics when the name is absent, and collecting pairs keeps the last
/// value of a repeated name. Limits are the link's: the builder and the
/// parser refuse more than [`DeepLink::MAX_PARAMS`](super::DeepLink::MAX_PARAMS).
///
/// ```
/// use portcullis_core::link::LinkParams;
///
/// let mut params = LinkParams::new();
/// params.insert("threadId".into(), "t-1".into());
/// assert_eq!(params.insert("f_label".into(), "work".into()), None);
/// assert_eq!(params.insert("f_label".into(), "home".into()), Some("work".into()));
/// assert_eq!(params.get("f_label"), Some("home"));
/// assert_eq!(params["threadId"], "t-1");
/// let names: Vec<&str> = params.iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["f_label", "threadId"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct LinkParams {
    /// Sorted by name, names unique.
    pairs: Vec<(String, String)>,
}

impl LinkParams {
    /// No parameters.
    #[must_use]
    pub const fn new() -> Self {
        Self { pairs: Vec::new() }
    }

    /// How many parameters there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The value of `name`, if present.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        let at = self.position(name).ok()?;
        Some(&self.pairs[at].1)
    }

    /// Whether `name` is present.
    #[must_use]
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Sets `name` to `value`; returns the value it replaced, if any.
    pub fn insert(&mut self, name: String, value: String) -> Option<String> {
        match self.position(&name) {
            Ok(at) => Some(core::mem::replace(&mut self.pairs[at].1, value)),
            Err(at) => {
                self.pairs.insert(at, (name, value));
                None
            }
        }
    }

    /// Removes `name`; returns its value, if it was present.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let at = self.position(name).ok()?;
        Some(self.pairs.remove(at).1)
    }

    /// The parameters as `(name, value)`, in byte order of the name.
    #[must_use]
    pub fn iter(&self) -> LinkParamsIter<'_> {
        LinkParamsIter(self.pairs.iter())
    }

    /// Where `name` is, or where it would go.
    fn position(&self, name: &str) -> Result<usize, usize> {
        self.pairs.binary_search_by(|(n, _)| n.as_str().cmp(name))
    }
}

impl fmt::Debug for LinkParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Index<&str> for LinkParams {
    type Output = String;

    /// The value of `name`.
    ///
    /// # Panics
    /// When `name` is absent, as a map's index does.
    fn index(&self, name: &str) -> &String {
        let Ok(at) = self.position(name) else {
            panic!("no link parameter with this name")
        };
        &self.pairs[at].1
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for LinkParams {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut params = Self::new();
        params.extend(pairs);
        params
    }
}

impl<N: Into<String>, V: Into<String>> Extend<(N, V)> for LinkParams {
    fn extend<I: IntoIterator<Item = (N, V)>>(&mut self, pairs: I) {
        for (name, value) in pairs {
            self.insert(name.into(), value.into());
        }
    }
}

impl<'a> IntoIterator for &'a LinkParams {
    type Item = (&'a str, &'a str);
    type IntoIter = LinkParamsIter<'a>;

    fn into_iter(self) -> LinkParamsIter<'a> {
        self.iter()
    }
}

/// The parameters of a [`LinkParams`] as `(name, value)`, in name order.
#[derive(Clone, Debug)]
pub struct LinkParamsIter<'a>(slice::Iter<'a, (String, String)>);

impl<'a> Iterator for LinkParamsIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for LinkParamsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

impl ExactSizeIterator for LinkParamsIter<'_> {}

impl core::iter::FusedIterator for LinkParamsIter<'_> {}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeMap;
    use alloc::format;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(String, String),
        Remove(String),
    }

    fn op() -> impl Strategy<Value = Op> {
        let name = "[a-d]{0,3}";
        prop_oneof![
            (name, "[xy]{0,2}").prop_map(|(n, v)| Op::Insert(n, v)),
            name.prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Every operation answers as a `BTreeMap<String, String>` does,
        /// and iteration order is the map's.
        #[test]
        fn behaves_as_a_btree_map(ops in proptest::collection::vec(op(), 0..40)) {
            let mut params = LinkParams::new();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(n, v) => {
                        prop_assert_eq!(params.insert(n.clone(), v.clone()), model.insert(n, v));
                    }
                    Op::Remove(n) => prop_assert_eq!(params.remove(&n), model.remove(&n)),
                }
                prop_assert_eq!(params.len(), model.len());
                prop_assert!(params.iter().eq(model.iter().map(|(n, v)| (n.as_str(), v.as_str()))));
                prop_assert!(params.iter().rev().eq(model.iter().rev().map(|(n, v)| (n.as_str(), v.as_str()))));
                for name in ["", "a", "ab", "dd", "b"] {
                    prop_assert_eq!(params.get(name), model.get(name).map(String::as_str));
                    prop_assert_eq!(params.contains_key(name), model.contains_key(name));
                }
            }
            let collected: LinkParams = model.clone().into_iter().collect();
            prop_assert_eq!(collected, params);
        }
    }

    #[test]
    fn collecting_keeps_the_last_value_of_a_name() {
        let params: LinkParams = [("b", "1"), ("a", "2"), ("b", "3")].into_iter().collect();
        assert_eq!(params.iter().collect::<Vec<_>>(), [("a", "2"), ("b", "3")]);
    }

    #[test]
    fn debug_is_a_map() {
        let params: LinkParams = [("q", "a b")].into_iter().collect();
        assert_eq!(format!("{params:?}"), r#"{"q": "a b"}"#);
    }

    #[test]
    #[should_panic(expected = "no link parameter")]
    fn indexing_an_absent_name_panics() {
        let _ = &LinkParams::new()["absent"];
    }
}
