//! A feed: items numbered and timestamped as they happen, the most recent kept for late
//! readers, served as a JSON list and streamed as Server-Sent Events. The admin API's
//! gateway events and policy decisions are two feeds.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What a feed carries: anything serializable with a kind, the SSE `event:` name.
pub trait Item: Serialize + Send + Sync + 'static {
    fn kind(&self) -> String;

    /// Items of one group (a server's decisions) make room for themselves: when the feed is
    /// full, the oldest item of the group with the most items goes, so a flood from one
    /// server cannot push out what happened to the others. Ungrouped items go oldest first.
    fn group(&self) -> Option<&str> {
        None
    }
}

/// One item as readers see it.
#[derive(Debug, Clone, Serialize)]
pub struct Numbered<T> {
    pub id: u64,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    #[serde(flatten)]
    pub item: T,
}

impl<T: Item> Numbered<T> {
    fn to_sse(&self) -> Bytes {
        let data = serde_json::to_string(self).unwrap_or_default();
        Bytes::from(format!(
            "id: {}\nevent: {}\ndata: {data}\n\n",
            self.id,
            self.item.kind()
        ))
    }
}

/// Kept items after some id, and the live items from then on.
type Subscription<T> = (Vec<Arc<Numbered<T>>>, broadcast::Receiver<Arc<Numbered<T>>>);

/// Numbers and keeps items; each reader gets each item once, from the replay or live.
pub struct Feed<T> {
    name: &'static str,
    keep: usize,
    recent: Mutex<Recent<T>>,
    live: broadcast::Sender<Arc<Numbered<T>>>,
}

struct Recent<T> {
    next_id: u64,
    items: VecDeque<Arc<Numbered<T>>>,
}

impl<T: Item> Feed<T> {
    /// A feed that keeps the last `keep` items; `name` opens its streams (`: wardgate NAME`).
    pub fn new(name: &'static str, keep: usize) -> Feed<T> {
        Feed {
            name,
            keep,
            recent: Mutex::new(Recent {
                next_id: 1,
                items: VecDeque::with_capacity(keep),
            }),
            live: broadcast::channel(keep).0,
        }
    }

    /// Numbers and keeps `item`, sends it to live readers, and returns its number.
    pub fn record(&self, item: T) -> u64 {
        let mut recent = wardgate_engine::lock::lock(&self.recent);
        let id = recent.next_id;
        let numbered = Arc::new(Numbered {
            id,
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            item,
        });
        recent.next_id += 1;
        if recent.items.len() == self.keep {
            let victim = Self::make_room(&recent.items);
            recent.items.remove(victim);
        }
        recent.items.push_back(numbered.clone());
        // Sent under the lock, so a subscriber sees every item exactly once: either in
        // its replay or live, never both and never neither.
        let _ = self.live.send(numbered);
        id
    }

    /// Which kept item goes to make room: the oldest of the largest group, or the oldest.
    fn make_room(items: &VecDeque<Arc<Numbered<T>>>) -> usize {
        let mut sizes: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for item in items {
            if let Some(group) = item.item.group() {
                *sizes.entry(group).or_default() += 1;
            }
        }
        let Some((largest, _)) = sizes.into_iter().max_by_key(|(_, size)| *size) else {
            return 0;
        };
        items
            .iter()
            .position(|item| item.item.group() == Some(largest))
            .unwrap_or(0)
    }

    /// The kept items numbered after `after`, oldest first.
    pub fn since(&self, after: u64) -> Vec<Arc<Numbered<T>>> {
        Self::kept_after(&wardgate_engine::lock::lock(&self.recent), after)
    }

    /// The kept items numbered after `after`, and a receiver for the ones to come.
    fn subscribe(&self, after: u64) -> Subscription<T> {
        let recent = wardgate_engine::lock::lock(&self.recent);
        (Self::kept_after(&recent, after), self.live.subscribe())
    }

    fn kept_after(recent: &Recent<T>, after: u64) -> Vec<Arc<Numbered<T>>> {
        recent
            .items
            .iter()
            .filter(|item| item.id > after)
            .cloned()
            .collect()
    }

