//! ② session, a statement the shard map sends to several shards: one connection per shard
//! (each from the pool, in line with the session's state, as `acquire` gives them), the
//! shards' statements sent and their replies merged by `exec::merge`, then every connection
//! handed back (or closed, when its reply was not read to its end).

use super::multiplex::{Held, Needs};
use super::{Flow, Session};
use crate::exec::merge::{self, Shard};
use crate::plan::{self, Plan};
use crate::shard::plan::ShardPlan;
use proto::frame::Frame;

impl Session {
    /// Carries out a plan whose statement runs on several shards.
    pub(super) async fn forward_sharded(&mut self, plan: Plan, sharded: Box<ShardPlan>, frame: Frame, seq: u8) -> Flow {
        let watch = self.watch_query(&frame, &plan);
        self.client.consume(frame.wire_len);
        let mut held: Vec<Held> = Vec::with_capacity(sharded.targets.len());
        for target in &sharded.targets {
            match self.acquire(target.hostgroup, plan.retries(), Needs::default()).await {
                Ok(h) => held.push(h),
                Err(e) => {
                    for h in held {
                        self.settle(h);
                    }
                    let outcome = crate::exec::Outcome { error: true, error_code: super::backend_error_code(&e), ..Default::default() };
                    self.observed(&watch, None, &outcome, 0, &self.plan_scratch.digest_text, b"");
                    return self.reply_backend_error(seq, &e).await;
                }
            }
        }
        let requests: Vec<Vec<u8>> = sharded.targets.iter().map(|t| plan::query_packet(t.sql.as_bytes(), 0).to_vec()).collect();
        let mut ends: Vec<(u16, bool)> = Vec::with_capacity(held.len());
        let result = {
            let mut shards: Vec<Shard> = held
                .iter_mut()
                .zip(&sharded.targets)
                .map(|(h, t)| Shard {
                    format: h.backend.format(),
                    status: h.backend.status,
                    finished: false,
                    label: format!("`{}` (hostgroup {})", t.database, t.hostgroup),
                    conn: &mut h.backend.conn,
                })
                .collect();
            let result = merge::run(&mut self.client, &mut shards, &requests, &sharded.merge, seq).await;
            ends.extend(shards.iter().map(|s| (s.status, s.finished)));
            result
        };
        // A reply not read to its end leaves its connection mid-stream: closed, never pooled.
        for (h, (status, finished)) in held.iter_mut().zip(&ends) {
            h.backend.status = *status;
            h.backend.broken |= !finished;
        }
        let outcome = match result {
            Ok(o) => o,
            Err(merge::ClientGone) => {
                for mut h in held {
                    h.backend.broken = true;
                    self.release(h);
                }
                return Flow::End;
            }
        };
        // An error carries no status flags: the session's stay as they were.
        if !outcome.error {
            self.status = outcome.status;
        }
        let server = held.first().map(|h| h.backend.server.clone());
        let sent = sharded.targets.first().map_or(&b""[..], |t| t.sql.as_bytes());
        self.observed(&watch, server.as_ref(), &outcome, requests.iter().map(Vec::len).sum(), &self.plan_scratch.digest_text, sent);
        for h in held {
            if h.backend.broken {
                self.release(h);
            } else {
                self.settle(h);
            }
        }
        Flow::Continue
    }
}
