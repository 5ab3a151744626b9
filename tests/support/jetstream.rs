//! A stream and a durable pull consumer of it, as the NATS tests, the adversarial
//! suite and the bench make them. Pulled in with `#[path]`.

use async_nats::jetstream::{self, consumer, stream};

/// A stream `name` on the subjects `<name>.>` with `storage`, and a durable pull
/// consumer `durable` of it with explicit acks (the server's other defaults).
///
/// # Errors
///
/// The server's, when either cannot be made.
pub async fn stream_and_consumer(
    js: &jetstream::Context,
    name: &str,
    storage: stream::StorageType,
    durable: &str,
) -> Result<consumer::PullConsumer, async_nats::Error> {
    let stream = js
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![format!("{name}.>")],
            storage,
            ..Default::default()
        })
        .await?;
    Ok(stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(durable.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?)
}
