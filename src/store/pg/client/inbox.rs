//! Inbox messages (`messages`) and how pushing them went.

use super::*;

impl PgStore {
    pub fn unread(&self, agent: &str) -> Result<Vec<Message>> {
        let mut out: Vec<Message> = self.all(
            "read the inbox",
            "SELECT data::text FROM {s}.messages WHERE agent = $1 AND NOT read",
            &[(&agent, Type::TEXT)],
        )?;
        out.sort_by(|a, b| (a.ts, &a.id).cmp(&(b.ts, &b.id)));
        Ok(out)
    }

    /// A message, read or unread; its delivery is a field of its data.
    pub fn message(&self, agent: &str, id: &str) -> Result<Option<Message>> {
        Ok(self
            .all::<Message>(
                "read a message",
                "SELECT data::text FROM {s}.messages WHERE agent = $1 AND id = $2",
                &[(&agent, Type::TEXT), (&id, Type::TEXT)],
            )?
            .pop())
    }

    /// Record the push of a message into the data of its row (a message already gone,
    /// read and forgotten, has nothing to record).
    pub fn record_delivery(&self, _g: &PgGuard, agent: &str, id: &str, d: &Delivery) -> Result<()> {
        let data = to_json(d, "delivery")?;
        self.exec(
            "record a delivery",
            "UPDATE {s}.messages SET data = jsonb_set(data, '{delivery}', $3::jsonb) \
             WHERE agent = $1 AND id = $2 RETURNING 1",
            &[(&agent, Type::TEXT), (&id, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }

    pub fn mark_read(&self, agent: &str, id: &str) -> Result<bool> {
        let n = self.exec(
            "mark a message read",
            "UPDATE {s}.messages SET read = true WHERE agent = $1 AND id = $2 AND NOT read RETURNING 1",
            &[(&agent, Type::TEXT), (&id, Type::TEXT)],
        )?;
        Ok(n > 0)
    }

    pub fn send(&self, _g: &PgGuard, msg: &Message) -> Result<()> {
        let data = to_json(msg, "message")?;
        let ts = rfc3339(&msg.ts);
        self.exec(
            "deliver a message",
            "INSERT INTO {s}.messages (agent, id, ts, data) VALUES ($1, $2, $3::timestamptz, $4::jsonb) \
             ON CONFLICT (agent, id) DO UPDATE SET ts = excluded.ts, data = excluded.data, read = false \
             RETURNING 1",
            &[
                (&msg.to, Type::TEXT),
                (&msg.id, Type::TEXT),
                (&ts, Type::TEXT),
                (&data, Type::TEXT),
            ],
        )
        .map(|_| ())
    }
}
