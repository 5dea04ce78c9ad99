//! ②–④ plan: what one statement is and where it goes, decided synchronously from its text
//! and the session's facts, with no socket: classify (KILL, USE, effects) → ③ rules →
//! ④ route. `session::statement` carries a plan out (⑤ pool, ⑥ exec).
//!
//! A plan owns only what differs from the client's request: the request itself stays in the
//! client's read buffer and is forwarded as it is unless `rewrite` replaces it.

use crate::route::{self, Routed};
use crate::rules::{Decision, Query, RuleSet, Scratch, Who};
use crate::shard::plan::Sharding;
use crate::stats::Command;
use proto::command::COM_QUERY;
use proto::errors::*;
use sql::classify::{Dynamic, Intercept};
use sql::effects::Effects;
use std::time::Duration;

/// One COM_QUERY, as the planner sees it.
pub struct Statement<'a> {
    /// The statement text: all of it, or its first `max_buffered_packet` bytes when it is
    /// larger (`whole == false`: the rest is relayed to the backend unread).
    pub text: &'a [u8],
    pub whole: bool,
    /// The number of 16 MiB packets the client sent it in, and the first one's sequence id.
    pub chunks: usize,
    pub first_seq: u8,
}

/// What the session contributes to a plan.
pub struct Facts<'a> {
    /// What rules may test: user, schema, client and proxy addresses.
    pub who: Who<'a>,
    /// The session id clients see (CONNECTION_ID() is answered with it).
    pub session_id: u32,
    /// The session set `@@pseudo_thread_id` itself: reads of it are the server's, not the
    /// session id.
    pub pseudo_thread_id_set: bool,
    /// The user's default hostgroup, where a statement no router claims goes.
    pub default_hostgroup: u32,
    /// Statistics want the digest even when no rule does.
    pub digests_on: bool,
    /// The client may send several statements in one (CLIENT_MULTI_STATEMENTS).
    pub multi_statements: bool,
    /// In a transaction, or autocommit off (the read/write split keeps such a session on the
    /// writer).
    pub in_transaction: bool,
    /// The hostgroup of a connection the session keeps for state it holds there.
    pub kept_hostgroup: Option<u32>,
    /// `[[mysql_replication_hostgroups]]` in force.
    pub replication: &'a [crate::config::ReplicationHostgroupRow],
    /// The server reads the session's backslashes as escapes (NO_BACKSLASH_ESCAPES off, by
    /// its status flags): `sql::classify::intercept_as`.
    pub backslash_escapes: bool,
    /// The shard map in force (empty: no sharding).
    pub shards: &'a crate::shard::ShardMap,
}

/// What sluice does with a statement.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send it to the plan's targets.
    Forward,
    /// KILL, SHOW PROCESSLIST, or text that could run a KILL sluice cannot resolve: sluice
    /// answers it from its own sessions, or refuses it (`sql::classify::intercept`).
    Intercept(Intercept),
    /// A rule answers it with no backend: `error_msg` (an error) or `OK_msg`.
    Answer { error: bool, message: Box<str> },
    /// sluice refuses it with this error.
    Refuse { code: u16, message: String },
    /// `EXPLAIN SHARDING statement`: where the statement would go, answered by sluice.
    ExplainSharding(Vec<ExplainRow>),
    /// `SHOW STATUS` (`sql::classify::show_status`), routed as the plan says: the server's
    /// answer, with Threads_connected counting sluice's client sessions.
    ShowStatus,
}

/// One row of `EXPLAIN SHARDING`: a shard, its hostgroup, its statement, the merge.
#[derive(Debug, PartialEq, Eq)]
pub struct ExplainRow {
    pub shard: String,
    pub hostgroup: u32,
    pub statement: String,
    pub merge: String,
}

/// `EXPLAIN SHARDING stmt`: `stmt`, when `text` is that.
fn explain_sharding(text: &[u8]) -> Option<&[u8]> {
    let mut words = sql::lexer::code_tokens(text);
    let (a, b) = (words.next()?, words.next()?);
    let is = |t: sql::lexer::Token, w: &str| t.kind == sql::lexer::Kind::Word && t.text(text).eq_ignore_ascii_case(w.as_bytes());
    (is(a, "EXPLAIN") && is(b, "SHARDING")).then(|| text.get(b.end..).unwrap_or_default())
}

