//! ② session, the result cache's side (`crate::cache`): a COM_QUERY a rule's cache_ttl
//! marks is looked up before it is sent and answered from the cache on a hit; a miss captures
//! the reply while it streams and stores it. Writes mark their tables before they are sent
//! and release them when their transaction ends.

use super::multiplex::Held;
use super::Session;
use crate::cache::{CachedReply, Capture, Key, KeyParts, Miss};
use proto::StatusFlags as S;
use sql::tables::Written;
use std::sync::Arc;
use std::time::Duration;

/// What the cache said about a statement.
pub(super) enum Lookup {
    /// Not cacheable here: sent as usual.
    Bypass,
    /// A fresh reply.
    Hit(Arc<CachedReply>),
    /// Sent, its reply captured for `cache_store`.
    Miss(Miss, Capture),
}

impl Session {
    /// Looks `text` (the statement as sent) up, when a rule gave it a cache_ttl of `ttl_ms`.
    /// Only a whole statement that reads without side effects (`sql::tables::cacheable_read`),
    /// in autocommit or in a transaction that has not written, in a session that keeps no
    /// state on a connection that could change its result (temporary tables, locks…) or that
    /// the answer must leave behind (warnings).
    pub(super) fn cache_lookup(&self, text: &[u8], ttl_ms: u32, hostgroup: u32) -> Lookup {
        self.cache_lookup_as(text, text, ttl_ms, hostgroup)
    }

    /// `cache_lookup` of the statement `text` under the key text `keyed` (a prepared
    /// statement's execute: its text, parameter types and values).
    pub(super) fn cache_lookup_as(&self, text: &[u8], keyed: &[u8], ttl_ms: u32, hostgroup: u32) -> Lookup {
        let autocommit = self.status & S::SERVER_STATUS_AUTOCOMMIT.bits() != 0;
        let in_transaction = self.status & S::SERVER_STATUS_IN_TRANS.bits() != 0;
        // autocommit = 0 outside a transaction: the server would begin one (and say so).
        if !(in_transaction || autocommit) || !self.write_marks.is_empty() || self.keeps_state() {
            return Lookup::Bypass;
        }
        // Replies that may leave their column definitions out (MySQL 8's optional metadata,
        // MariaDB's metadata cache for executes): not parsed here.
        if self.negotiated.capabilities.contains(proto::CapabilityFlags::CLIENT_OPTIONAL_RESULTSET_METADATA)
            || self.negotiated.mariadb_caps & proto::response::MARIADB_CLIENT_CACHE_METADATA != 0
        {
            return Lookup::Bypass;
        }
        let Some(tables) = sql::tables::cacheable_read(text) else { return Lookup::Bypass };
        let schema = self.state.schema.as_deref().unwrap_or("");
        let slots: Vec<u16> = tables.iter().map(|t| crate::cache::tables::slot_of(t, schema.as_bytes())).collect();
        let parts = KeyParts {
            user: &self.login.username,
            schema,
            hostgroup,
            collation: self.state.collation,
            vars: &self.state.vars,
            capabilities: self.negotiated.capabilities.bits(),
            mariadb_caps: self.negotiated.mariadb_caps,
        };
        let cache = &self.data.cache;
        match cache.get(Key::new(&parts, keyed), keyed, &slots, Duration::from_millis(ttl_ms.into())) {
            Ok(reply) => Lookup::Hit(reply),
            Err(miss) => Lookup::Miss(miss, Capture::new(cache.max_entry_bytes())),
        }
    }

    /// The session keeps state on a connection that a cached answer would not see or would
    /// leave wrong: temporary tables (which shadow tables of the same name), table locks, XA,
    /// HANDLER, state sluice cannot follow, or what the last statement left for the next
    /// (warnings for SHOW WARNINGS, SQL_CALC_FOUND_ROWS).
    fn keeps_state(&self) -> bool {
        self.held.iter().any(|h| {
            let p = &h.pins;
            p.temp_tables || p.table_locks || p.xa || p.handler || p.untracked || p.next_statement || p.statement
        })
    }

    /// A hit, written to the client as a reply to the request whose last sequence id was
    /// `request_seq`. False when the client is gone.
    pub(super) async fn serve_cached(&mut self, reply: &CachedReply, request_seq: u8) -> bool {
        self.out.clear();
        reply.serve_into(&mut self.out, request_seq, self.status);
        let written = self.client.write_all(&self.out).await.is_ok();
        // The session's buffer stays small between statements.
        if self.out.capacity() > 64 << 10 {
            self.out = Vec::new();
        }
        written
    }

    /// Stores a miss's captured reply (an error, warnings or a reply over the entry limit
    /// store nothing). Nor does a reply from a replica of a pair with causal reads: the replica
    /// may not have applied a write the cache has seen, and a session whose reads must see its
    /// writes would be served what it read.
    pub(super) fn cache_store(&self, miss: Miss, capture: Capture, text: &[u8], held: &Held) {
        let hostgroup = held.backend.server.hostgroup;
        let causal_replica = self
            .snap
            .config
            .replication_hostgroups
            .iter()
            .any(|r| r.reader_hostgroup == hostgroup && r.causal_reads != crate::config::CausalReads::Off);
        if causal_replica {
            return;
        }
        if let Some(reply) = capture.finish(held.backend.format().deprecate_eof) {
            self.data.cache.put(miss, text, reply);
        }
    }

    /// Before a statement that may write is sent: its tables are marked (every table when
    /// sluice cannot list them), so no result of theirs is served or stored from now until
    /// its transaction ends.
    /// `complete`: `text` is the whole statement (else it is the head of one sluice relays,
    /// and a write of it marks every table).
    pub(super) fn mark_writes(&mut self, text: &[u8], complete: bool) {
        if !self.data.cache.in_use() || sql::rw::class(text) == sql::rw::Class::Read {
            return;
        }
        if !complete {
            return self.mark_all_written();
        }
        let schema = self.state.schema.as_deref().unwrap_or("").as_bytes();
        let marked = match sql::tables::written(text) {
            Written::Nothing => false,
            Written::Tables(tables) => self.write_marks.mark(tables.iter().map(|t| crate::cache::tables::slot_of(t, schema)), false),
            Written::Everything => self.write_marks.mark([], true),
        };
        if marked {
            self.data.cache.invalidated();
        }
    }

    /// A write sluice cannot list (COM_DROP_DB…): every table.
    pub(super) fn mark_all_written(&mut self) {
        if self.data.cache.in_use() && self.write_marks.mark([], true) {
            self.data.cache.invalidated();
        }
    }

    /// After a statement: a session no longer in a transaction releases its writes' marks
    /// (the writes are committed or rolled back).
    pub(super) fn settle_writes(&mut self) {
        if !self.write_marks.is_empty() && self.status & S::SERVER_STATUS_IN_TRANS.bits() == 0 {
            self.write_marks.release();
        }
    }
}
