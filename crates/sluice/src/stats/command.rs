//! stats (beside ①–⑥): statement kinds as stats_mysql_commands_counters names them, and its
//! latency buckets.

use sql::lexer::{code_tokens, Kind};

/// What a finished statement was: the first keyword of a COM_QUERY, or the protocol command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Select,
    Insert,
    Update,
    Delete,
    Replace,
    /// BEGIN and START TRANSACTION (ProxySQL counts the latter apart; sluice does not).
    Begin,
    Commit,
    Rollback,
    /// ROLLBACK TO [SAVEPOINT] name.
    RollbackSavepoint,
    Set,
    Show,
    Use,
    Call,
    /// Every CREATE … (ProxySQL splits CREATE_TABLE, CREATE_INDEX…; one row here).
    Create,
    Alter,
    Drop,
    Rename,
    Truncate,
    Prepare,
    Execute,
    Deallocate,
    Lock,
    Unlock,
    Grant,
    Revoke,
    Load,
    Savepoint,
    Release,
    Analyze,
    Optimize,
    Kill,
    Flush,
    Purge,
    Describe,
    Explain,
    StmtPrepare,
    StmtExecute,
    StmtClose,
    Ping,
    InitDb,
    ChangeUser,
    ResetConnection,
    /// Anything else (DO, XA, HANDLER, CHECK…): ProxySQL's UNKNOWN.
    Other,
}

/// stats_mysql_commands_counters' bucket columns: a statement of `t` µs counts in the first
/// bucket whose limit is ≥ t (ProxySQL's `t <= limit`), else in cnt_INFs.
pub const BUCKET_COLUMNS: [&str; 12] = [
    "cnt_100us",
    "cnt_500us",
    "cnt_1ms",
    "cnt_5ms",
    "cnt_10ms",
    "cnt_50ms",
    "cnt_100ms",
    "cnt_500ms",
    "cnt_1s",
    "cnt_5s",
    "cnt_10s",
    "cnt_INFs",
];

/// Upper limits (µs, inclusive) of every bucket but the last.
pub const BUCKET_LIMITS_US: [u64; 11] = [100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000];

/// The bucket (index into `BUCKET_COLUMNS`) of a statement that took `us` µs.
pub fn bucket(us: u64) -> usize {
    BUCKET_LIMITS_US.partition_point(|&limit| limit < us)
}

impl Command {
    /// Every command, in declaration order; `Command as usize` indexes it.
    pub const ALL: [Command; 43] = [
        Command::Select,
        Command::Insert,
        Command::Update,
        Command::Delete,
        Command::Replace,
        Command::Begin,
        Command::Commit,
        Command::Rollback,
        Command::RollbackSavepoint,
        Command::Set,
        Command::Show,
        Command::Use,
        Command::Call,
        Command::Create,
        Command::Alter,
        Command::Drop,
        Command::Rename,
        Command::Truncate,
        Command::Prepare,
        Command::Execute,
        Command::Deallocate,
        Command::Lock,
        Command::Unlock,
        Command::Grant,
        Command::Revoke,
        Command::Load,
        Command::Savepoint,
        Command::Release,
        Command::Analyze,
        Command::Optimize,
        Command::Kill,
        Command::Flush,
        Command::Purge,
        Command::Describe,
        Command::Explain,
        Command::StmtPrepare,
        Command::StmtExecute,
        Command::StmtClose,
        Command::Ping,
        Command::InitDb,
        Command::ChangeUser,
        Command::ResetConnection,
        Command::Other,
    ];
    pub const COUNT: usize = Command::ALL.len();

