//! Strings that many cached objects share, held once.
//!
//! Most of a fleet's pods carry the same strings: the container's name and image, the image ID the kubelet reports,
//! the phase, the node and its IP, the condition types and statuses. A `String` per pod keeps one heap copy per pod;
//! an [`Interned`] value is a reference-counted `str` taken from one process-wide table, so every pod decoded with
//! the same value points at the same copy ([`crate::cached_pod`] decodes its repeating fields this way).
//!
//! The table holds a value as long as something else does: it lets go of the values no one holds any more whenever
//! it has doubled since it last looked, so values that come and go (old images, drained nodes) do not pile up.
//! Values unique to one object (a name, a UID, a pod IP) are not interned: they would only add a table entry.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A shared, immutable string from the process-wide table (see the module docs). Compares, hashes, orders and
/// serializes as the `str` it holds.
#[derive(Clone, Default, PartialOrd, Ord)]
pub struct Interned(Arc<str>);

/// The table: every value handed out and still held somewhere, and the size at which it next lets go of the rest.
struct Table {
    values: HashSet<Arc<str>>,
    prune_at: usize,
}

/// The smallest size at which the table looks for values no one holds.
const FIRST_PRUNE: usize = 1024;

static TABLE: LazyLock<Mutex<Table>> =
    LazyLock::new(|| Mutex::new(Table { values: HashSet::new(), prune_at: FIRST_PRUNE }));

impl Interned {
    /// The shared copy of `value`, added to the table if it is not there.
    pub fn new(value: &str) -> Self {
        // A panic while the lock was held cannot leave the set half-changed (each change is one call).
        let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = table.values.get(value) {
            return Self(Arc::clone(shared));
        }
        if table.values.len() >= table.prune_at {
            table.values.retain(|v| Arc::strong_count(v) > 1);
            table.prune_at = (table.values.len() * 2).max(FIRST_PRUNE);
        }
        let shared: Arc<str> = Arc::from(value);
        table.values.insert(Arc::clone(&shared));
        Self(shared)
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` and `other` are the same shared copy (not only equal strings).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Interned {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Interned {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Interned {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Interned {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for Interned {
    fn from(value: String) -> Self {
        Self::new(&value)
    }
}

impl From<&String> for Interned {
    fn from(value: &String) -> Self {
        Self::new(value)
    }
}

impl From<Interned> for String {
    fn from(value: Interned) -> Self {
        value.0.as_ref().to_owned()
    }
}

impl PartialEq for Interned {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Interned {}

impl Hash for Interned {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Interned {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Interned {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Interned {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Interned> for str {
    fn eq(&self, other: &Interned) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Interned> for &str {
    fn eq(&self, other: &Interned) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Interned> for String {
    fn eq(&self, other: &Interned) -> bool {
        self == other.as_str()
    }
}

impl fmt::Debug for Interned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Interned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl Serialize for Interned {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Interned {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Takes the string as the decoder has it (borrowed from the input where it can) and interns it: no
        /// `String` is built for a value the table already holds.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Interned;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Interned, E> {
                Ok(Interned::new(value))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_copy() {
        let a = Interned::new("interned::tests::shared");
        let b: Interned = serde_json::from_str("\"interned::tests::shared\"").unwrap();
        let c = Interned::from(String::from("interned::tests::shared"));
        assert!(a.ptr_eq(&b) && a.ptr_eq(&c));
        assert!(!a.ptr_eq(&Interned::new("interned::tests::other")));
    }

    #[test]
    fn it_compares_and_serializes_as_its_string() {
        let a = Interned::new("Ready");
        // Each comparison is a different `PartialEq` impl (with `&str`, `str` and `String`, either side).
        let (s, string) = ("Ready", String::from("Ready"));
        assert!(a == s, "Interned == &str");
        assert!(s == a, "&str == Interned");
        assert!(a == *s, "Interned == str");
        assert!(*s == a, "str == Interned");
        assert!(a == string, "Interned == String");
        assert!(string == a, "String == Interned");
        assert_eq!(a.as_str(), "Ready");
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"Ready\"");
        assert_eq!(format!("{a} {a:?}"), "Ready \"Ready\"");
        assert!(Interned::new("a") < Interned::new("b"));
    }

    #[test]
    fn values_no_one_holds_are_let_go() {
        // Fill the table past its first pruning size with values dropped at once, then add one more: the table
        // looks, and the dropped values are gone while a held one stays.
        let held = Interned::new("interned::tests::held");
        for i in 0..FIRST_PRUNE * 2 {
            drop(Interned::new(&format!("interned::tests::dropped-{i}")));
        }
        drop(Interned::new("interned::tests::trigger"));
        let table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(table.values.contains("interned::tests::held"));
        assert!(table.values.len() < FIRST_PRUNE * 2, "{} values kept", table.values.len());
        drop(table);
        assert!(held.ptr_eq(&Interned::new("interned::tests::held")));
    }
}
