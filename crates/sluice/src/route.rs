//! ④ route: where a statement goes, decided in one place. The routers are asked in a fixed
//! precedence and the first that claims the statement decides:
//!
//! 1. **rules**: a matching query rule's `destination_hostgroup`;
//! 2. **hints**: a routing hint in the statement's first comment (`sql::hint`):
//!    `sluice:route=writer|reader|hostgroup:N`, ProxySQL's `hostgroup=N`;
//! 3. **split**: when the user's default hostgroup is the writer of a
//!    `[[mysql_replication_hostgroups]]` row, reads (`sql::rw`) go to its reader hostgroup and
//!    everything else to the writer; a session in a transaction (or with autocommit off), or
//!    holding state on a connection of either hostgroup, stays where that is (on a reader's,
//!    only reads and what reads that state: a write goes to the writer);
//! 4. **shards**: a statement on a sharded or broadcast table (`crate::shard`): the shards its
//!    sharding key selects, each with the statement rewritten to its physical tables; one shard
//!    goes as a plain forward, several through exec's merge (`exec::merge`);
//! 5. **default**: the user's `default_hostgroup`.
//!
//! The result is a `Target`; which server of a hostgroup serves it is the pool's choice (⑤:
//! among ONLINE servers, the one with the fewest statements running per unit of weight). An
//! open transaction keeps its connection whatever the target (`session::multiplex::acquire`),
//! as ProxySQL's transaction_persistent.
//!
//! A prepared statement is routed at each execute like the text of a COM_QUERY, from its hint
//! and class read once at prepare (`Known`, kept in its `pool::prepared::Entry`). Rules do not
//! route prepared statements (they only block them at prepare, `plan::prepare_blocked`).

use crate::config::ReplicationHostgroupRow;
use crate::rules::Decision;
use sql::hint::Hint;
use sql::rw::Class;

/// Where a statement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One hostgroup: the reply streams back as it is (⑥ exec's forward).
    Hostgroup(u32),
    // Several targets (sharding) will go through a merge step in exec.
}

impl Target {
    /// The hostgroup of a single target.
    pub fn hostgroup(self) -> u32 {
        match self {
            Target::Hostgroup(h) => h,
        }
    }
}

/// Which router decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Router {
    Rules,
    Hint,
    Split,
    Shard,
    Default,
}

/// A routing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    pub target: Target,
    pub by: Router,
    /// Where the statement goes when the target has no usable server: the writer, for a read
    /// the split sent to the readers.
    pub fallback: Option<u32>,
}

impl Routed {
    fn to(hostgroup: u32, by: Router) -> Routed {
        Routed { target: Target::Hostgroup(hostgroup), by, fallback: None }
    }
}

/// What the routers read.
pub struct Facts<'a> {
    /// The rules' decision (the default when none matched).
    pub decision: &'a Decision,
    /// The session user's default hostgroup.
    pub default_hostgroup: u32,
    /// The statement: hints and the split read it.
    pub statement: Statement<'a>,
    /// The session's transaction: what its server's status flags said (in a transaction, or
    /// autocommit off: the next statement may begin one).
    pub in_transaction: bool,
    /// The hostgroup of a connection the session keeps for state it holds there (temporary
    /// tables, locks, warnings to read…), if any.
    pub kept_hostgroup: Option<u32>,
    pub replication: &'a [ReplicationHostgroupRow],
}

impl<'a> Facts<'a> {
    /// A statement of sluice's own, or one answered without a backend: only rules and the
    /// default apply.
    pub fn plain(decision: &'a Decision, default_hostgroup: u32) -> Self {
        let statement = Statement::Text(b"");
        Facts { decision, default_hostgroup, statement, in_transaction: false, kept_hostgroup: None, replication: &[] }
    }

    /// The replication pair whose writer is the user's default hostgroup.
    fn pair(&self) -> Option<&'a ReplicationHostgroupRow> {
        self.replication.iter().find(|r| r.writer_hostgroup == self.default_hostgroup)
    }
}

/// The statement as the routers read it.
#[derive(Debug, Clone, Copy)]
pub enum Statement<'a> {
    /// A COM_QUERY's text as sent (after a rewrite): its hint and class are read only if a
    /// router gets to ask.
    Text(&'a [u8]),
    /// A statement's hint and class read once: from a prepared statement's text at prepare, or
    /// from the template of a COM_QUERY's shape (`plan::Shape`).
    Known(Known),
}

/// A statement's routing hint and read/write class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub hint: Option<Hint>,
    pub class: Class,
    /// It reads what the previous statement left on its connection (`sql::rw::reads_last_statement`).
    pub reads_last_statement: bool,
}

