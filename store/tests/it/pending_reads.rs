//! `read_pending` reads the marks first and then plain index ranges (`plans.rs` checks
//! the plans); it returns what the one statement it replaced returned
//! (`test_util::reference_read_pending`: the mark as a sub-select correlated on each
//! row's priority), and what a model of the acks says is pending, in the tricky cases:
//! per-priority marks, individual acks above the mark, prepared rows, the cursor below,
//! at and above the mark, other containers' rows in between, pages of every size.
//!
//! One difference is deliberate, and checked: an individual ack counts under the mark
//! row it was recorded for, as the mark advance counts it. The old statement matched an
//! ack of any row, so a message acked under another priority than its own was hidden
//! from every read while its own mark could never pass it.

use std::collections::{BTreeMap, BTreeSet};

use ebb_store::test_util::{message_p, on_every_backend, prepared, Raw, TestStore};
use ebb_store::{MessageStore, MessageStoreExt, SubscriptionKey, WriteOp, WriteOutcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const T: &str = "topic://pending";
/// Another topic, whose rows sit between the topic's ids.
const OTHER: &str = "topic://other";

async fn subscribe(store: &dyn MessageStore, name: &str, prioritized: bool) -> SubscriptionKey {
    let key = SubscriptionKey::new("c", name);
    store
        .write_one(WriteOp::Subscribe {
            container: T.into(),
            key: key.clone(),
            selector: None,
            prioritized,
        })
        .await
        .unwrap();
    key
}

async fn ack(store: &dyn MessageStore, key: &SubscriptionKey, messages: &[(i64, u8)]) {
    let out = store
        .write_one(WriteOp::Ack {
            container: T.into(),
            key: key.clone(),
            messages: messages.to_vec(),
        })
        .await
        .unwrap();
    assert!(matches!(out, WriteOutcome::Acked { .. }), "{out:?}");
}

async fn ack_up_to(store: &dyn MessageStore, key: &SubscriptionKey, priority: Option<u8>, id: i64) {
    store
        .write_one(WriteOp::AckUpTo {
            container: T.into(),
            key: key.clone(),
            priority,
            up_to: id,
        })
        .await
        .unwrap();
}

/// `read_pending`'s ids, after checking that the old statement returns the same.
async fn pending(
    store: &dyn MessageStore,
    raw: &mut Raw,
    key: &SubscriptionKey,
    after: i64,
    priority: Option<u8>,
    limit: u32,
) -> Vec<i64> {
    let read: Vec<i64> = store
        .read_pending(T, key, after, priority, limit)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    let reference = raw.reference_pending(T, key, after, priority, limit).await;
    assert_eq!(
        read, reference,
        "{key:?}: after {after}, priority {priority:?}, limit {limit}"
    );
    read
}

/// What a subscription has acked, as the test did it: its start, its cumulative acks
/// (per mark row) and its individual acks.
struct Model {
    prioritized: bool,
    start: i64,
    up_to: BTreeMap<i32, i64>,
    acked: BTreeSet<i64>,
}

/// A message of the topic: `(id, priority, prepared)`.
type Row = (i64, u8, bool);

impl Model {
    fn new(prioritized: bool, start: i64) -> Self {
        Self {
            prioritized,
            start,
            up_to: BTreeMap::new(),
            acked: BTreeSet::new(),
        }
    }

    fn row(&self, priority: u8) -> i32 {
        if self.prioritized {
            i32::from(priority)
        } else {
            -1
        }
    }

    fn ack_up_to(&mut self, priority: Option<u8>, id: i64) {
        let rows: Vec<i32> = match (self.prioritized, priority) {
            (true, Some(p)) => vec![i32::from(p)],
            (true, None) => (0..10).collect(),
            (false, _) => vec![-1],
        };
        for row in rows {
            let mark = self.up_to.entry(row).or_insert(i64::MIN);
            *mark = (*mark).max(id);
        }
    }

    fn pending(&self, rows: &[Row], after: i64, priority: Option<u8>, limit: u32) -> Vec<i64> {
        rows.iter()
            .filter(|&&(id, p, prepared)| {
                !prepared
                    && id > after
                    && id > self.start
                    && priority.is_none_or(|want| want == p)
                    && id > self.up_to.get(&self.row(p)).copied().unwrap_or(i64::MIN)
                    && !self.acked.contains(&id)
            })
            .map(|r| r.0)
            .take(limit as usize)
            .collect()
    }
}

/// One mark for every priority: individual acks above it, a gap, prepared rows above
/// it, another topic's rows between the ids; the cursor below, at and above the mark.
async fn one_mark_reads_after_the_mark_and_skips_acked_and_prepared(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let key = subscribe(&*store, "one", false).await;
    let start = store.last_assigned_id();
    // 30 messages of the topic (priorities 0 to 9), each followed by one of another
    // topic; 13 and 25 are prepared.
    let mut batch = Vec::new();
    for i in 0..30 {
        let priority = (i * 7 % 10) as u8;
        batch.push(if i == 13 || i == 25 {
            let mut m = prepared(T, &format!("t{i}"), 0, "xid-1");
            m.priority = priority;
            m
        } else {
            message_p(T, &format!("t{i}"), 0, priority)
        });
        batch.push(message_p(OTHER, &format!("o{i}"), 0, 4));
    }
    let all = store.add_messages(batch).await.unwrap();
    let ids: Vec<i64> = all.iter().step_by(2).copied().collect();
    let rows: Vec<Row> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, (i * 7 % 10) as u8, i == 13 || i == 25))
        .collect();
    let mut model = Model::new(false, start);

    ack_up_to(&*store, &key, None, ids[9]).await;
    model.ack_up_to(None, ids[9]);
    let individually = [11, 12, 15, 20];
    let acks: Vec<(i64, u8)> = individually.iter().map(|&i| (ids[i], rows[i].1)).collect();
    ack(&*store, &key, &acks).await;
    model.acked.extend(acks.iter().map(|a| a.0));
    assert_eq!(
        store.count_individual_acks(T).await.unwrap(),
        4,
        "10 is not acked: a gap"
    );

    // The page after the mark: 10, then 13 (prepared), 11, 12 (acked) skipped.
    assert_eq!(
        pending(&*store, &mut raw, &key, 0, None, 3).await,
        vec![ids[10], ids[14], ids[16]]
    );
    let mark = ids[9];
    let afters = [
        0,
        start,
        mark - 1,
        mark,
        ids[10],
        ids[12],
        ids[13],
        ids[14],
        ids[28],
        ids[29],
        ids[29] + 1_000,
    ];
    for after in afters {
        for priority in [None, Some(0), Some(3), Some(4), Some(7), Some(9)] {
            for limit in [1, 2, 5, 100] {
                let read = pending(&*store, &mut raw, &key, after, priority, limit).await;
                assert_eq!(
                    read,
                    model.pending(&rows, after, priority, limit),
                    "after {after}, priority {priority:?}, limit {limit}"
                );
            }
        }
    }
    // A committed transaction's messages come after everything, pending.
    let WriteOutcome::Committed(renumbered) = store
        .write_one(WriteOp::Commit {
            xid: "xid-1".into(),
        })
        .await
        .unwrap()
    else {
        panic!("commit")
    };
    let last = pending(&*store, &mut raw, &key, ids[29], None, 10).await;
    assert_eq!(last, renumbered.iter().map(|r| r.1).collect::<Vec<_>>());
    assert!(store
        .read_pending(T, &key, 0, None, 0)
        .await
        .unwrap()
        .is_empty());
    let nobody = SubscriptionKey::new("c", "nobody");
    assert!(pending(&*store, &mut raw, &nobody, 0, None, 10)
        .await
        .is_empty());
    assert!(pending(&*store, &mut raw, &nobody, 0, Some(4), 10)
        .await
        .is_empty());
}

