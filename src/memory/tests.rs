use super::*;
use crate::cancel::CancelToken;
use std::sync::mpsc;
use std::thread;

/// A budget of `limit` bytes whose charges wait up to `wait`.
fn waiting(limit: u64, wait: Duration) -> Arc<MemoryBudget> {
    let b = Arc::new(MemoryBudget::new(Some(limit)));
    b.set_wait(wait);
    b
}

/// Waits (generously) until `b` has `n` waiting charges.
fn until_waiting(b: &MemoryBudget, n: usize) {
    let t0 = Instant::now();
    while b.waiting.load(Ordering::Acquire) < n {
        assert!(t0.elapsed() < Duration::from_secs(20), "never waited");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn charges_stop_at_the_limit_and_come_back() {
    let b = Arc::new(MemoryBudget::new(Some(100)));
    let r = b.reserve("t", "a", 60).unwrap();
    let e = b.reserve_working("t", "b", 50).unwrap_err();
    assert!(matches!(
        e,
        Error::MemoryLimit {
            bytes: 50,
            in_use: 60,
            limit: 100,
            ..
        }
    ));
    assert_eq!(r.bytes(), 60);
    drop(r);
    assert_eq!(b.usage(), (0, Some(100)));
    let _r = b.reserve("t", "b", 100).unwrap();
    b.set_limit(None);
    let _big = b.reserve("t", "c", u64::MAX / 2).unwrap();
}

#[test]
fn a_waiter_is_admitted_when_another_reservation_drops() {
    let b = waiting(100, Duration::from_secs(60));
    let first = b.reserve_working("t", "a", 70).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let b = Arc::clone(&b);
        thread::spawn(move || {
            let r = b.reserve_working("t", "b", 50);
            tx.send(()).unwrap();
            r.map(|r| r.bytes())
        })
    };
    until_waiting(&b, 1);
    assert!(
        rx.try_recv().is_err(),
        "admitted before memory was given back"
    );
    drop(first);
    assert_eq!(waiter.join().unwrap(), Ok(50));
    assert_eq!(b.usage(), (0, Some(100)));
    assert!(!b.has_waiters());
}

#[test]
fn a_charge_that_can_never_fit_fails_at_once() {
    let b = waiting(100, Duration::from_secs(60));
    let t0 = Instant::now();
    // Over the limit itself.
    let e = b.reserve_working("t", "a", 101).unwrap_err();
    assert!(matches!(e, Error::MemoryLimit { bytes: 101, .. }), "{e}");
    // Within the limit, but not beside a resident set, which a call cannot
    // wait out; even while a call's working memory is held too.
    let set = b.reserve("t", "set", 60).unwrap();
    let work = b.reserve_working("t", "w", 30).unwrap();
    let e = b.reserve_working("t", "b", 41).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MemoryLimit {
                bytes: 41,
                in_use: 90,
                ..
            }
        ),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop((set, work));
    assert_eq!(b.usage().0, 0);
}