/// What `EXPLAIN SHARDING` answers for `stmt`.
fn explain(stmt: &[u8], facts: &Facts) -> Action {
    let row = |shard: &str, hostgroup, statement: &str, merge: &str| ExplainRow {
        shard: shard.into(),
        hostgroup,
        statement: statement.into(),
        merge: merge.into(),
    };
    let trimmed = String::from_utf8_lossy(stmt).trim().to_string();
    match crate::shard::plan::plan(facts.shards, facts.who.schema, trimmed.as_bytes()) {
        Sharding::NotSharded => {
            Action::ExplainSharding(vec![row("", facts.default_hostgroup, &trimmed, "not sharded: routed as without sharding")])
        }
        Sharding::Single(s) => Action::ExplainSharding(vec![row(&s.database, s.hostgroup, &s.sql, "one shard: forwarded")]),
        Sharding::Fanout(p) => {
            let mut merge = p.merge.describe();
            let held = p.targets.len().saturating_sub(p.max_connections);
            if held > 0 {
                // Past the connection budget (session::sharded::early_batches).
                merge.push_str(&format!(
                    "; read {} shards at once: the first {held} held whole (max_merge_buffer_bytes), in batches",
                    p.max_connections
                ));
            }
            Action::ExplainSharding(p.targets.iter().map(|t| row(&t.database, t.hostgroup, &t.sql, &merge)).collect())
        }
        Sharding::Refused(message) => Action::Refuse { code: ER_NOT_SUPPORTED_YET, message },
    }
}

/// One statement's plan.
#[derive(Debug)]
pub struct Plan {
    /// The statement's class, for statistics.
    pub command: Command,
    /// Its digest (0: neither statistics nor rules wanted it); the normalized text is in the
    /// session's `PlanScratch::digest_text`.
    pub digest: u64,
    /// The rules' decision (the default when no rule matched or none is loaded).
    pub decision: Decision,
    pub action: Action,
    /// The packet the backend gets instead of the client's: the rules' rewrite, or the text
    /// with sluice's session id for CONNECTION_ID().
    pub rewrite: Option<bytes::Bytes>,
    /// What the statement does to the server session (pins, state to read back).
    pub effects: Effects,
    /// `USE db` alone: the schema the session moves to once the server accepts it.
    pub use_db: Option<String>,
    /// Where it goes, and which router decided.
    pub routed: Routed,
    /// `PREPARE s FROM …` / `EXECUTE IMMEDIATE …` of a user variable or an expression, whose
    /// text must be read and checked for a KILL before the statement is sent.
    pub dynamic_sql: Option<Dynamic>,
    /// The statement is relayed beyond its head, and its unread rest could hold a statement
    /// sluice must see (a KILL after `;`, or inside anything but a plain SELECT, INSERT…):
    /// exec watches the rest for those words and refuses the statement if one comes.
    pub watch_tail: bool,
    /// A statement the shard map sends to several shards: their statements and the merge
    /// (`routed` then names the first shard's hostgroup).
    pub sharded: Option<Box<crate::shard::plan::ShardPlan>>,
    /// A statement the shard map sends to one shard (in `rewrite`): whose column definitions
    /// get the logical names back.
    pub shard_names: Option<crate::shard::ShardNames>,
    /// The text reads `information_schema.processlist`, which the session answers with its
    /// sessions (`sql::classify::processlist_sites`) in the text it sends.
    pub processlist: bool,
}

impl Plan {
    /// The hostgroup a single-target plan goes to.
    pub fn hostgroup(&self) -> u32 {
        self.routed.target.hostgroup()
    }

    /// Connect attempts beyond the first (the rule's `retries`, else 1).
    pub fn retries(&self) -> u32 {
        self.decision.actions.retries.unwrap_or(1)
    }

    /// The rule's `multiplex = 0`: the connection stays with the session.
    pub fn pins_connection(&self) -> bool {
        self.decision.actions.multiplex == Some(0)
    }