/// Per-priority marks far apart (DUR-01): every priority read merges ten ranges, each
/// after its own mark; one priority reads its own range.
async fn per_priority_marks_bound_each_priority_on_its_own(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let key = subscribe(&*store, "prio", true).await;
    let start = store.last_assigned_id();
    let priorities = [1u8, 9, 4, 9, 1, 4, 9, 9, 0, 4];
    let mut batch = Vec::new();
    for i in 0..60 {
        let priority = priorities[i % priorities.len()];
        batch.push(if i == 44 {
            let mut m = prepared(T, "p44", 0, "xid-2");
            m.priority = priority;
            m
        } else {
            message_p(T, &format!("m{i}"), 0, priority)
        });
        if i % 3 == 0 {
            batch.push(message_p(OTHER, &format!("o{i}"), 0, priority));
        }
    }
    let added = store.add_messages(batch).await.unwrap();
    let mut ids = Vec::new();
    let mut k = 0;
    for i in 0..60 {
        ids.push(added[k]);
        k += if i % 3 == 0 { 2 } else { 1 };
    }
    let rows: Vec<Row> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, priorities[i % priorities.len()], i == 44))
        .collect();
    let mut model = Model::new(true, start);
    let of = |p: u8| -> Vec<(i64, u8)> {
        rows.iter()
            .filter(|r| r.1 == p && !r.2)
            .map(|r| (r.0, r.1))
            .collect()
    };
    // Priority 9: the first 20 acked in order, so its mark moves far ahead of the
    // others'; two more out of order (individual acks above the gap).
    let nines = of(9);
    ack(&*store, &key, &nines[..20]).await;
    ack(&*store, &key, &[nines[21], nines[23]]).await;
    model.acked.extend(
        nines[..20]
            .iter()
            .chain([&nines[21], &nines[23]])
            .map(|a| a.0),
    );
    // Priority 4: a cumulative ack, then individual acks above a gap.
    let fours = of(4);
    ack_up_to(&*store, &key, Some(4), fours[3].0).await;
    model.ack_up_to(Some(4), fours[3].0);
    ack(&*store, &key, &[fours[5], fours[6], fours[9]]).await;
    model.acked.extend([fours[5].0, fours[6].0, fours[9].0]);
    let sub = store.find_subscription(T, &key).await.unwrap().unwrap();
    assert_eq!(sub.mark_for(9), nines[19].0);
    assert_eq!(sub.mark_for(4), fours[3].0);
    assert_eq!(sub.mark_for(1), start);

    // Every priority from the start: the low priorities' first messages come first.
    assert_eq!(
        pending(&*store, &mut raw, &key, 0, None, 3).await,
        vec![ids[0], ids[4], ids[8]],
        "priority 1, 1, 0: the 9s and the first 4s are acked"
    );
    let mut afters = vec![0, start];
    afters.extend(ids.iter().step_by(4).copied());
    afters.extend([nines[19].0, fours[3].0, ids[59] + 1]);
    for after in afters {
        for priority in [None, Some(0), Some(1), Some(4), Some(5), Some(9)] {
            for limit in [1, 2, 7, 100] {
                let read = pending(&*store, &mut raw, &key, after, priority, limit).await;
                assert_eq!(
                    read,
                    model.pending(&rows, after, priority, limit),
                    "after {after}, priority {priority:?}, limit {limit}"
                );
            }
        }
    }
}

