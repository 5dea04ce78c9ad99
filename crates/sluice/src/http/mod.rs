//! Beside the data path: the HTTP side (REST, `/metrics`, the dashboard page).

pub mod dashboard;
pub mod prometheus;
