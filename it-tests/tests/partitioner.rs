//! The client's partitioner agrees with Kafka's keyed partitioning: librdkafka's
//! `murmur2_random` (the Java client's default for keyed records), on the real broker.

use std::time::Duration;

use it_tests::engine::TestEnv;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use scheduler_client::partition_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_murmur2_keyed_producer_picks_the_same_partition_as_the_client() {
    let env = TestEnv::new("it_partitioner", 12).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.stack.kafka_bootstrap)
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer");
    let mut partitions_seen = std::collections::BTreeSet::new();
    for i in 0..200 {
        let key = format!("customer-{i}-ü");
        let delivery = producer
            .send(
                FutureRecord::to(&env.topic).key(&key).payload("x"),
                Timeout::After(Duration::from_secs(10)),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce {key}: {e}"));
        assert_eq!(
            delivery.partition,
            partition_for(&key, env.partitions),
            "key {key}"
        );
        partitions_seen.insert(delivery.partition);
    }
    assert_eq!(
        partitions_seen.len(),
        12,
        "200 keys spread over every partition"
    );
}
