//! ④ route: where a statement goes, decided in one place. The routers are asked in a fixed
//! precedence and the first that claims the statement decides:
//!
//! 1. **rules**: a matching query rule's `destination_hostgroup`;
//! 2. *(to come)* a routing hint in the statement's first comment;
//! 3. *(to come)* the read/write split: reads to the reader hostgroup, the rest to the writer;
//! 4. *(to come)* the shard map: the shards a sharded table's key selects (several targets);
//! 5. **default**: the user's `default_hostgroup`.
//!
//! The result is a `Target`; which server of a hostgroup serves it is the pool's choice (⑤,
//! by weight among ONLINE servers). An open transaction keeps its connection whatever the
//! target (`session::multiplex::acquire`), as ProxySQL's transaction_persistent.

use crate::rules::Decision;

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
    Default,
}

/// A routing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    pub target: Target,
    pub by: Router,
}

/// What the routers read.
pub struct Facts<'a> {
    /// The rules' decision (the default when none matched).
    pub decision: &'a Decision,
    /// The session user's default hostgroup.
    pub default_hostgroup: u32,
}

/// The target of a statement: the first router, in precedence order, that claims it.
pub fn route(facts: &Facts) -> Routed {
    by_rules(facts).unwrap_or(Routed { target: Target::Hostgroup(facts.default_hostgroup), by: Router::Default })
}

/// Where a command that is not a routed statement goes (COM_PING, COM_INIT_DB, prepared
/// statements…): the user's default hostgroup.
pub fn default_target(default_hostgroup: u32) -> Target {
    Target::Hostgroup(default_hostgroup)
}

/// Router 1: a rule's destination_hostgroup.
fn by_rules(facts: &Facts) -> Option<Routed> {
    let hostgroup = facts.decision.actions.destination_hostgroup?;
    Some(Routed { target: Target::Hostgroup(hostgroup), by: Router::Rules })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_destination_wins_over_the_default() {
        let mut decision = Decision::default();
        let routed = route(&Facts { decision: &decision, default_hostgroup: 7 });
        assert_eq!(routed, Routed { target: Target::Hostgroup(7), by: Router::Default });
        decision.actions.destination_hostgroup = Some(2);
        let routed = route(&Facts { decision: &decision, default_hostgroup: 7 });
        assert_eq!(routed, Routed { target: Target::Hostgroup(2), by: Router::Rules });
    }
}