    /// An SSE stream: the kept items after `after`, then (if `follow`) live ones until the
    /// client goes away or `stop` fires. A reader too slow for the live channel is told
    /// how many it missed; nothing waits for it.
    pub fn stream(
        &self,
        after: u64,
        follow: bool,
        stop: CancellationToken,
    ) -> mpsc::Receiver<Bytes> {
        let (replay, mut live) = self.subscribe(after);
        let (sender, receiver) = mpsc::channel(64);
        let opening = Bytes::from(format!(": wardgate {}\n\n", self.name));
        let name = self.name;
        tokio::spawn(async move {
            // An opening comment makes the response start at once, even with nothing to replay.
            if sender.send(opening).await.is_err() {
                return;
            }
            for item in replay {
                if sender.send(item.to_sse()).await.is_err() {
                    return;
                }
            }
            if !follow {
                return;
            }
            // What follows happens now: a reader can tell history from news.
            let news = Bytes::from(format!(": live {name}\n\n"));
            if sender.send(news).await.is_err() {
                return;
            }
            loop {
                let chunk = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = sender.closed() => return,
                    _ = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b": keep-alive\n\n"),
                    item = live.recv() => match item {
                        Ok(item) => item.to_sse(),
                        Err(broadcast::error::RecvError::Lagged(missed)) => Bytes::from(format!(
                            ": {missed} {name} were skipped because this client read too slowly\n\n"
                        )),
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        receiver
    }
}

/// Two SSE streams as one, for a reader that follows both (a browser may hold only a few
/// connections to one address): ends when both have ended or the reader goes away.
pub fn merge(
    mut first: mpsc::Receiver<Bytes>,
    mut second: mpsc::Receiver<Bytes>,
) -> mpsc::Receiver<Bytes> {
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(async move {
        let (mut first_open, mut second_open) = (true, true);
        while first_open || second_open {
            let chunk = tokio::select! {
                _ = sender.closed() => return,
                chunk = first.recv(), if first_open => chunk.or_else(|| { first_open = false; None }),
                chunk = second.recv(), if second_open => chunk.or_else(|| { second_open = false; None }),
            };
            if let Some(chunk) = chunk {
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Tick {
        n: usize,
    }

    impl Item for Tick {
        fn kind(&self) -> String {
            "tick".to_owned()
        }
    }

    #[test]
    fn the_replay_keeps_the_most_recent_items_and_resumes_after_an_id() {
        let feed = Feed::new("ticks", 256);
        for n in 0..256 + 44 {
            feed.record(Tick { n });
        }
        let ids: Vec<u64> = feed.since(0).iter().map(|item| item.id).collect();
        assert_eq!(ids.len(), 256);
        assert_eq!((ids[0], ids[255]), (45, 300));
        let ids: Vec<u64> = feed.since(298).iter().map(|item| item.id).collect();
        assert_eq!(ids, [299, 300]);
    }

    #[derive(Serialize)]
    struct Grouped {
        server: &'static str,
    }

    impl Item for Grouped {
        fn kind(&self) -> String {
            "decision".to_owned()
        }

        fn group(&self) -> Option<&str> {
            Some(self.server)
        }
    }

    #[test]
    fn a_flood_from_one_group_does_not_push_out_the_others() {
        let feed = Feed::new("decisions", 8);
        for server in ["quiet", "calm", "flood"] {
            feed.record(Grouped { server });
        }
        for _ in 0..100 {
            feed.record(Grouped { server: "flood" });
        }
        let kept: Vec<&str> = feed.since(0).iter().map(|item| item.item.server).collect();
        assert_eq!(kept.len(), 8);
        assert_eq!(&kept[..2], ["quiet", "calm"], "{kept:?}");
        // Still oldest first, and the newest is kept.
        let ids: Vec<u64> = feed.since(0).iter().map(|item| item.id).collect();
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]) && ids[7] == 103,
            "{ids:?}"
        );
    }

    #[test]
    fn an_item_arrives_in_the_replay_or_live_never_both() {
        let feed = Feed::new("ticks", 8);
        feed.record(Tick { n: 1 });
        let (replay, mut live) = feed.subscribe(0);
        feed.record(Tick { n: 2 });
        assert_eq!(replay.len(), 1);
        assert_eq!(live.try_recv().map(|item| item.id).ok(), Some(2));
        assert!(live.try_recv().is_err());
    }

    #[test]
    fn sse_blocks_carry_id_kind_and_json_data() {
        let feed = Feed::new("ticks", 8);
        feed.record(Tick { n: 7 });
        let text = String::from_utf8(feed.since(0)[0].to_sse().to_vec()).unwrap();
        assert!(text.starts_with("id: 1\nevent: tick\ndata: {"), "{text}");
        assert!(
            text.ends_with("}\n\n") && text.contains("\"n\":7"),
            "{text}"
        );
    }
}