impl Known {
    pub fn of(text: &[u8]) -> Known {
        Known {
            hint: sql::hint::routing_hint(text),
            class: sql::rw::class(text),
            reads_last_statement: sql::rw::reads_last_statement(text),
        }
    }
}

impl Statement<'_> {
    fn hint(self) -> Option<Hint> {
        match self {
            Statement::Text(text) => sql::hint::routing_hint(text),
            Statement::Known(k) => k.hint,
        }
    }

    fn class(self) -> Class {
        match self {
            Statement::Text(text) => sql::rw::class(text),
            Statement::Known(k) => k.class,
        }
    }

    fn reads_last_statement(self) -> bool {
        match self {
            Statement::Text(text) => sql::rw::reads_last_statement(text),
            Statement::Known(k) => k.reads_last_statement,
        }
    }
}

/// The target of a statement: the first router, in precedence order, that claims it.
pub fn route(facts: &Facts) -> Routed {
    claimed(facts).unwrap_or(Routed::to(facts.default_hostgroup, Router::Default))
}

/// Routers 1–3 (rules, hints, split): the plan asks the shard map (router 4) only when none
/// claims the statement, and falls back to the default (router 5).
pub fn claimed(facts: &Facts) -> Option<Routed> {
    by_rules(facts).or_else(|| by_hint(facts)).or_else(|| by_split(facts))
}

/// Router 4: the shard map. `None` when the statement names no sharded or broadcast table
/// (a lexer scan decides, so other statements are never parsed; with no sharding configured
/// nothing is scanned).
pub fn by_shard(map: &crate::shard::ShardMap, schema: &str, text: &[u8]) -> Option<crate::shard::plan::Sharding> {
    if !map.mentions(text) {
        return None;
    }
    match crate::shard::plan::plan(map, schema, text) {
        crate::shard::plan::Sharding::NotSharded => None,
        sharding => Some(sharding),
    }
}

impl Routed {
    /// A statement the shard map sends to `hostgroup`.
    pub fn shard(hostgroup: u32) -> Routed {
        Routed::to(hostgroup, Router::Shard)
    }

    /// A statement no router claimed: the user's default hostgroup (router 5).
    pub fn default_hostgroup(hostgroup: u32) -> Routed {
        Routed::to(hostgroup, Router::Default)
    }
}

/// Where a command that is not a routed statement goes (COM_PING, COM_INIT_DB,
/// COM_STMT_PREPARE…): the user's default hostgroup.
pub fn default_target(default_hostgroup: u32) -> Target {
    Target::Hostgroup(default_hostgroup)
}

/// Router 1: a rule's destination_hostgroup.
fn by_rules(facts: &Facts) -> Option<Routed> {
    let hostgroup = facts.decision.actions.destination_hostgroup?;
    Some(Routed::to(hostgroup, Router::Rules))
}

/// Router 2: a hint in the first comment. `writer` and `reader` name the user's replication
/// pair, and mean nothing without one.
fn by_hint(facts: &Facts) -> Option<Routed> {
    let hostgroup = match facts.statement.hint()? {
        Hint::Hostgroup(h) => h,
        Hint::Writer => facts.pair()?.writer_hostgroup,
        Hint::Reader => facts.pair()?.reader_hostgroup,
    };
    Some(Routed::to(hostgroup, Router::Hint))
}