    /// The rule's `delay` before the statement is sent.
    pub fn delay(&self) -> Option<Duration> {
        self.decision.actions.delay.filter(|&ms| ms > 0).map(|ms| Duration::from_millis(ms.into()))
    }

    /// The rule's `timeout`: KILL QUERY after it.
    pub fn timeout(&self) -> Option<Duration> {
        self.decision.actions.timeout.filter(|&ms| ms > 0).map(|ms| Duration::from_millis(ms.into()))
    }

    /// The rule that asked for a query-log line (`log = 1`).
    pub fn log_rule(&self) -> Option<u32> {
        self.decision.actions.log.filter(|&on| on).and(self.decision.last_rule)
    }

    /// Whether the statement reads LAST_INSERT_ID(), so its connection must carry the session's.
    pub fn reads_last_insert_id(&self) -> bool {
        self.effects.flags & sql::effects::USES_LAST_INSERT_ID != 0
    }
}

thread_local! {
    /// Recent statement shapes' digests and `Shape`s, one memo per worker thread: the
    /// sessions a worker runs share their shapes, and no lock is taken.
    static DIGEST_MEMO: std::cell::RefCell<sql::memo::DigestMemo<Shape>> = std::cell::RefCell::new(sql::memo::DigestMemo::with_notes());
}

/// What the planner reads from a statement's text that does not depend on its literal values,
/// kept with the template of its shape in the digest memo, so that the statements of one shape
/// have their text read once. A template matches a statement only when their tokens are the
/// same but for the literals' values (`sql::memo`), and everything here is read from tokens
/// other than literals:
/// - the command, the routing hint (comments are not literals) and the read/write class;
/// - `plain`: none of the words the KILL interception acts on appears anywhere in the text
///   (strings included: only dynamic SQL reads a literal, behind PREPARE or IMMEDIATE), and
///   the statement has no session effects, no CONNECTION_ID() or processlist to answer, and
///   is not SHOW STATUS or USE.
///
/// Never kept for a template with a backslash, nor used for a statement with one: under
/// NO_BACKSLASH_ESCAPES a backslash in what the memo reads as one string can end it there
/// (`sql::classify::intercept_as` reads such a text both ways).
#[derive(Debug, Clone, Copy)]
struct Shape {
    command: Command,
    known: route::Known,
    plain: bool,
}

impl Shape {
    fn of(text: &[u8]) -> Option<Shape> {
        if memchr::memchr(b'\\', text).is_some() {
            return None;
        }
        let plain = !sql::classify::mentions_keywords(text)
            && sql::effects::effects(text).is_empty()
            && sql::classify::parse_use(text).is_none()
            && !sql::classify::show_status(text)
            && sql::classify::processlist_sites(text).is_none()
            && sql::classify::rewrite_connection_id(text, 0, true, false).is_none();
        Some(Shape { command: Command::from_sql(text), known: route::Known::of(text), plain })
    }
}

/// Per-session buffers planning reuses, so a plan allocates only what it must own.
#[derive(Default)]
pub struct PlanScratch {
    pub rules: Scratch,
    /// The normalized text of the last digest computed.
    pub digest_text: Vec<u8>,
}

impl PlanScratch {
    /// `text`'s digest into `digest_text` when `stats` or the rules want it (0: not computed).
    pub fn digest(&mut self, rules: &RuleSet, text: &[u8], stats: bool) -> u64 {
        self.digest_shaped(rules, text, stats).0
    }

    /// `digest`, and the `Shape` of `text` when its memo template knows it (it then applies to
    /// `text`: no backslash in it).
    fn digest_shaped(&mut self, rules: &RuleSet, text: &[u8], stats: bool) -> (u64, Option<Shape>) {
        if !(stats || rules.needs_digest()) {
            self.digest_text.clear();
            return (0, None);
        }
        let (digest, shape) = DIGEST_MEMO.with_borrow_mut(|memo| memo.digest_noted(text, &mut self.digest_text, Shape::of));
        // The template had no backslash; this statement's literals may.
        (digest.id, shape.filter(|_| memchr::memchr(b'\\', text).is_none()))
    }

