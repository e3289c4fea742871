//! A blocking PostgreSQL client: tokio-postgres driven by a runtime of its own on the
//! caller's thread, as the `postgres` crate drives it, except that the whole connect
//! (TCP, the startup exchange, authentication) is bounded by a timer of that runtime. The
//! `postgres` crate gives no way to bound more than the TCP connect, so a thread used to
//! run it while the command waited with a timeout: about 13% of the CPU of a command on
//! PostgreSQL (`bench/cpu.py`, 2026-12-08).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{
    AsyncMessage, Config, Connection, Error, NoTls, Notification, Row, SimpleQueryMessage, Socket,
};

/// One connection, used from the thread that made it.
pub struct Client {
    runtime: Runtime,
    client: tokio_postgres::Client,
    connection: Connection<Socket, NoTlsStream>,
    /// Notifications that came while a query ran, for the next wait.
    notifications: VecDeque<Notification>,
    /// The connection has ended (or failed): it is not read again, and requests fail at
    /// once.
    ended: bool,
}

/// Why a connect failed.
pub enum ConnectError {
    /// The server (or the network) said why.
    Postgres(Error),
    /// No answer within the time given.
    TimedOut,
    /// The runtime could not be made (out of file descriptors, say).
    Runtime(std::io::Error),
}

impl Client {
    /// Connect as `config` says, giving up after `within` whatever the server does.
    pub fn connect(config: &Config, within: Duration) -> Result<Client, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let connected =
            runtime.block_on(async { tokio::time::timeout(within, config.connect(NoTls)).await });
        match connected {
            Ok(Ok((client, connection))) => Ok(Client {
                runtime,
                client,
                connection,
                notifications: VecDeque::new(),
                ended: false,
            }),
            Ok(Err(e)) => Err(ConnectError::Postgres(e)),
            Err(_) => Err(ConnectError::TimedOut),
        }
    }

    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        self.call(|c| c.simple_query(sql))
    }

    pub fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.call(|c| c.batch_execute(sql))
    }

    /// A statement with parameters of the types given (no round trip to prepare it).
    pub fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.call(|c| c.query_typed(sql, params))
    }

    /// [`Client::query_typed`] of exactly one row.
    pub fn query_typed_one(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, Error> {
        self.call(|c| c.query_typed_one(sql, params))
    }

    /// A statement prepared first (its parameters' types from the server), of one row.
    #[cfg(test)]
    pub fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, Error> {
        self.call(|c| c.query_one(sql, params))
    }

    /// Run the request `f` makes, reading the connection meanwhile.
    fn call<'a, T, F>(
        &'a mut self,
        f: impl FnOnce(&'a tokio_postgres::Client) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let (runtime, client, conn) = self.parts();
        drive(runtime, conn, f(client))
    }

    /// The runtime, the client that makes requests, and the connection that carries them,
    /// borrowed apart.
    fn parts(&mut self) -> (&Runtime, &tokio_postgres::Client, Conn<'_>) {
        let Client {
            runtime,
            client,
            connection,
            notifications,
            ended,
        } = self;
        (runtime, client, Conn(connection, notifications, ended))
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The next notification, waiting up to `timeout` for one; `None` when none came or
    /// the connection ended.
    pub fn wait_notification(&mut self, timeout: Duration) -> Result<Option<Notification>, Error> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(Some(n));
        }
        let (runtime, _, mut conn) = self.parts();
        runtime.block_on(async {
            let mut sleep = pin!(tokio::time::sleep(timeout));
            poll_fn(|cx| {
                if let Some(done) = conn.pump(cx) {
                    return Poll::Ready(done.map(|()| conn.1.pop_front()));
                }
                if let Some(n) = conn.1.pop_front() {
                    return Poll::Ready(Ok(Some(n)));
                }
                sleep.as_mut().poll(cx).map(|()| Ok(None))
            })
            .await
        })
    }

    /// Forget the notifications that have come, without waiting for more.
    pub fn drain_notifications(&mut self) -> Result<(), Error> {
        let (runtime, _, conn) = self.parts();
        let result = drive(runtime, conn, async { Ok(()) });
        self.notifications.clear();
        result
    }
}

/// The connection's side of a [`Client`], borrowed apart from the request being made.
struct Conn<'a>(
    &'a mut Connection<Socket, NoTlsStream>,
    &'a mut VecDeque<Notification>,
    &'a mut bool,
);

impl Conn<'_> {
    /// Read what the connection has: `None` while it is open and has nothing more now,
    /// `Some(Ok(()))` once it has ended, `Some(Err(_))` when it failed just now.
    fn pump(&mut self, cx: &mut std::task::Context<'_>) -> Option<Result<(), Error>> {
        if *self.2 {
            return Some(Ok(()));
        }
        loop {
            match self.0.poll_message(cx) {
                Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => self.1.push_back(n),
                // Notices (warnings the server sends along) are not shown.
                Poll::Ready(Some(Ok(_))) => {}
                // Both end the connection: it is not polled again, and what is asked of
                // the client after fails at once.
                Poll::Ready(Some(Err(e))) => {
                    *self.2 = true;
                    return Some(Err(e));
                }
                Poll::Ready(None) => {
                    *self.2 = true;
                    return Some(Ok(()));
                }
                Poll::Pending => return None,
            }
        }
    }
}

/// Run `future` to its end on `runtime`, reading the connection's messages meanwhile
/// (the answers `future` waits for, and notifications, which are kept).
fn drive<T>(
    runtime: &Runtime,
    mut conn: Conn<'_>,
    future: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut future = pin!(future);
    runtime.block_on(poll_fn(|cx| {
        if let Some(Err(e)) = conn.pump(cx) {
            return Poll::Ready(Err(e));
        }
        future.as_mut().poll(cx)
    }))
}