    /// Classifies a COM_QUERY text by its first keyword (any case, comments and leading
    /// parentheses skipped); a second word only where it changes the kind.
    pub fn from_sql(text: &[u8]) -> Command {
        let mut first = sql::classify::first_keyword(text);
        if first.is_empty() {
            // `(SELECT …) UNION …`: ProxySQL looks past the parentheses too.
            first = code_tokens(text)
                .find(|t| !(t.kind == Kind::Punct && t.text(text) == b"("))
                .filter(|t| t.kind == Kind::Word)
                .map_or(&b""[..], |t| t.text(text));
        }
        let is = |k: &str| first.eq_ignore_ascii_case(k.as_bytes());
        // The nth word (0: the first), looked at only for START and ROLLBACK.
        let word_is = |n: usize, k: &str| {
            code_tokens(text).filter(|t| t.kind == Kind::Word).nth(n).is_some_and(|t| t.text(text).eq_ignore_ascii_case(k.as_bytes()))
        };
        // By length first: one comparison per candidate of the right length.
        match first.len() {
            2 if is("DO") => Command::Other,
            3 if is("SET") => Command::Set,
            3 if is("USE") => Command::Use,
            4 if is("WITH") => Command::Select,
            4 if is("SHOW") => Command::Show,
            4 if is("CALL") => Command::Call,
            4 if is("DROP") => Command::Drop,
            4 if is("LOCK") => Command::Lock,
            4 if is("LOAD") => Command::Load,
            4 if is("KILL") => Command::Kill,
            4 if is("DESC") => Command::Describe,
            5 if is("BEGIN") => Command::Begin,
            5 if is("START") && word_is(1, "TRANSACTION") => Command::Begin,
            5 if is("ALTER") => Command::Alter,
            5 if is("GRANT") => Command::Grant,
            5 if is("FLUSH") => Command::Flush,
            5 if is("PURGE") => Command::Purge,
            5 if is("TABLE") => Command::Select,
            6 if is("SELECT") || is("VALUES") => Command::Select,
            6 if is("INSERT") => Command::Insert,
            6 if is("UPDATE") => Command::Update,
            6 if is("DELETE") => Command::Delete,
            6 if is("COMMIT") => Command::Commit,
            6 if is("CREATE") => Command::Create,
            6 if is("RENAME") => Command::Rename,
            6 if is("UNLOCK") => Command::Unlock,
            6 if is("REVOKE") => Command::Revoke,
            7 if is("REPLACE") => Command::Replace,
            7 if is("PREPARE") => Command::Prepare,
            7 if is("EXECUTE") => Command::Execute,
            7 if is("RELEASE") => Command::Release,
            7 if is("ANALYZE") => Command::Analyze,
            7 if is("EXPLAIN") => Command::Explain,
            8 if is("ROLLBACK") => {
                // ROLLBACK [WORK] TO [SAVEPOINT] name
                if word_is(1, "TO") || (word_is(1, "WORK") && word_is(2, "TO")) {
                    Command::RollbackSavepoint
                } else {
                    Command::Rollback
                }
            }
            8 if is("TRUNCATE") => Command::Truncate,
            8 if is("OPTIMIZE") => Command::Optimize,
            8 if is("DESCRIBE") => Command::Describe,
            9 if is("SAVEPOINT") => Command::Savepoint,
            10 if is("DEALLOCATE") => Command::Deallocate,
            _ => Command::Other,
        }
    }