    /// The rules' decision on `text` (whose digest, if computed, is `digest`); the default
    /// when no rules are loaded.
    pub fn decide(&mut self, rules: &RuleSet, who: &Who, text: &[u8], digest: u64) -> Decision {
        if rules.is_empty() {
            return Decision::default();
        }
        rules.evaluate(&Query { who, text, digest, digest_text: &self.digest_text }, &mut self.rules)
    }
}

/// Plans a COM_QUERY: classify → rules → route.
pub fn plan(stmt: &Statement, facts: &Facts, rules: &RuleSet, scratch: &mut PlanScratch) -> Plan {
    let text = stmt.text;
    // The digest first: its memo template may know the statement's shape, which spares the
    // reads of its text below.
    let (digest, shape) = scratch.digest_shaped(rules, text, facts.digests_on);
    let command = shape.map_or_else(|| Command::from_sql(text), |s| s.command);
    if !facts.shards.is_empty() {
        if let Some(explained) = explain_sharding(text) {
            scratch.digest_text.clear();
            return Plan::answered(command, explain(explained, facts), facts);
        }
    }
    let plain = shape.is_some_and(|s| s.plain);
    let intercept = if plain { None } else { sql::classify::intercept_as(text, facts.backslash_escapes) };
    let dynamic_sql = match intercept {
        // The session sends an expression's value, or guards, in the text: it needs all of it.
        Some(Intercept::Dynamic(Dynamic::Expression { .. } | Dynamic::Guarded { .. })) if !(stmt.whole && stmt.chunks == 1) => {
            scratch.digest_text.clear();
            return Plan::answered(command, Action::Intercept(Intercept::Refuse(sql::classify::refusal::DYNAMIC_UNSEEN)), facts);
        }
        Some(Intercept::Dynamic(dynamic)) => Some(dynamic),
        Some(answered) => {
            scratch.digest_text.clear();
            return Plan::answered(command, Action::Intercept(answered), facts);
        }
        None => None,
    };
    let decision = scratch.decide(rules, &facts.who, text, digest);
    let sent = decision.rewritten.as_deref().unwrap_or(text);
    let rewritten = decision.rewritten.is_some();
    // The shape is the client's text's, not a rewrite's.
    let shape = shape.filter(|_| !rewritten);
    let plain = plain && !rewritten;
    let use_db = if plain { None } else { sql::classify::parse_use(sent) };
    let effects = if plain { Effects::default() } else { sql::effects::effects(sent) };
    let route_facts = route::Facts {
        decision: &decision,
        default_hostgroup: facts.default_hostgroup,
        statement: shape.map_or(route::Statement::Text(sent), |s| route::Statement::Known(s.known)),
        in_transaction: facts.in_transaction,
        kept_hostgroup: facts.kept_hostgroup,
        replication: facts.replication,
    };
    // Router 4, the shard map, between the split and the default.
    let mut shard_text = None;
    let mut shard_names = None;
    let mut sharded = None;
    let mut shard_refusal = None;
    let routed = match route::claimed(&route_facts) {
        Some(r) => r,
        None => match route::by_shard(facts.shards, facts.who.schema, sent) {
            // Routers 1–3 were asked already: not again.
            None | Some(Sharding::NotSharded) => Routed::default_hostgroup(facts.default_hostgroup),
            // In a transaction one shard runs on the transaction's branch there too.
            Some(Sharding::Single(s)) if facts.in_transaction => {
                let hostgroup = s.hostgroup;
                let merge = crate::shard::plan::Merge::Ok { sum: false };
                sharded = Some(Box::new(crate::shard::plan::ShardPlan::one(s, merge)));
                Routed::shard(hostgroup)
            }
            Some(Sharding::Single(s)) => {
                shard_text = Some(s.sql);
                shard_names = Some(crate::shard::ShardNames { node_database: s.database, names: s.names });
                Routed::shard(s.hostgroup)
            }
            Some(Sharding::Fanout(p)) => {
                let first = p.targets.first().map_or(facts.default_hostgroup, |t| t.hostgroup);
                sharded = Some(Box::new(p));
                Routed::shard(first)
            }
            Some(Sharding::Refused(why)) => {
                shard_refusal = Some(why);
                Routed::default_hostgroup(facts.default_hostgroup)
            }
        },
    };
    let is_sharded = shard_text.is_some() || sharded.is_some() || shard_refusal.is_some();
    // The reply's sequence ids follow the request's last chunk, and replies stream through
    // unchanged: a rewrite must not change the number of 16 MiB chunks.
    let action = if let Some(why) = shard_refusal {
        Action::Refuse { code: ER_NOT_SUPPORTED_YET, message: why }
    } else if is_sharded && (!stmt.whole || stmt.chunks != 1) {
        Action::Refuse {
            code: ER_NOT_SUPPORTED_YET,
            message: "sluice cannot shard a statement larger than max_buffered_packet or 16 MiB".into(),
        }
    } else if rewritten && !stmt.whole {
        let rule = decision.last_rule.map_or(String::new(), |r| format!(" (rule_id {r})"));
        let message =
            format!("sluice cannot apply a rewrite to a statement larger than max_buffered_packet, which it streams unread{rule}");
        Action::Refuse { code: ER_NOT_SUPPORTED_YET, message }
    } else if rewritten && chunks(sent.len() + 1) != stmt.chunks {
        let rule = decision.last_rule.map_or(String::new(), |r| format!(" (rule_id {r})"));
        let message = format!("sluice cannot apply a rewrite that moves a statement across a 16 MiB packet boundary{rule}");
        Action::Refuse { code: ER_NOT_SUPPORTED_YET, message }
    } else if let Some(m) = &decision.actions.error_msg {
        Action::Answer { error: true, message: m.clone() }
    } else if let Some(m) = &decision.actions.ok_msg {
        Action::Answer { error: false, message: m.clone() }
    } else if !plain && !is_sharded && stmt.whole && stmt.chunks == 1 && sql::classify::show_status(sent) {
        Action::ShowStatus
    } else {
        Action::Forward
    };
    let processlist = !plain
        && action == Action::Forward
        && !is_sharded
        && stmt.whole
        && stmt.chunks == 1
        && sql::classify::processlist_sites(sent).is_some();
    // The text the backend gets: the rules' rewrite, and sluice's id for CONNECTION_ID().
    let rewrite = if action != Action::Forward {
        None
    } else if let Some(text) = shard_text {
        Some(query_packet(text.as_bytes(), stmt.first_seq))
    } else if let Some(with_id) = (!plain && stmt.whole && stmt.chunks == 1)
        .then(|| rewrite_connection_id(sent, facts.session_id, !facts.pseudo_thread_id_set, processlist))
        .flatten()
    {
        Some(query_packet(&with_id, stmt.first_seq))
    } else if rewritten {
        Some(query_packet(sent, stmt.first_seq))
    } else {
        None
    };
    let watch_tail = !stmt.whole && (facts.multi_statements || !sql::classify::plain_dml(text));
    Plan { command, digest, decision, action, rewrite, effects, use_db, routed, dynamic_sql, watch_tail, sharded, shard_names, processlist }
}