/// A stuck message at the mark and 1,000 individually acked ones after it: the page
/// is the stuck one and the next pending ones, never an acked one, and never short.
async fn a_run_of_individual_acks_is_skipped_not_returned(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let key = subscribe(&*store, "dense", false).await;
    let ids = ebb_store::test_util::fill(&*store, T, 1_020, 0).await;
    let acks: Vec<(i64, u8)> = ids[1..1_001].iter().map(|&id| (id, 4)).collect();
    ack(&*store, &key, &acks).await;
    assert_eq!(store.count_individual_acks(T).await.unwrap(), 1_000);
    let before = store.stats().snapshot().message_rows;
    let page = pending(&*store, &mut raw, &key, 0, None, 5).await;
    assert_eq!(page, [&ids[..1], &ids[1_001..1_005]].concat());
    assert_eq!(
        store.stats().snapshot().message_rows - before,
        5,
        "the acked rows are skipped without their bodies"
    );
    let page = pending(&*store, &mut raw, &key, ids[0], Some(4), 50).await;
    assert_eq!(page, ids[1_001..].to_vec());
}

/// An ack recorded under another priority than the message's own counts for that
/// other mark row only: the message stays pending, as its own mark cannot pass it; an
/// ack under its own priority takes it.
async fn an_ack_counts_under_the_mark_row_it_names(t: TestStore) {
    let store = t.open().await;
    let key = subscribe(&*store, "rows", true).await;
    let ids = store
        .add_messages(vec![
            message_p(T, "a", 0, 7),
            message_p(T, "b", 0, 7),
            message_p(T, "c", 0, 2),
        ])
        .await
        .unwrap();
    let read = |priority| {
        let store = &store;
        let key = &key;
        async move {
            store
                .read_pending(T, key, 0, priority, 10)
                .await
                .unwrap()
                .iter()
                .map(|m| m.id)
                .collect::<Vec<_>>()
        }
    };
    // `b` (priority 7) acked as if it were of priority 3.
    ack(&*store, &key, &[(ids[1], 3)]).await;
    assert_eq!(read(None).await, ids);
    assert_eq!(read(Some(7)).await, ids[..2].to_vec());
    ack(&*store, &key, &[(ids[0], 7)]).await;
    let sub = store.find_subscription(T, &key).await.unwrap().unwrap();
    assert_eq!(sub.mark_for(7), ids[0], "the mark of 7 stops at b");
    ack(&*store, &key, &[(ids[1], 7)]).await;
    assert_eq!(read(None).await, vec![ids[2]]);
    let sub = store.find_subscription(T, &key).await.unwrap().unwrap();
    assert_eq!(sub.mark_for(7), ids[1]);
}

