//! Limits on what one user may hold (② session, login path only): logged-in client sessions
//! per user, `mysql_users.max_connections`, refused beyond it with the server's own
//! ER_TOO_MANY_USER_CONNECTIONS (1203) as its max_user_connections does (docs/traffic.md).
//!
//! The counts are touched at login, COM_CHANGE_USER and session end, never per statement, so
//! one short lock over a map is enough.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Logged-in sessions per user name.
#[derive(Default)]
pub struct UserConnections {
    counts: Mutex<HashMap<Box<str>, u32>>,
}

/// One session counted for its user; released on drop.
pub struct UserSlot {
    owner: Arc<UserConnections>,
    user: Box<str>,
}

impl UserConnections {
    /// Counts a session of `user`, unless `max` of its sessions are logged in already.
    pub fn admit(self: &Arc<Self>, user: &str, max: u32) -> Option<UserSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(user.into()).or_insert(0);
        if *n >= max {
            if *n == 0 {
                counts.remove(user);
            }
            return None;
        }
        *n += 1;
        Some(UserSlot { owner: self.clone(), user: user.into() })
    }

    /// Sessions of `user` logged in now.
    pub fn count(&self, user: &str) -> u32 {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).get(user).copied().unwrap_or(0)
    }
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut counts = self.owner.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.user);
            }
        }
    }
}

/// The error a login over its user's limit gets, as MariaDB words it.
pub fn too_many_message(user: &str) -> String {
    format!("User {user} already has more than 'max_user_connections' active connections")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_at_most_its_limit_and_a_slot_comes_back_on_drop() {
        let users = Arc::new(UserConnections::default());
        let a1 = users.admit("a", 2).expect("first");
        let _a2 = users.admit("a", 2).expect("second");
        assert!(users.admit("a", 2).is_none(), "third refused");
        let _b = users.admit("b", 1).expect("another user has its own count");
        drop(a1);
        assert_eq!(users.count("a"), 1);
        let _a3 = users.admit("a", 2).expect("a slot came back");
        assert!(users.admit("c", 0).is_none());
        assert!(users.counts.lock().unwrap().get("c").is_none(), "a refused user leaves no entry");
    }
}