impl Plan {
    /// A plan sluice answers itself: no digest, no rules, nothing sent.
    fn answered(command: Command, action: Action, facts: &Facts) -> Plan {
        Plan {
            command,
            digest: 0,
            decision: Decision::default(),
            action,
            rewrite: None,
            effects: Effects::default(),
            use_db: None,
            routed: route::route(&route::Facts::plain(&Decision::default(), facts.default_hostgroup)),
            dynamic_sql: None,
            watch_tail: false,
            sharded: None,
            shard_names: None,
            processlist: false,
        }
    }
}

/// The rules' actions on COM_STMT_PREPARE text: its `error_msg` blocks the prepare, its
/// `cache_ttl` makes the statement's executes cacheable. (Prepared statements are not routed
/// by rules: they go where the session's other commands go.)
pub fn prepare_decision(text: &[u8], who: &Who, rules: &RuleSet, scratch: &mut PlanScratch) -> crate::rules::Decision {
    if rules.is_empty() {
        return Default::default();
    }
    let digest = scratch.digest(rules, text, false);
    scratch.decide(rules, who, text, digest)
}

/// `sql` with CONNECTION_ID() answered with the session's id (`sql::classify::rewrite_connection_id`),
/// each SELECT so rewritten kept out of the server's query cache: the server never caches a
/// statement that calls CONNECTION_ID(), but it would cache the literal that replaced it
/// (`Qcache_queries_in_cache` and `Qcache_hits` would count it).
pub fn rewrite_connection_id(sql: &[u8], id: u32, pseudo_thread_id: bool, processlist: bool) -> Option<Vec<u8>> {
    let with_id = sql::classify::rewrite_connection_id(sql, id, pseudo_thread_id, processlist)?;
    Some(uncached(sql, &with_id).unwrap_or(with_id))
}