/// Router 3: the read/write split of the user's replication pair.
fn by_split(facts: &Facts) -> Option<Routed> {
    let pair = facts.pair()?;
    let to = |hostgroup| Some(Routed::to(hostgroup, Router::Split));
    match facts.kept_hostgroup {
        Some(kept) if kept == pair.writer_hostgroup => return to(kept),
        // State on a reader's connection (warnings, FOUND_ROWS(), a cursor, a read-only
        // transaction): what reads it, and reads, stay with it; anything else goes to the
        // writer (a reader would refuse a write, or apply it where no one else sees it).
        Some(kept) if kept == pair.reader_hostgroup => {
            let stays = facts.statement.class() != Class::Write || facts.statement.reads_last_statement();
            return to(if stays { kept } else { pair.writer_hostgroup });
        }
        _ => {}
    }
    if facts.in_transaction {
        return to(pair.writer_hostgroup);
    }
    match facts.statement.class() {
        Class::Read | Class::ReadOnlyTransaction => {
            Some(Routed { target: Target::Hostgroup(pair.reader_hostgroup), by: Router::Split, fallback: Some(pair.writer_hostgroup) })
        }
        Class::Write => to(pair.writer_hostgroup),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_destination_wins_over_the_default() {
        let mut decision = Decision::default();
        let routed = route(&Facts::plain(&decision, 7));
        assert_eq!(routed, Routed::to(7, Router::Default));
        decision.actions.destination_hostgroup = Some(2);
        let routed = route(&Facts::plain(&decision, 7));
        assert_eq!(routed, Routed::to(2, Router::Rules));
    }

    fn pair() -> Vec<ReplicationHostgroupRow> {
        vec![ReplicationHostgroupRow {
            writer_hostgroup: 10,
            reader_hostgroup: 20,
            check_type: "read_only".into(),
            causal_reads: Default::default(),
            causal_reads_timeout_ms: 2000,
            comment: String::new(),
        }]
    }

    fn split(text: &str, default_hostgroup: u32, in_transaction: bool, kept: Option<u32>, decision: &Decision) -> Routed {
        let replication = pair();
        route(&Facts {
            decision,
            default_hostgroup,
            statement: Statement::Text(text.as_bytes()),
            in_transaction,
            kept_hostgroup: kept,
            replication: &replication,
        })
    }

    #[test]
    fn the_split_sends_reads_to_readers_and_the_rest_to_the_writer() {
        let d = Decision::default();
        let at = Routed::to;
        let read = Routed { fallback: Some(10), ..at(20, Router::Split) };
        assert_eq!(split("SELECT 1", 10, false, None, &d), read);
        assert_eq!(split("SELECT 1 FOR UPDATE", 10, false, None, &d), at(10, Router::Split));
        assert_eq!(split("UPDATE t SET a = 1", 10, false, None, &d), at(10, Router::Split));
        assert_eq!(split("START TRANSACTION READ ONLY", 10, false, None, &d), read);
        // In a transaction, or with autocommit off: the writer.
        assert_eq!(split("SELECT 1", 10, true, None, &d), at(10, Router::Split));
        // State kept on a connection: where it is.
        assert_eq!(split("SELECT * FROM tmp", 10, false, Some(10), &d), at(10, Router::Split));
        assert_eq!(split("SHOW WARNINGS", 10, false, Some(20), &d), at(20, Router::Split));
        assert_eq!(split("SELECT FOUND_ROWS()", 10, false, Some(20), &d), at(20, Router::Split));
        assert_eq!(split("SELECT 1", 10, false, Some(20), &d), at(20, Router::Split));
        // …but a reader's connection never takes a write (nor a BEGIN): the writer does.
        assert_eq!(split("INSERT INTO t VALUES (1)", 10, false, Some(20), &d), at(10, Router::Split));
        assert_eq!(split("BEGIN", 10, false, Some(20), &d), at(10, Router::Split));
        // A user whose default hostgroup is no writer: no split.
        assert_eq!(split("SELECT 1", 3, false, None, &d), at(3, Router::Default));
        assert_eq!(split("SELECT 1", 20, false, None, &d), at(20, Router::Default));
    }

    #[test]
    fn precedence_rules_then_hints_then_the_split() {
        let mut d = Decision::default();
        let at = Routed::to;
        assert_eq!(split("SELECT 1 /* sluice:route=writer */", 10, false, None, &d), at(10, Router::Hint));
        assert_eq!(split("UPDATE t SET a = 1 /* sluice:route=reader */", 10, false, None, &d), at(20, Router::Hint));
        assert_eq!(split("SELECT 1 /* hostgroup=7 */", 10, false, None, &d), at(7, Router::Hint));
        assert_eq!(split("SELECT 1 /* sluice:route=hostgroup:8 */", 3, false, None, &d), at(8, Router::Hint));
        // writer/reader without a replication pair: no hint.
        assert_eq!(split("SELECT 1 /* sluice:route=reader */", 3, false, None, &d), at(3, Router::Default));
        d.actions.destination_hostgroup = Some(2);
        assert_eq!(split("SELECT 1 /* hostgroup=7 */", 10, false, None, &d), at(2, Router::Rules));
    }

    #[test]
    fn a_prepared_statement_routes_by_what_its_prepare_read() {
        let d = Decision::default();
        let replication = pair();
        let execute = |text: &str, in_transaction| {
            let statement = Statement::Known(Known::of(text.as_bytes()));
            route(&Facts {
                decision: &d,
                default_hostgroup: 10,
                statement,
                in_transaction,
                kept_hostgroup: None,
                replication: &replication,
            })
        };
        let at = Routed::to;
        assert_eq!(execute("SELECT v FROM t WHERE id = ?", false), Routed { fallback: Some(10), ..at(20, Router::Split) });
        assert_eq!(execute("SELECT v FROM t WHERE id = ? FOR UPDATE", false), at(10, Router::Split));
        assert_eq!(execute("INSERT INTO t VALUES (?)", false), at(10, Router::Split));
        assert_eq!(execute("SELECT v FROM t WHERE id = ?", true), at(10, Router::Split));
        assert_eq!(execute("SELECT /* sluice:route=writer */ v FROM t WHERE id = ?", false), at(10, Router::Hint));
    }
}