    /// The name stats_mysql_commands_counters shows: ProxySQL's where it has one, MySQL's
    /// `COM_…` name for protocol commands it does not list.
    pub fn name(self) -> &'static str {
        match self {
            Command::Select => "SELECT",
            Command::Insert => "INSERT",
            Command::Update => "UPDATE",
            Command::Delete => "DELETE",
            Command::Replace => "REPLACE",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Rollback => "ROLLBACK",
            Command::RollbackSavepoint => "ROLLBACK_SAVEPOINT",
            Command::Set => "SET",
            Command::Show => "SHOW",
            Command::Use => "USE",
            Command::Call => "CALL",
            Command::Create => "CREATE",
            Command::Alter => "ALTER",
            Command::Drop => "DROP",
            Command::Rename => "RENAME_TABLE",
            Command::Truncate => "TRUNCATE_TABLE",
            Command::Prepare => "PREPARE",
            Command::Execute => "EXECUTE",
            Command::Deallocate => "DEALLOCATE",
            Command::Lock => "LOCK_TABLE",
            Command::Unlock => "UNLOCK_TABLES",
            Command::Grant => "GRANT",
            Command::Revoke => "REVOKE",
            Command::Load => "LOAD",
            Command::Savepoint => "SAVEPOINT",
            Command::Release => "RELEASE_SAVEPOINT",
            Command::Analyze => "ANALYZE_TABLE",
            Command::Optimize => "OPTIMIZE",
            Command::Kill => "KILL",
            Command::Flush => "FLUSH",
            Command::Purge => "PURGE",
            Command::Describe => "DESCRIBE",
            Command::Explain => "EXPLAIN",
            Command::StmtPrepare => "COM_STMT_PREPARE",
            Command::StmtExecute => "COM_STMT_EXECUTE",
            Command::StmtClose => "COM_STMT_CLOSE",
            Command::Ping => "COM_PING",
            Command::InitDb => "COM_INIT_DB",
            Command::ChangeUser => "COM_CHANGE_USER",
            Command::ResetConnection => "COM_RESET_CONNECTION",
            Command::Other => "UNKNOWN",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_declaration_order() {
        for (i, c) in Command::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{c:?}");
        }
        let mut names: Vec<_> = Command::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Command::COUNT);
    }

    #[test]
    fn classifies_first_keyword() {
        let cases: &[(&str, Command)] = &[
            ("SELECT 1", Command::Select),
            ("select * from t", Command::Select),
            ("  \n\tSeLeCt 1", Command::Select),
            ("/* hint */ select 1", Command::Select),
            ("-- note\nselect 1", Command::Select),
            ("# note\nupdate t set a=1", Command::Update),
            ("/*!40101 SET NAMES utf8 */", Command::Set),
            ("table t", Command::Select),
            ("((select 1)) union (select 2)", Command::Select),
            ("WITH x AS (SELECT 1) SELECT * FROM x", Command::Select),
            ("with recursive r as (select 1) delete from t", Command::Select),
            ("START TRANSACTION", Command::Begin),
            ("start transaction read only", Command::Begin),
            ("START SLAVE", Command::Other),
            ("begin", Command::Begin),
            ("commit", Command::Commit),
            ("rollback", Command::Rollback),
            ("ROLLBACK WORK", Command::Rollback),
            ("rollback to savepoint s1", Command::RollbackSavepoint),
            ("ROLLBACK WORK TO s1", Command::RollbackSavepoint),
            ("savepoint s1", Command::Savepoint),
            ("release savepoint s1", Command::Release),
            ("replace into t values (1)", Command::Replace),
            ("delete from t", Command::Delete),
            ("set names utf8mb4", Command::Set),
            ("show tables", Command::Show),
            ("use db", Command::Use),
            ("call p()", Command::Call),
            ("create table t (a int)", Command::Create),
            ("alter table t add b int", Command::Alter),
            ("drop table t", Command::Drop),
            ("truncate t", Command::Truncate),
            ("rename table a to b", Command::Rename),
            ("prepare s from 'select 1'", Command::Prepare),
            ("execute s", Command::Execute),
            ("deallocate prepare s", Command::Deallocate),
            ("lock tables t read", Command::Lock),
            ("unlock tables", Command::Unlock),
            ("grant all on *.* to u", Command::Grant),
            ("revoke all on *.* from u", Command::Revoke),
            ("load data infile 'x' into table t", Command::Load),
            ("analyze table t", Command::Analyze),
            ("optimize table t", Command::Optimize),
            ("kill 5", Command::Kill),
            ("flush tables", Command::Flush),
            ("purge binary logs to 'x'", Command::Purge),
            ("desc t", Command::Describe),
            ("describe t", Command::Describe),
            ("explain select 1", Command::Explain),
            ("values (1),(2)", Command::Select),
            ("do sleep(1)", Command::Other),
            ("xa start 'x'", Command::Other),
            ("", Command::Other),
            ("/* only a comment */", Command::Other),
            ("selectx 1", Command::Other),
            ("'select'", Command::Other),
        ];
        for (text, want) in cases {
            assert_eq!(Command::from_sql(text.as_bytes()), *want, "{text:?}");
        }
    }

    #[test]
    fn bucket_boundaries_are_inclusive() {
        assert_eq!(BUCKET_COLUMNS.len(), BUCKET_LIMITS_US.len() + 1);
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(100), 0);
        assert_eq!(bucket(101), 1);
        assert_eq!(bucket(500), 1);
        assert_eq!(bucket(501), 2);
        assert_eq!(bucket(1_000), 2);
        assert_eq!(bucket(1_001), 3);
        assert_eq!(bucket(10_000_000), 10);
        assert_eq!(bucket(10_000_001), 11);
        assert_eq!(bucket(u64::MAX), 11);
        for (i, &limit) in BUCKET_LIMITS_US.iter().enumerate() {
            assert_eq!(bucket(limit), i, "{limit}");
            assert_eq!(bucket(limit + 1), i + 1, "{limit}+1");
        }
    }
}
