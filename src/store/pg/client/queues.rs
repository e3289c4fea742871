//! Queues of keys (`queues`), one JSON document per key.

use super::*;

impl PgStore {
    pub fn read_queue(&self, key: &str) -> Result<Queue> {
        if let Some(q) = self.ahead(key, |a| a.queue.clone()) {
            return Ok(q);
        }
        Ok(self
            .one::<Queue>(
                "read a queue",
                "SELECT data::text FROM {s}.queues WHERE key = $1",
                &[(&key, Type::TEXT)],
            )?
            .filter(|q| q.key == key)
            .unwrap_or_else(|| Queue::empty(key)))
    }

    pub fn scan_queues(&self) -> Result<Vec<Queue>> {
        let mut out: Vec<Queue> =
            self.all("read the queues", "SELECT data::text FROM {s}.queues", &[])?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    pub fn write_queue(&self, g: &PgGuard, q: &Queue) -> Result<()> {
        g.changed.set(true);
        self.forget_queue_ahead(&q.key);
        if q.is_empty() {
            return self
                .exec(
                    "remove a queue",
                    "DELETE FROM {s}.queues WHERE key = $1 RETURNING 1",
                    &[(&q.key, Type::TEXT)],
                )
                .map(|_| ());
        }
        let data = to_json(q, "queue")?;
        self.exec(
            "write a queue",
            "INSERT INTO {s}.queues (key, data) VALUES ($1, $2::jsonb) \
             ON CONFLICT (key) DO UPDATE SET data = excluded.data RETURNING 1",
            &[(&q.key, Type::TEXT), (&data, Type::TEXT)],
        )
        .map(|_| ())
    }
}
