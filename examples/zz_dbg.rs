//! scratch
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::prelude::*;
use weir::runtime::VirtualTime;

struct Sub {
    sub: Option<Subscription>,
    log: Arc<Mutex<Vec<String>>>,
}
impl Subscriber<u64> for Sub {
    fn on_subscribe(&mut self, s: Subscription) {
        s.request(1);
        self.sub = Some(s);
    }
    fn on_next(&mut self, x: u64) {
        self.log.lock().unwrap().push(format!("next {x}"));
        self.sub.as_ref().unwrap().request(1);
    }
    fn on_error(&mut self, e: weir::Error) {
        self.log.lock().unwrap().push(format!("error {e}"));
    }
    fn on_complete(&mut self) {
        self.log.lock().unwrap().push("complete".into());
    }
}
fn main() {
    let vt = VirtualTime::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    weir::range(0..10u64)
        .timeout_on(Duration::from_secs(10), vt.clone())
        .subscribe(Sub {
            sub: None,
            log: log.clone(),
        });
    println!("{:?}", log.lock().unwrap());
    vt.advance(Duration::from_secs(11));
    println!("{:?}", log.lock().unwrap());
}