#[test]
fn a_waiter_gives_up_at_its_deadline() {
    let b = waiting(100, Duration::from_millis(200));
    // Working memory held by another thread (this thread's own would let
    // its next charge go first, and a lone holder fails at once).
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let holder = {
        let b = Arc::clone(&b);
        thread::spawn(move || {
            let r = b.reserve_working("t", "a", 80).unwrap();
            ready_tx.send(()).unwrap();
            hold_rx.recv().unwrap();
            drop(r);
        })
    };
    ready_rx.recv().unwrap();
    let t0 = Instant::now();
    let e = b.reserve_working("t", "b", 50).unwrap_err();
    let waited = t0.elapsed();
    assert!(
        matches!(
            e,
            Error::MemoryLimit {
                bytes: 50,
                in_use: 80,
                limit: 100,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    hold_tx.send(()).unwrap();
    holder.join().unwrap();
    // The queue is empty again: the next charge goes at once.
    assert!(b.reserve_working("t", "c", 100).is_ok());
}

#[test]
fn cancellation_ends_the_wait() {
    let b = waiting(100, Duration::from_secs(600));
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let holder = {
        let b = Arc::clone(&b);
        thread::spawn(move || {
            let r = b.reserve_working("t", "a", 80).unwrap();
            ready_tx.send(()).unwrap();
            hold_rx.recv().unwrap();
            drop(r);
        })
    };
    ready_rx.recv().unwrap();
    let token = CancelToken::new();
    let canceller = {
        let (b, token) = (Arc::clone(&b), token.clone());
        thread::spawn(move || {
            until_waiting(&b, 1);
            token.cancel();
        })
    };
    let t0 = Instant::now();
    let e = token.run(|| b.reserve_working("op", "b", 50)).unwrap_err();
    assert_eq!(
        e,
        Error::Cancelled {
            op: "op",
            reason: "cancelled"
        }
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    canceller.join().unwrap();
    // A deadline on the token ends the wait the same way.
    let token = CancelToken::with_timeout(Duration::from_millis(100));
    let e = token.run(|| b.reserve_working("op", "b", 50)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Cancelled {
                reason: "deadline passed",
                ..
            }
        ),
        "{e}"
    );
    hold_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(b.usage().0, 0);
    assert!(!b.has_waiters());
}

#[test]
fn a_large_waiter_is_not_passed_by_later_small_ones() {
    let b = waiting(100, Duration::from_secs(60));
    let small = b.reserve_working("t", "small", 30).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let spawn = |name: &'static str, bytes: u64| {
        let (b, order) = (Arc::clone(&b), Arc::clone(&order));
        thread::spawn(move || {
            let r = b.reserve_working("t", name, bytes).unwrap();
            order.lock().unwrap().push(name);
            drop(r);
        })
    };
    let large = spawn("large", 90);
    until_waiting(&b, 1);
    // 11 bytes would fit beside the 30 held, but the large one came first
    // (and they do not fit beside the large one's 90, so the order of the
    // two grants is the order they are recorded in).
    let later = spawn("later", 11);
    until_waiting(&b, 2);
    assert!(order.lock().unwrap().is_empty());
    drop(small);
    large.join().unwrap();
    later.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["large", "later"]);
}

#[test]
fn holders_go_first_and_a_deadlock_between_them_is_broken() {
    // Two calls each hold 40 of 100 bytes and each want 40 more: waiting
    // would never end, so the second to ask fails at once and the first
    // goes on once the second gave its memory back.
    let b = waiting(100, Duration::from_secs(60));
    let first_holds = Arc::new(std::sync::Barrier::new(2));
    let call = |name: &'static str, go_second: bool| {
        let (b, barrier) = (Arc::clone(&b), Arc::clone(&first_holds));
        thread::spawn(move || {
            let held = b.reserve_working("t", name, 40).unwrap();
            barrier.wait();
            if go_second {
                until_waiting(&b, 1);
            }
            let more = b.reserve_working("t", name, 40);
            drop(held);
            more.map(|r| r.bytes())
        })
    };
    let a = call("a", false);
    let c = call("c", true);
    let (a, c) = (a.join().unwrap(), c.join().unwrap());
    assert_eq!(a, Ok(40), "the first to wait goes on");
    assert!(matches!(c, Err(Error::MemoryLimit { .. })), "{c:?}");
    // A lone holder that does not fit fails at once too: nobody else can
    // give memory back.
    let b = waiting(100, Duration::from_secs(60));
    let held = b.reserve_working("t", "a", 60).unwrap();
    let t0 = Instant::now();
    assert!(b.reserve_working("t", "a", 60).is_err());
    assert!(t0.elapsed() < Duration::from_secs(5));
    drop(held);
    assert_eq!(b.usage().0, 0);
}

#[test]
fn a_thread_holding_memory_goes_before_the_queue() {
    let b = waiting(100, Duration::from_secs(60));
    let mine = b.reserve_working("t", "a", 40).unwrap();
    let other = {
        let b = Arc::clone(&b);
        thread::spawn(move || b.reserve_working("t", "q", 70).map(|r| r.bytes()))
    };
    until_waiting(&b, 1);
    // The queued charge waits for this thread's memory; this thread's next
    // charge fits and goes first rather than waiting behind it.
    let more = b.reserve_working("t", "a", 20).unwrap();
    drop((mine, more));
    assert_eq!(other.join().unwrap(), Ok(70));
}

#[test]
fn holds_follow_the_thread_that_made_them() {
    let b = Arc::new(MemoryBudget::new(None));
    assert!(!hold::held_here(b.id));
    let h = b.hold();
    assert!(hold::held_here(b.id));
    assert_eq!(b.lock().holders, 1);
    // Dropped elsewhere, it still lowers this thread's count.
    thread::spawn(move || drop(h)).join().unwrap();
    assert!(!hold::held_here(b.id));
    assert_eq!(b.lock().holders, 0);
}
