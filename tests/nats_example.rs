//! `examples/durable_ingest.rs`, run and checked against a local `nats-server`
//! (installed on first use, like the NATS tests'): its own `check` holds the
//! story's promises.

#[path = "../examples/durable_ingest.rs"]
mod durable_ingest;

#[test]
fn the_durable_ingest_example_runs_and_keeps_its_promises() {
    durable_ingest::main();
}
