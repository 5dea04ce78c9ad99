use super::*;

fn user(name: &str, addr: &str, mode: Mode) -> FirewallUserRow {
    FirewallUserRow { active: true, username: name.into(), client_address: addr.into(), mode, comment: String::new() }
}

fn rule(name: &str, addr: &str, schema: &str, digest: u64) -> FirewallRuleRow {
    FirewallRuleRow {
        active: true,
        username: name.into(),
        client_address: addr.into(),
        schemaname: schema.into(),
        flag_in: 0,
        digest: sql::digest::format_id(digest),
        comment: String::new(),
    }
}

fn stmt<'a>(user: &'a str, addr: &'a str, schema: &'a str, digest: u64, text: &'a str) -> Statement<'a> {
    Statement { username: user, client_address: addr, schemaname: schema, digest, flag: 0, text: text.as_bytes(), digest_text: b"" }
}

fn on(sqli: bool) -> FirewallSection {
    FirewallSection { enabled: true, errormsg: DEFAULT_ERRORMSG.into(), sqli }
}

#[test]
fn modes_and_the_allowlist() {
    let users = [user("app", "", Mode::Protecting), user("app", "10.0.0.9", Mode::Off), user("rep", "", Mode::Detecting)];
    let rules = [rule("app", "", "shop", 7), rule("rep", "", "shop", 8), rule("app", "10.0.0.1", "shop", 9)];
    let fw = Firewall::build(&users, &rules, &[], &on(false));
    assert!(fw.active() && fw.enabled());
    assert_eq!(fw.check(&stmt("app", "10.0.0.1", "shop", 7, "SELECT 1")), Verdict::Allowed);
    assert_eq!(fw.check(&stmt("app", "10.0.0.1", "other", 7, "SELECT 1")), Verdict::Blocked, "schema is part of the key");
    assert_eq!(fw.check(&stmt("app", "10.0.0.1", "shop", 8, "SELECT 1")), Verdict::Blocked, "another user's digest");
    assert_eq!(fw.check(&stmt("app", "10.0.0.1", "shop", 9, "SELECT 1")), Verdict::Allowed, "address-specific rule");
    assert_eq!(fw.check(&stmt("app", "10.0.0.2", "shop", 9, "SELECT 1")), Verdict::Blocked);
    assert_eq!(fw.check(&stmt("app", "10.0.0.9", "x", 1, "DROP TABLE t")), Verdict::Allowed, "OFF for this address");
    assert_eq!(fw.check(&stmt("rep", "1.2.3.4", "shop", 1, "SELECT 2")), Verdict::Detected);
    assert_eq!(fw.check(&stmt("rep", "1.2.3.4", "shop", 8, "SELECT 2")), Verdict::Allowed);
    assert_eq!(fw.check(&stmt("nobody", "1.2.3.4", "shop", 7, "SELECT 1")), Verdict::Blocked, "an unlisted user is PROTECTING");
    assert_eq!(fw.message(&Verdict::Blocked).as_deref(), Some(DEFAULT_ERRORMSG));
}

#[test]
fn inactive_rows_count_for_nothing() {
    let mut u = user("app", "", Mode::Off);
    u.active = false;
    let mut r = rule("app", "", "", 7);
    r.active = false;
    let fw = Firewall::build(&[u, user("app", "", Mode::Protecting)], &[r], &[], &on(false));
    assert_eq!(fw.check(&stmt("app", "h", "", 7, "SELECT 1")), Verdict::Blocked);
}

#[test]
fn detecting_logs_each_digest_once() {
    let fw = Firewall::build(&[user("rep", "", Mode::Detecting)], &[], &[], &on(false));
    assert!(fw.first_time("rep", 1));
    assert!(!fw.first_time("rep", 1));
    assert!(fw.first_time("other", 1));
    assert!(fw.first_time("rep", 2));
    // Many digests: each logged once (the table holds 4096).
    let new = (100..1100).filter(|&d| fw.first_time("rep", d)).count();
    assert_eq!(new, 1000);
    assert_eq!((100..1100).filter(|&d| fw.first_time("rep", d)).count(), 0);
    // Threads racing on the same digests: each still logged once in all.
    let firsts = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let n = (5000..5200).filter(|&d| fw.first_time("race", d)).count();
                firsts.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            });
        }
    });
    assert_eq!(firsts.into_inner(), 200);
}

