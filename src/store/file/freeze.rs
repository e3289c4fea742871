//! The file store's freezes (`freezes/<encoded pattern>.json`).

use super::{FileGuard, FileStore};
use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;
use crate::store::Freeze;

const FREEZES: &str = "freezes";

impl FileStore {
    fn freeze_name(pattern: &str) -> String {
        format!("{}.json", key::encode(pattern))
    }

    pub fn write_freeze(&self, g: &FileGuard, f: &Freeze) -> Result<()> {
        let dir = self.sub(FREEZES, true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(f)
            .map_err(|e| Error::Store(format!("cannot encode freeze: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &Self::freeze_name(&f.pattern))
    }

    /// Remove a freeze; returns it if there was one.
    pub fn remove_freeze(&self, _g: &FileGuard, pattern: &str) -> Result<Option<Freeze>> {
        let Some(dir) = self.sub(FREEZES, false)? else {
            return Ok(None);
        };
        let name = Self::freeze_name(pattern);
        let existing = super::registry::read_small(&dir, &name)?
            .and_then(|b| serde_json::from_slice::<Freeze>(&b).ok());
        match dir.unlink(&name) {
            Ok(()) => Ok(existing),
            Err(e) => Err(Error::io(dir.join(&name), e)),
        }
    }

    /// Every freeze on record (active or not).
    pub fn freezes(&self) -> Result<Vec<Freeze>> {
        let mut out: Vec<Freeze> = self
            .read_json_dir(&[FREEZES])?
            .into_iter()
            .map(|(_, f)| f)
            .collect();
        out.sort_by(|a, b| a.pattern.cmp(&b.pattern));
        Ok(out)
    }

    /// The active freeze covering a key, if any (the one lasting longest).
    pub fn frozen(&self, key_name: &str, now: &Time) -> Result<Option<Freeze>> {
        // No freezes directory is the common case: one failed stat.
        if self.dir.stat(FREEZES).is_err() {
            return Ok(None);
        }
        Ok(self
            .freezes()?
            .into_iter()
            .filter(|f| f.active(now) && f.covers(key_name))
            .max_by_key(|f| f.until))
    }
}
