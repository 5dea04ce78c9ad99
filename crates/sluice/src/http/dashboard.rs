//! Beside the data path: the built-in dashboard page (`dashboard.html`, self-contained: inline
//! CSS and vanilla JS, nothing fetched from elsewhere). It polls, relative to its own URL,
//! `api/stats/rates`, `api/stats/latency`, `api/stats/digests?limit=10` and `api/stats/pools`
//! (and `api/stats/probe`, whose failure is not one) every 2 s and sets `data-loaded="1"` on
//! `<body>` after its first complete refresh. While the server-time probe is enabled, a section
//! splits each digest's mean statement into sluice's time, network/queue time and server time.

/// The page, served as `text/html; charset=utf-8`.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

#[cfg(test)]
mod tests {
    use super::DASHBOARD_HTML;

    #[test]
    fn self_contained_with_every_id() {
        let lower = DASHBOARD_HTML.to_ascii_lowercase();
        for banned in ["http://", "https://", "//cdn", "<link", "@import", "src="] {
            assert!(!lower.contains(banned), "the dashboard refers to something outside: {banned}");
        }
        for id in ["qps", "p50", "p95", "p99", "digests", "split", "split-section", "probe-state", "pools", "updated", "error"] {
            assert_eq!(DASHBOARD_HTML.matches(&format!("id=\"{id}\"")).count(), 1, "id {id}");
        }
        for endpoint in
            ["\"api/stats/rates\"", "\"api/stats/latency\"", "\"api/stats/digests?limit=10\"", "\"api/stats/pools\"", "\"api/stats/probe\""]
        {
            assert!(DASHBOARD_HTML.contains(endpoint), "{endpoint}");
        }
        assert!(DASHBOARD_HTML.contains("document.body.dataset.loaded = \"1\""));
        // Data goes in as text only.
        assert!(!DASHBOARD_HTML.contains("innerHTML") && !DASHBOARD_HTML.contains("insertAdjacentHTML"));
    }
}