#[test]
fn the_heuristic_and_its_allowlist() {
    let only_sqli = FirewallSection { enabled: false, errormsg: DEFAULT_ERRORMSG.into(), sqli: true };
    let fw = Firewall::build(&[], &[], &[], &only_sqli);
    assert!(fw.active() && !fw.enabled());
    assert!(matches!(fw.check(&stmt("a", "h", "", 1, "SELECT * FROM t WHERE id = 1 OR 1=1")), Verdict::Sqli(_)));
    assert_eq!(fw.check(&stmt("a", "h", "", 1, "SELECT * FROM t WHERE id = 1")), Verdict::Allowed);
    let allow = SqliFingerprintRow { active: true, fingerprint: "T&1o1".into() };
    let fw = Firewall::build(&[], &[], &[allow], &only_sqli);
    assert_eq!(fw.check(&stmt("a", "h", "", 1, "SELECT * FROM t WHERE id = 1 OR 1=1")), Verdict::Allowed);
    // With the allowlist on: listed digests and OFF users are not checked; DETECTING users are.
    let users = [user("app", "", Mode::Detecting), user("dba", "", Mode::Off)];
    let fw = Firewall::build(&users, &[rule("app", "", "", 5)], &[], &on(true));
    let bad = "SELECT * FROM t WHERE id = 1 OR 1=1";
    assert_eq!(fw.check(&stmt("app", "h", "", 5, bad)), Verdict::Allowed);
    assert!(matches!(fw.check(&stmt("app", "h", "", 6, bad)), Verdict::Sqli(_)));
    assert_eq!(fw.check(&stmt("dba", "h", "", 6, bad)), Verdict::Allowed);
    let msg = fw.message(&fw.check(&stmt("app", "h", "", 6, bad))).unwrap_or_default();
    assert_eq!(&*msg, "SQL injection detected (tautology, fingerprint 'T&1o1')");
}

#[test]
fn rows_are_checked() {
    let s = on(false);
    let bad_user = |u: FirewallUserRow| check(&[u], &[], &[], &s).map(|(t, i, c, m)| format!("{t}[{i:?}].{c}: {m}"));
    assert_eq!(bad_user(user("", "", Mode::Off)).as_deref(), Some("mysql_firewall_whitelist_users[Some(0)].username: must not be empty"));
    assert!(bad_user(user("a", "10.0.%", Mode::Off)).is_some_and(|m| m.contains("client_address: `10.0.%` is not an IP address")));
    assert!(check(&[user("a", "", Mode::Off), user("a", "", Mode::Detecting)], &[], &[], &s).is_some_and(|p| p.1 == Some(1)));
    let mut r = rule("a", "", "", 1);
    r.digest = "0xZZ".into();
    assert!(check(&[], &[r], &[], &s).is_some_and(|p| p.2 == "digest"));
    let mut r = rule("a", "", "", 1);
    r.flag_in = -1;
    assert!(check(&[], &[r], &[], &s).is_some_and(|p| p.2 == "flagIN"));
    let f = SqliFingerprintRow { active: true, fingerprint: "much too long".into() };
    assert!(check(&[], &[], &[f], &s).is_some_and(|p| p.0 == "mysql_firewall_whitelist_sqli_fingerprints"));
    let empty = FirewallSection { errormsg: String::new(), ..on(false) };
    assert!(check(&[], &[], &[], &empty).is_some_and(|p| p.2 == "errormsg"));
    assert_eq!(Mode::parse("protecting"), Some(Mode::Protecting));
    assert_eq!(Mode::parse("learning"), None);
}
