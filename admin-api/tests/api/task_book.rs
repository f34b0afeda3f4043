//! The task book's contract (`opstate::TaskBook`), on both books: the ledger database's
//! (`SqlTaskBook`, on this run's database: PostgreSQL in CI, SQLite otherwise) and this process's
//! own (`MemoryTaskBook`). Every write is conditional, so two proxies can never both accept, end
//! or claim the same task.

use super::*;
use admin_api::task_book::SqlTaskBook;
use chrono::{DateTime, Duration, TimeZone, Utc};
use opstate::{Ending, MemoryTaskBook, Task, TaskBook, TaskStatus};
use std::sync::Arc;

/// Both books, each empty (the database book's deployment is kept with it).
async fn books() -> (Api, Vec<(&'static str, Arc<dyn TaskBook>)>) {
    let api = Api::start().await;
    let sql: Arc<dyn TaskBook> = Arc::new(SqlTaskBook::new(api.state.db.clone()));
    let memory: Arc<dyn TaskBook> = Arc::new(MemoryTaskBook::new());
    (api, vec![("sql", sql), ("memory", memory)])
}

/// Whole seconds: what every database keeps exactly.
fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_780_000_000 + seconds, 0).unwrap()
}

fn task(id: &str, checked: i64) -> Task {
    Task {
        id: id.to_string(),
        organization_id: 7,
        api_key_id: 3,
        group_id: 1,
        model_requested: "veo".into(),
        model_served: "veo-3".into(),
        resolution: "720p".into(),
        seconds_requested: Some(8),
        account_id: None,
        supplier_task_id: None,
        hold_id: format!("hold-{id}"),
        hold_nanos: 4_000_000_000,
        retail_rate_ppm: 1_250_000,
        wholesale_rate_ppm: Some(800_000),
        status: TaskStatus::Submitting,
        progress: 0,
        failure_code: None,
        failure_message: None,
        seconds_charged: None,
        cost_nanos: None,
        created_at: at(0),
        updated_at: at(0),
        checked_at: at(checked),
        completed_at: None,
    }
}

#[tokio::test]
async fn a_task_is_recorded_once_and_read_back_whole() {
    let (_api, books) = books().await;
    for (name, book) in books {
        book.ping().await.unwrap();
        assert_eq!(book.get("video_x").await.unwrap(), None, "{name}");
        book.insert(task("video_x", 0)).await.unwrap();
        assert_eq!(
            book.get("video_x").await.unwrap(),
            Some(task("video_x", 0)),
            "{name}"
        );
        assert!(
            book.insert(task("video_x", 5)).await.is_err(),
            "{name}: an id is recorded once"
        );
        assert_eq!(book.get("video_x").await.unwrap(), Some(task("video_x", 0)));
    }
}

#[tokio::test]
async fn only_a_submitting_task_is_accepted_and_only_a_running_one_moves() {
    let (_api, books) = books().await;
    for (name, book) in books {
        book.insert(task("video_a", 0)).await.unwrap();
        assert!(
            !book
                .accepted("video_none", "acct", "sup", TaskStatus::Queued, 0)
                .await
                .unwrap(),
            "{name}: an unknown task"
        );
        assert!(
            book.accepted("video_a", "acct", "sup-1", TaskStatus::Queued, 5)
                .await
                .unwrap()
        );
        assert!(
            !book
                .accepted("video_a", "other", "sup-2", TaskStatus::Queued, 0)
                .await
                .unwrap(),
            "{name}: accepted once"
        );
        let t = book.get("video_a").await.unwrap().unwrap();
        assert_eq!(
            (t.account_id.as_deref(), t.supplier_task_id.as_deref()),
            (Some("acct"), Some("sup-1")),
            "{name}"
        );
        assert_eq!((t.status, t.progress), (TaskStatus::Queued, 5));
        assert!(t.checked_at > at(0), "{name}: acceptance is a check");
        book.progressed("video_a", TaskStatus::InProgress, 40)
            .await
            .unwrap();
        let t = book.get("video_a").await.unwrap().unwrap();
        assert_eq!(
            (t.status, t.progress),
            (TaskStatus::InProgress, 40),
            "{name}"
        );
        let done = Ending {
            status: TaskStatus::Completed,
            seconds: 8,
            cost_nanos: 3_000_000_000,
            failure: None,
        };
        assert!(book.ended("video_a", &done).await.unwrap(), "{name}");
        let failed = Ending {
            status: TaskStatus::Failed,
            seconds: 0,
            cost_nanos: 0,
            failure: Some(("late".into(), "a second ending".into())),
        };
        assert!(
            !book.ended("video_a", &failed).await.unwrap(),
            "{name}: ended once"
        );
        book.progressed("video_a", TaskStatus::InProgress, 10)
            .await
            .unwrap();
        let t = book.get("video_a").await.unwrap().unwrap();
        assert_eq!(
            (t.status, t.progress, t.seconds_charged, t.cost_nanos),
            (TaskStatus::Completed, 100, Some(8), Some(3_000_000_000)),
            "{name}: an ended task never moves"
        );
        assert_eq!((t.failure_code, t.failure_message), (None, None));
        assert!(t.completed_at.is_some());
        // A failure records its reason and no progress.
        book.insert(task("video_f", 0)).await.unwrap();
        assert!(book.ended("video_f", &failed).await.unwrap());
        let t = book.get("video_f").await.unwrap().unwrap();
        assert_eq!(
            (t.status, t.progress, t.failure_code.as_deref()),
            (TaskStatus::Failed, 0, Some("late")),
            "{name}"
        );
    }
}

