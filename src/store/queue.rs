//! Per-key FIFO queues (`queues/<encoded key>.json`) and per-agent inboxes
//! (`inbox/<encoded agent>/<id>.json`, moved to `read/` once shown).

use std::io::ErrorKind;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{FileStore, Guard};
use crate::clock::Time;
use crate::error::{Error, Result};
use crate::key;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Waiter {
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub since: Time,
    /// The blocked `checkout --wait` process, when there is one: if it dies, the
    /// waiter leaves the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<String>,
    /// The Unix user who queued (absent in queues of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::identity::UnixUser>,
}

/// A free key held back for the head of its queue until `until`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reservation {
    pub agent: String,
    pub since: Time,
    pub until: Time,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Queue {
    pub version: u32,
    pub key: String,
    pub waiters: Vec<Waiter>,
    #[serde(default)]
    pub reservation: Option<Reservation>,
}

impl Queue {
    pub fn empty(key: &str) -> Queue {
        Queue {
            version: 1,
            key: key.to_string(),
            waiters: Vec::new(),
            reservation: None,
        }
    }

    pub fn position(&self, agent: &str) -> Option<usize> {
        self.waiters
            .iter()
            .position(|w| w.agent == agent)
            .map(|i| i + 1)
    }
}

/// One inbox message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Message {
    pub version: u32,
    pub id: String,
    /// The agent whose action caused it, when there is one.
    pub from: Option<String>,
    pub to: String,
    /// `reserved`, `reservation_lapsed`, `force_released`, `lease_expired`, `agent_death`.
    #[serde(rename = "type")]
    pub kind: String,
    pub key: String,
    pub ts: Time,
    pub body: String,
    /// The Unix user whose tasklock wrote it (absent in messages of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::identity::UnixUser>,
}

const QUEUES: &str = "queues";
const INBOX: &str = "inbox";
const READ: &str = "read";

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

    pub fn write_queue(&self, g: &Guard, q: &Queue) -> Result<()> {
        let name = Self::queue_name(&q.key);
        if q.waiters.is_empty() && q.reservation.is_none() {
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

    pub fn queues_dir(&self) -> PathBuf {
        self.root().join(QUEUES)
    }

    pub fn keys_dir(&self) -> PathBuf {
        self.root().join("keys")
    }

    /// Deliver a message (written whole: temp file + rename).
    pub fn send(&self, g: &Guard, msg: &Message) -> Result<()> {
        let to = key::encode(&msg.to);
        let dir = self.dir_at(&[INBOX, &to], true)?.expect("created");
        let mut bytes = serde_json::to_vec_pretty(msg)
            .map_err(|e| Error::Store(format!("cannot encode message: {e}")))?;
        bytes.push(b'\n');
        self.publish_replace(g, &bytes, &dir, &format!("{}.json", msg.id))
    }

    /// Unread messages, oldest first, with their file paths.
    pub fn unread(&self, agent: &str) -> Result<Vec<(PathBuf, Message)>> {
        let mut out: Vec<(PathBuf, Message)> = self.read_json_dir(&[INBOX, &key::encode(agent)])?;
        out.sort_by(|a, b| (a.1.ts, &a.1.id).cmp(&(b.1.ts, &b.1.id)));
        Ok(out)
    }

    /// Mark a message read by moving it into `read/`; false if another reader got it.
    pub fn mark_read(&self, agent: &str, path: &std::path::Path) -> Result<bool> {
        let enc = key::encode(agent);
        let inbox = self.dir_at(&[INBOX, &enc], true)?.expect("created");
        let read_dir = self.dir_at(&[INBOX, &enc, READ], true)?.expect("created");
        let Some(name) = super::at::file_name(path) else {
            return Ok(false);
        };
        match inbox.rename(name, &read_dir, name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}
