//! Which Kafka partition a task goes to: Kafka's default partitioner for keyed records, so that
//! a Java producer, or librdkafka's `murmur2_random`, keyed by `orderingId`, picks the same one.

/// The partition of `ordering_id` among `partition_count` partitions:
/// `(murmur2(ordering_id bytes) & 0x7fffffff) % partition_count`.
///
/// # Panics
/// Never: a `partition_count` of zero is treated as one.
pub fn partition_for(ordering_id: &str, partition_count: u32) -> i32 {
    let positive = murmur2(ordering_id.as_bytes()) & 0x7fff_ffff;
    (positive % partition_count.max(1)) as i32
}

/// Kafka's 32-bit murmur2 hash (seed `0x9747b28c`), as `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's own `UtilsTest.testMurmur2`.
    #[test]
    fn matches_kafkas_murmur2_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, expected) in cases {
            assert_eq!(
                murmur2(data) as i32,
                expected,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn partition_is_in_range_and_stable() {
        for id in ["", "a", "customer-42", "ünïcödé"] {
            let p = partition_for(id, 12);
            assert!((0..12).contains(&p));
            assert_eq!(p, partition_for(id, 12));
        }
        assert_eq!(partition_for("anything", 0), 0);
    }
}