/// Random sends (some prepared, some on another topic), individual and cumulative
/// acks, commits and rollbacks, for a subscription with one mark and one with
/// per-priority marks; after each round, random reads equal the old statement's and
/// the model's.
async fn random_histories_read_what_the_old_statement_read(t: TestStore) {
    let store = t.open().await;
    let mut raw = Raw::connect(&t).await;
    let mut rng = StdRng::seed_from_u64(11);
    let subs = [
        (subscribe(&*store, "r-one", false).await, false),
        (subscribe(&*store, "r-prio", true).await, true),
    ];
    let start = store.last_assigned_id();
    let mut models: Vec<Model> = subs.iter().map(|s| Model::new(s.1, start)).collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut xids: Vec<String> = Vec::new();
    // The transaction of each prepared row.
    let mut xid_of: BTreeMap<i64, String> = BTreeMap::new();
    for round in 0..6 {
        // Sends.
        let mut batch = Vec::new();
        let mut kinds = Vec::new();
        let xid = format!("xid-{round}");
        for i in 0..60 {
            let priority: u8 = rng.gen_range(0..10);
            let roll: u32 = rng.gen_range(0..10);
            let body = format!("r{round}-{i}");
            let (m, kind) = match roll {
                0 => (message_p(OTHER, &body, 0, priority), None),
                1 => {
                    let mut m = prepared(T, &body, 0, &xid);
                    m.priority = priority;
                    (m, Some((priority, true)))
                }
                _ => (message_p(T, &body, 0, priority), Some((priority, false))),
            };
            batch.push(m);
            kinds.push(kind);
        }
        let added = store.add_messages(batch).await.unwrap();
        for (id, kind) in added.into_iter().zip(kinds) {
            if let Some((priority, prepared)) = kind {
                rows.push((id, priority, prepared));
                if prepared {
                    xid_of.insert(id, xid.clone());
                }
            }
        }
        xids.push(xid);
        // A transaction ends: committed (new ids) or rolled back.
        if round % 2 == 1 {
            let xid = xids.remove(0);
            if rng.gen_bool(0.5) {
                let out = store
                    .write_one(WriteOp::Commit { xid: xid.clone() })
                    .await
                    .unwrap();
                let WriteOutcome::Committed(renumbered) = out else {
                    panic!("{out:?}")
                };
                assert_eq!(
                    renumbered.len(),
                    xid_of.values().filter(|x| **x == xid).count()
                );
                for (old, new) in renumbered {
                    let at = rows.iter().position(|r| r.0 == old).unwrap();
                    let (_, priority, _) = rows.remove(at);
                    rows.push((new, priority, false));
                }
            } else {
                store
                    .write_one(WriteOp::Rollback { xid: xid.clone() })
                    .await
                    .unwrap();
                rows.retain(|r| xid_of.get(&r.0) != Some(&xid));
            }
        }
        // Acks: a third of each subscription's pending, individually; sometimes a
        // cumulative ack.
        for ((key, _), model) in subs.iter().zip(models.iter_mut()) {
            let open = model.pending(&rows, 0, None, u32::MAX);
            let acks: Vec<(i64, u8)> = open
                .iter()
                .filter(|_| rng.gen_bool(0.33))
                .map(|&id| (id, rows.iter().find(|r| r.0 == id).unwrap().1))
                .collect();
            ack(&*store, key, &acks).await;
            model.acked.extend(acks.iter().map(|a| a.0));
            if rng.gen_bool(0.4) && !open.is_empty() {
                let up_to = open[rng.gen_range(0..open.len())];
                let priority = rng.gen_bool(0.5).then(|| rng.gen_range(0..10u8));
                ack_up_to(&*store, key, priority, up_to).await;
                model.ack_up_to(priority, up_to);
            }
        }
        // Reads.
        let top = rows.iter().map(|r| r.0).max().unwrap_or(0);
        for ((key, _), model) in subs.iter().zip(&models) {
            for _ in 0..25 {
                let after = if rng.gen_bool(0.2) {
                    0
                } else {
                    rng.gen_range(start..=top + 1)
                };
                let priority = rng.gen_bool(0.5).then(|| rng.gen_range(0..10u8));
                let limit = [1, 3, 10, 1_000][rng.gen_range(0..4)];
                let read = pending(&*store, &mut raw, key, after, priority, limit).await;
                assert_eq!(
                    read,
                    model.pending(&rows, after, priority, limit),
                    "round {round}, {key:?}: after {after}, priority {priority:?}, limit {limit}"
                );
            }
        }
    }
}

on_every_backend!(
    one_mark_reads_after_the_mark_and_skips_acked_and_prepared,
    per_priority_marks_bound_each_priority_on_its_own,
    a_run_of_individual_acks_is_skipped_not_returned,
    an_ack_counts_under_the_mark_row_it_names,
    random_histories_read_what_the_old_statement_read,
);