#[tokio::test]
async fn due_lists_running_tasks_checked_before_oldest_first_and_one_claim_wins() {
    let (_api, books) = books().await;
    for (name, book) in books {
        for (id, checked) in [
            ("video_3", 30),
            ("video_1", 10),
            ("video_2", 20),
            ("video_9", 90),
        ] {
            book.insert(task(id, checked)).await.unwrap();
        }
        book.insert(task("video_done", 5)).await.unwrap();
        let ending = Ending {
            status: TaskStatus::Failed,
            seconds: 0,
            cost_nanos: 0,
            failure: Some(("lost".into(), "lost".into())),
        };
        book.ended("video_done", &ending).await.unwrap();
        let due = book.due(at(50), 10).await.unwrap();
        let ids: Vec<&str> = due.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["video_1", "video_2", "video_3"], "{name}");
        let first = book.due(at(50), 2).await.unwrap();
        assert_eq!(first.len(), 2, "{name}: at most the limit");
        // Two sweepers read the same task; only one claim moves its check.
        let read = due[0].clone();
        let (a, b) = tokio::join!(book.claim(&read), book.claim(&read));
        assert_eq!(
            [a.unwrap(), b.unwrap()].iter().filter(|c| **c).count(),
            1,
            "{name}: one claim wins"
        );
        assert!(
            !book.claim(&read).await.unwrap(),
            "{name}: a stale read claims nothing"
        );
        let due = book.due(at(50), 10).await.unwrap();
        assert!(
            due.iter().all(|t| t.id != "video_1"),
            "{name}: a claimed task is not due"
        );
        assert!(
            book.due(Utc::now() + Duration::seconds(5), 10)
                .await
                .unwrap()
                .iter()
                .any(|t| t.id == "video_1"),
            "{name}: due again after its new check"
        );
    }
}

/// The memory book is bounded: at its cap, a new task forgets the task that ended earliest; with
/// every task still running, it is refused and nothing is forgotten.
#[tokio::test]
async fn the_memory_book_keeps_at_most_its_cap() {
    let book = MemoryTaskBook::with_cap(2);
    book.insert(task("video_1", 0)).await.unwrap();
    book.insert(task("video_2", 0)).await.unwrap();
    assert!(
        book.insert(task("video_3", 0)).await.is_err(),
        "all running"
    );
    assert!(book.get("video_1").await.unwrap().is_some());
    let ending = Ending {
        status: TaskStatus::Completed,
        seconds: 4,
        cost_nanos: 1,
        failure: None,
    };
    book.ended("video_2", &ending).await.unwrap();
    book.insert(task("video_3", 0)).await.unwrap();
    assert_eq!(
        book.get("video_2").await.unwrap(),
        None,
        "the ended one is forgotten"
    );
    assert!(
        book.get("video_1").await.unwrap().is_some(),
        "a running one never is"
    );
    assert!(book.get("video_3").await.unwrap().is_some());
}