/// `rewritten` (`sql` with CONNECTION_ID() calls replaced, statement for statement) with each
/// statement that starts with SELECT (or `(SELECT`) and called CONNECTION_ID() in `sql` marked
/// SQL_NO_CACHE for MariaDB only (`/*M! … */`: a comment to MySQL, which has no query cache and
/// warns about the keyword); a SQL_CACHE of its own becomes SQL_NO_CACHE (MariaDB refuses
/// both). `None` when no statement needs it.
fn uncached(sql: &[u8], rewritten: &[u8]) -> Option<Vec<u8>> {
    use sql::lexer::{code_tokens, Kind, Token};
    const MARK: &[u8] = b" /*M! SQL_NO_CACHE */";
    let word = |text: &[u8], t: &Token, w: &str| t.kind == Kind::Word && t.text(text).eq_ignore_ascii_case(w.as_bytes());
    let statements = |text: &[u8]| -> Vec<Vec<Token>> {
        let toks: Vec<Token> = code_tokens(text).collect();
        toks.split(|t| t.kind == Kind::Punct && t.text(text) == b";").map(<[Token]>::to_vec).collect()
    };
    let select = |text: &[u8], stmt: &[Token]| stmt.iter().find(|t| t.text(text) != b"(").filter(|t| word(text, t, "SELECT")).copied();
    let calls =
        |stmt: &[Token]| stmt.windows(3).any(|w| word(sql, &w[0], "CONNECTION_ID") && w[1].text(sql) == b"(" && w[2].text(sql) == b")");
    let (before, after) = (statements(sql), statements(rewritten));
    if before.len() != after.len() {
        return None;
    }
    // (start, end, replacement) of each edit of `rewritten`, in order.
    let mut edits: Vec<(usize, usize, &[u8])> = Vec::new();
    for (old, new) in before.iter().zip(&after) {
        let Some(first) = select(sql, old).and(select(rewritten, new)) else { continue };
        if !calls(old) || new.iter().any(|t| word(rewritten, t, "SQL_NO_CACHE")) {
            continue;
        }
        match new.iter().find(|t| word(rewritten, t, "SQL_CACHE")) {
            Some(own) => edits.push((own.start, own.end, b"SQL_NO_CACHE")),
            None => edits.push((first.end, first.end, MARK)),
        }
    }
    if edits.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(rewritten.len() + MARK.len() * edits.len());
    let mut copied = 0;
    for (start, end, replacement) in edits {
        out.extend_from_slice(&rewritten[copied..start]);
        out.extend_from_slice(replacement);
        copied = end;
    }
    out.extend_from_slice(&rewritten[copied..]);
    Some(out)
}

/// Packets a payload of `len` bytes takes (a payload of exactly 16 MiB − 1 needs an empty tail).
fn chunks(len: usize) -> usize {
    len / proto::frame::MAX_CHUNK + 1
}

pub fn query_packet(sql: &[u8], seq: u8) -> bytes::Bytes {
    let mut buf = Vec::with_capacity(sql.len() + 5);
    proto::frame::write_command(&mut buf, seq, COM_QUERY, sql);
    bytes::Bytes::from(buf)
}

#[cfg(test)]
mod tests;
