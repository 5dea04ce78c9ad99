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
/// A user at its max_user_connections (sluice: `mysql_users.max_connections`), SQLSTATE 42000.
pub const ER_TOO_MANY_USER_CONNECTIONS: u16 = 1203;
/// A user past a resource limit (sluice: a statement limit of `mysql_users` or a query rule),
/// SQLSTATE 42000.
pub const ER_USER_LIMIT_REACHED: u16 = 1226;
pub const ER_NOT_SUPPORTED_AUTH_MODE: u16 = 1251;
pub const ER_SERVER_IS_IN_SECURE_AUTH_MODE: u16 = 1275;
pub const ER_PLUGIN_IS_NOT_LOADED: u16 = 1524;
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
pub const ER_UNSUPPORTED_PS: u16 = 1295;
pub const ER_WRONG_ARGUMENTS: u16 = 1210;
pub const ER_UNKNOWN_STMT_HANDLER: u16 = 1243;
pub const ER_STMT_HAS_NO_OPEN_CURSOR: u16 = 1421;
pub const ER_MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;
/// The server ended the connection. sluice's answer when a backend connection is lost during
/// a statement: 2000–2999 (CR_SERVER_LOST…) are client-library codes, which libmariadb refuses
/// in an ERR packet (it reports 2027 "Malformed packet" instead).
pub const ER_CONNECTION_KILLED: u16 = 1927;

pub const SQLSTATE_GENERAL: &[u8; 5] = b"HY000";
pub const SQLSTATE_ACCESS_DENIED: &[u8; 5] = b"28000";
pub const SQLSTATE_UNKNOWN_COM: &[u8; 5] = b"08S01";
pub const SQLSTATE_CONN_COUNT: &[u8; 5] = b"08004";
pub const SQLSTATE_NOT_SUPPORTED: &[u8; 5] = b"42000";
pub const SQLSTATE_SHUTDOWN: &[u8; 5] = b"08S01";
pub const SQLSTATE_CONNECTION_KILLED: &[u8; 5] = b"70100";

/// Codes a client library keeps for itself (CR_*); never sent by a server, and refused by
/// libmariadb when one is.
pub const CLIENT_CODES: std::ops::Range<u16> = 2000..3000;

/// What ProxySQL answers when a query rule's error_msg blocks a statement (kept for alerting
/// that already knows it).
pub const ER_NOT_ALLOWED_COMMAND: u16 = 1148;
/// No backend of the chosen hostgroup can take the statement, or the chosen one cannot be
/// reached (ProxySQL's number for it).
pub const ER_PROXY_NO_BACKEND: u16 = 9001;
