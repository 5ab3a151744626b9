//! Loom models: `RUSTFLAGS="--cfg weir_loom" cargo test --release --lib loom`.

use loom::thread;

use crate::loom::model::{Recorder, Stash};
use crate::runtime::Immediate;
use crate::{Publisher, PublisherExt};

/// The boundary's drain/credit protocol: a producer thread pushes three items
/// (only against credit) and completes, while downstream requests from another
/// thread; the drain runs on whichever thread signals it (`Immediate`). Every
/// item arrives once, in order, followed by completion, without any signal after
/// the threads finished (no lost wake-up), and upstream credit is conserved: it is
/// never more than the prefetch of 2 ahead of the items produced, and the replenish
/// after two consumed items is exactly 2.
#[test]
fn loom_publish_on_drain_and_credit() {
    loom::model(|| {
        let (publisher, stash, credit) = Stash::new();
        let recorder = Recorder::default();
        publisher
            .publish_on(Immediate, 2)
            .subscribe(recorder.clone());
        let mut upstream = stash.lock().unwrap().take().expect("subscribed");
        let producer = {
            let credit = credit.clone();
            thread::spawn(move || {
                let mut sent = 0u32;
                while sent < 3 {
                    let requested = credit.requested();
                    assert!(
                        requested - u64::from(sent) <= 2,
                        "more than prefetch outstanding"
                    );
                    if requested > u64::from(sent) {
                        upstream.on_next(sent);
                        sent += 1;
                    } else {
                        thread::yield_now();
                    }
                }
                upstream.on_complete();
            })
        };
        recorder.subscription().request(3);
        producer.join().unwrap();
        let state = recorder.0.lock().unwrap();
        assert_eq!(state.1, vec![0, 1, 2], "every item once, in order");
        assert!(state.2, "completion after the items");
        assert_eq!(
            credit.requested(),
            4,
            "prefetch 2, then 2 replenished after 2 consumed"
        );
    });
}

/// A window above one published run: the producer does not signal while a task
/// owns the drain (it only fences and reads the mark, `Core::notify`), and the task
/// looks for work once more after it stops watching (`unwatch`). The producer sends
/// two items while downstream requests from another thread; the drain runs on
/// whichever thread wins it. Once both threads are done (nothing else will ever
/// signal the drain), both items have arrived, in order: a producer that skipped its
/// signal never strands an item behind a task that was leaving. Fails with the fence
/// in either `notify` or `unwatch` removed.
#[test]
fn loom_a_watched_drain_strands_no_unsignalled_item() {
    const WINDOW: u64 = super::PUBLISH_RUN as u64 + 1;
    loom::model(|| {
        let (publisher, stash, credit) = Stash::new();
        let recorder = Recorder::default();
        publisher
            .publish_on(Immediate, WINDOW)
            .subscribe(recorder.clone());
        let mut upstream = stash.lock().unwrap().take().expect("subscribed");
        assert_eq!(credit.requested(), WINDOW, "the window asked for at once");
        let producer = thread::spawn(move || {
            upstream.on_next(0);
            upstream.on_next(1);
            upstream
        });
        recorder.subscription().request(2);
        let upstream = producer.join().unwrap();
        assert_eq!(recorder.items(), vec![0, 1], "every item once, in order");
        // Ends the subscription (no leak of the core through the recorder).
        recorder.subscription().cancel();
        drop(upstream);
    });
}
