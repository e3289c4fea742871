//! The file store's queues (`queues/<encoded key>.json`) and inboxes
//! (`inbox/<encoded agent>/<id>.json`, moved to `read/` once shown; the push of a message
//! into the agent's session is recorded beside it, in `delivery/<id>.json`, so that a
//! reader moving the message never races the record).

use std::io::ErrorKind;

use super::{FileGuard, FileStore};
use crate::error::{Error, Result};
use crate::key;
use crate::store::{Delivery, Message, Queue};

pub(super) const QUEUES: &str = "queues";
pub(super) const INBOX: &str = "inbox";
const READ: &str = "read";
const DELIVERY: &str = "delivery";

impl FileStore {
    fn queue_name(key_name: &str) -> String {
        format!("{}.json", key::encode(key_name))
    }

    /// The queue of a key; empty when there is none. A damaged queue file reads as
    /// empty (a queue is soft state: waiters re-join) and is replaced on the next write.
    pub fn read_queue(&self, key_name: &str) -> Result<Queue> {
        let Some(dir) = self.sub(QUEUES, false)? else {
            return Ok(Queue::empty(key_name));
        };
        Ok(
            super::registry::read_small(&dir, &Self::queue_name(key_name))?
                .and_then(|b| serde_json::from_slice::<Queue>(&b).ok())
                .filter(|q| q.key == key_name)
                .unwrap_or_else(|| Queue::empty(key_name)),
        )
    }

    /// The queues of `keys`, in order, opening `queues/` once (see [`FileStore::read_queue`]).
    pub(super) fn read_queues(&self, keys: &[String]) -> Result<Vec<Queue>> {
        let Some(dir) = self.sub(QUEUES, false)? else {
            return Ok(keys.iter().map(|k| Queue::empty(k)).collect());
        };
        keys.iter()
            .map(|k| {
                Ok(super::registry::read_small(&dir, &Self::queue_name(k))?
                    .and_then(|b| serde_json::from_slice::<Queue>(&b).ok())
                    .filter(|q| q.key == *k)
                    .unwrap_or_else(|| Queue::empty(k)))
            })
            .collect()
    }

    pub fn write_queue(&self, g: &FileGuard, q: &Queue) -> Result<()> {
        let name = Self::queue_name(&q.key);
        if q.is_empty() {
            let Some(dir) = self.sub(QUEUES, false)? else {
                return Ok(());
            };
            return dir.unlink(&name).map_err(|e| Error::io(dir.join(&name), e));
        }
        let dir = self.sub(QUEUES, true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(q)
            .map_err(|e| Error::Store(format!("cannot encode queue: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &name)
    }

    /// Every readable queue.
    pub fn scan_queues(&self) -> Result<Vec<Queue>> {
        let mut out: Vec<Queue> = self
            .read_json_dir(&[QUEUES])?
            .into_iter()
            .map(|(_, q)| q)
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Deliver a message (written whole: temp file + rename).
    pub fn send(&self, g: &FileGuard, msg: &Message) -> Result<()> {
        let to = key::encode(&msg.to);
        let dir = self.dir_at(&[INBOX, &to], true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(msg)
            .map_err(|e| Error::Store(format!("cannot encode message: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &format!("{}.json", msg.id))
    }

    /// Unread messages, oldest first, with their deliveries.
    pub fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        let enc = key::encode(agent);
        let mut out: Vec<Message> = self
            .read_json_dir::<Message>(&[INBOX, &enc])?
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        if !out.is_empty()
            && let Some(dir) = self.dir_at(&[INBOX, &enc, DELIVERY], false)?
        {
            for m in &mut out {
                m.delivery = read_delivery(&dir, &m.id)?;
            }
        }
        out.sort_by(|a, b| (a.ts, &a.id).cmp(&(b.ts, &b.id)));
        Ok(out)
    }

    /// A message, read or unread, with its delivery.
    pub fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        let enc = key::encode(agent);
        let name = format!("{id}.json");
        if name.contains('/') {
            return Ok(None);
        }
        for parts in [&[INBOX, enc.as_str()][..], &[INBOX, enc.as_str(), READ]] {
            let Some(dir) = self.dir_at(parts, false)? else {
                continue;
            };
            if let Some(mut m) = super::registry::read_small(&dir, &name)?
                .and_then(|b| serde_json::from_slice::<Message>(&b).ok())
                .filter(|m| m.id == id)
            {
                if let Some(dir) = self.dir_at(&[INBOX, &enc, DELIVERY], false)? {
                    m.delivery = read_delivery(&dir, id)?;
                }
                return Ok(Some(m));
            }
        }
        Ok(None)
    }

    /// Record the push of a message into its agent's session.
    pub fn record_delivery(
        &self,
        g: &FileGuard,
        agent: &str,
        id: &str,
        d: &Delivery,
    ) -> Result<()> {
        let name = format!("{id}.json");
        if name.contains('/') {
            return Ok(());
        }
        let dir = self
            .dir_at(&[INBOX, &key::encode(agent), DELIVERY], true)?
            .expect("created");
        let mut bytes = serde_json::to_vec_pretty(d)
            .map_err(|e| Error::Store(format!("cannot encode a delivery: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &name)
    }

    /// Mark a message read by moving it into `read/`; false if another reader got it.
    pub fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        let enc = key::encode(agent);
        let inbox = self.dir_at(&[INBOX, &enc], true)?.expect("created");
        let read_dir = self.dir_at(&[INBOX, &enc, READ], true)?.expect("created");
        let name = format!("{id}.json");
        if name.contains('/') {
            return Ok(false);
        }
        match inbox.rename(&name, &read_dir, &name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(inbox.join(&name), e)),
        }
    }
}

fn read_delivery(dir: &super::Dir, id: &str) -> Result<Option<Delivery>> {
    Ok(super::registry::read_small(dir, &format!("{id}.json"))?
        .and_then(|b| serde_json::from_slice(&b).ok()))
}
