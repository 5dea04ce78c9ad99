//! Server error numbers and SQLSTATEs sluice itself sends, named as in the MySQL manual.

pub const ER_CON_COUNT_ERROR: u16 = 1040;
pub const ER_HANDSHAKE_ERROR: u16 = 1043;
pub const ER_ACCESS_DENIED_ERROR: u16 = 1045;
pub const ER_UNKNOWN_COM_ERROR: u16 = 1047;
pub const ER_SERVER_SHUTDOWN: u16 = 1053;
pub const ER_NO_SUCH_THREAD: u16 = 1094;
pub const ER_KILL_DENIED_ERROR: u16 = 1095;
pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
pub const ER_NET_READ_ERROR: u16 = 1158;
pub const ER_NOT_SUPPORTED_AUTH_MODE: u16 = 1251;
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
pub const ER_WRONG_ARGUMENTS: u16 = 1210;
pub const ER_UNKNOWN_STMT_HANDLER: u16 = 1243;
pub const ER_STMT_HAS_NO_OPEN_CURSOR: u16 = 1421;
pub const ER_MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;
/// Client-library codes, used when a backend cannot be reached or is lost mid-reply.
pub const CR_CONN_HOST_ERROR: u16 = 2003;
pub const CR_SERVER_LOST: u16 = 2013;

pub const SQLSTATE_GENERAL: &[u8; 5] = b"HY000";
pub const SQLSTATE_ACCESS_DENIED: &[u8; 5] = b"28000";
pub const SQLSTATE_UNKNOWN_COM: &[u8; 5] = b"08S01";
pub const SQLSTATE_CONN_COUNT: &[u8; 5] = b"08004";
pub const SQLSTATE_NOT_SUPPORTED: &[u8; 5] = b"42000";
pub const SQLSTATE_SHUTDOWN: &[u8; 5] = b"08S01";

/// What ProxySQL answers when a query rule's error_msg blocks a statement (kept for alerting
/// that already knows it).
pub const ER_NOT_ALLOWED_COMMAND: u16 = 1148;
/// No backend of the chosen hostgroup can take the statement (ProxySQL's number for it).
pub const ER_PROXY_NO_BACKEND: u16 = 9001;
