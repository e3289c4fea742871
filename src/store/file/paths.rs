//! The index of path checkouts: `paths.json`, the key and patterns of every record that
//! covers paths, so that an edit hook or a commit guard reads one file instead of every
//! record.
//!
//! It may hold more than the records (a key whose record is gone), never less: an entry
//! is written before its record is published and removed after its record is. Readers
//! judge the record itself for every entry that matters to them. A missing, damaged or
//! oversized index is never trusted: the records are scanned instead (so deleting the
//! file cannot hide a checkout), and the next checkout writes it again.

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

use super::{FileGuard, FileStore};
use crate::error::{Error, Result};
use crate::store::{Record, Slot};

pub const PATHS: &str = "paths.json";
/// The largest index read (a million path checkouts fit well below it).
const MAX_INDEX_BYTES: u64 = 256 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    version: u32,
    /// Patterns by key.
    entries: BTreeMap<String, Vec<String>>,
}

impl FileStore {
    /// The index, or `None` when there is none or it cannot be trusted.
    fn read_index(&self) -> Option<Index> {
        let mut f = self.dir.open_read(PATHS).ok()?;
        let meta = f.metadata().ok()?;
        if !meta.is_file() || meta.len() > MAX_INDEX_BYTES {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
        // Through `take`: a `File`'s read_to_end asks the size and position again.
        (&mut f).take(u64::MAX).read_to_end(&mut bytes).ok()?;
        serde_json::from_slice::<Index>(&bytes)
            .ok()
            .filter(|i| i.version == 1)
    }

    /// The index as it should be, from the records (when it is missing or damaged).
    fn index_from_records(&self) -> Result<Index> {
        let mut index = Index {
            version: 1,
            ..Index::default()
        };
        for slot in self.scan()? {
            if let Slot::Held(r) = slot
                && !r.paths.is_empty()
            {
                index.entries.insert(r.key, r.paths);
            }
        }
        Ok(index)
    }

    fn write_index(&self, g: &FileGuard, index: &Index) -> Result<()> {
        let mut bytes = serde_json::to_vec(index)
            .map_err(|e| Error::Store(format!("cannot encode the path index: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &self.dir, PATHS)
    }

    /// Every path checkout's key and patterns (see [`crate::store::Store::path_index`]).
    pub fn path_index(&self) -> Result<Vec<(String, Vec<String>)>> {
        let index = match self.read_index() {
            Some(i) => i,
            None => self.index_from_records()?,
        };
        Ok(index.entries.into_iter().collect())
    }

    /// Before `record` is published: make sure the index lists its patterns.
    pub(super) fn index_before_publish(&self, g: &FileGuard, record: &Record) -> Result<()> {
        let exists = self.dir.stat(PATHS).is_ok();
        if record.paths.is_empty() && exists {
            return Ok(());
        }
        let (mut index, fresh) = match self.read_index() {
            Some(i) => (i, false),
            None => (self.index_from_records()?, true),
        };
        // Patterns only ever join an entry here; the ones a record no longer has leave
        // after it is published.
        let entry = index.entries.get(&record.key);
        let mut wanted: Vec<String> = entry.cloned().unwrap_or_default();
        for p in &record.paths {
            if !wanted.contains(p) {
                wanted.push(p.clone());
            }
        }
        if !fresh && (entry == Some(&wanted) || (entry.is_none() && wanted.is_empty())) {
            return Ok(());
        }
        if !wanted.is_empty() {
            index.entries.insert(record.key.clone(), wanted);
        }
        self.write_index(g, &index)
    }

    /// After a key's record was removed: drop its entry.
    pub(super) fn index_after_remove(&self, g: &FileGuard, key: &str) -> Result<()> {
        let Some(mut index) = self.read_index() else {
            return self.write_index(g, &self.index_from_records()?);
        };
        if index.entries.remove(key).is_none() {
            return Ok(());
        }
        self.write_index(g, &index)
    }
}
