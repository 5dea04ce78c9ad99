//! Beside the data path: the built-in dashboard page (`dashboard.html`, self-contained: inline
//! CSS and vanilla JS, nothing fetched from elsewhere). It polls, relative to its own URL,
//! `api/stats/rates`, `api/stats/latency`, `api/stats/digests?limit=10` and `api/stats/pools`
//! every 2 s and sets `data-loaded="1"` on `<body>` after its first complete refresh.

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
        for id in ["qps", "p50", "p95", "p99", "digests", "pools", "updated", "error"] {
            assert_eq!(DASHBOARD_HTML.matches(&format!("id=\"{id}\"")).count(), 1, "id {id}");
        }
        for endpoint in ["\"api/stats/rates\"", "\"api/stats/latency\"", "\"api/stats/digests?limit=10\"", "\"api/stats/pools\""] {
            assert!(DASHBOARD_HTML.contains(endpoint), "{endpoint}");
        }
        assert!(DASHBOARD_HTML.contains("document.body.dataset.loaded = \"1\""));
        // Data goes in as text only.
        assert!(!DASHBOARD_HTML.contains("innerHTML") && !DASHBOARD_HTML.contains("insertAdjacentHTML"));
    }
}
