//! The overload picture: the image service of the overload stories (600 jobs/s
//! arrive, the service has fallen to 350/s, 10,000 slots, marks at 70 % and 90 %) run
//! for 120 s of virtual time under five queue policies (an unbounded queue,
//! backpressure with water marks, `DropOldest`, `max_age`, the admission ladder),
//! drawn as one SVG: the queue depth over time above, the oldest job's age below.
//! The runs are deterministic (`VirtualTime`, ticks of 10 ms); `tests/overload_picture.rs`
//! includes the same simulation and drawing code and asserts its figures.
//!
//! Regenerate the committed image (the first argument is the output path, default
//! `docs/overload_picture.svg`):
//!
//! ```text
//! cargo run --release --example overload_picture
//! ```

#[path = "overload_stories/consumer.rs"]
mod consumer;
#[path = "overload_picture/draw.rs"]
mod draw;
#[path = "overload_picture/simulation.rs"]
mod simulation;

use std::error::Error;
use std::path::PathBuf;

use simulation::{run, Policy, Series};

/// The instants of the printed table, in seconds.
const INSTANTS: [f64; 4] = [10.0, 30.0, 60.0, 120.0];

fn main() -> Result<(), Box<dyn Error>> {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "docs/overload_picture.svg".to_owned()),
    );
    let series: Vec<Series> = Policy::ALL.into_iter().map(run).collect();
    print_table(&series);
    println!();
    for policy in Policy::ALL {
        println!("{:<40} {}", policy.label(), turned_away_as(policy));
    }
    draw::draw(&series, &path)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// What "turned away" means for each policy.
fn turned_away_as(policy: Policy) -> &'static str {
    match policy {
        Policy::Unbounded => "turns nothing away: every job waits",
        Policy::Backpressure => "turned away = held back by the callers while paused",
        Policy::DropOldest => "turned away = dropped from the head when full",
        Policy::MaxAge => "turned away = expired after waiting more than 5 s",
        Policy::Ladder => "turned away = standard jobs shed at the door",
    }
}

fn print_table(series: &[Series]) {
    println!("Image service: 600 jobs/s arrive, 350/s served, 10,000 slots, 120 s of virtual time");
    println!("depth (jobs) / oldest job's age (s) at each instant; jobs turned away by 120 s\n");
    print!("{:<40}", "policy");
    for t in INSTANTS {
        print!(" {:>16}", format!("{t:.0} s"));
    }
    println!(" {:>12}", "turned away");
    for s in series {
        print!("{:<40}", s.policy);
        for t in INSTANTS {
            let p = s.at(t);
            print!(" {:>16}", format!("{} / {:.2}", p.depth, p.oldest_age_secs));
        }
        println!(" {:>12}", s.turned_away);
    }
    if let Some(s) = series.first() {
        println!(
            "\nevery run: {} jobs arrived, {} served (the service never idles)",
            s.arrived, s.served
        );
    }
}
