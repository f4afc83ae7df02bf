//! Drops the keyspaces earlier test runs left in the dev stack's Cassandra: those named as
//! [`it_tests::unique_name`] names them (`<prefix>_<pid>_<digits>`) whose process is gone. Tests
//! drop theirs as they end ([`it_tests::teardown`]), but a test killed, a teardown that failed or
//! a benchmark run leaves some, and Cassandra 2.1 slows with every live table (each schema change
//! recomputes a digest over them all) until its 1 GB heap runs out. `dev/test` runs it first; a
//! running test's keyspace (its process alive) is kept.

use std::process::ExitCode;

use it_tests::Stack;

/// Whether `name` is a test keyspace of a process that is no longer running, or a queue's
/// keyspace of one (`<that name>_<queue>`).
fn stale(name: &str, alive: impl Fn(u32) -> bool + Copy) -> bool {
    test_keyspace(name, alive)
        || name
            .rsplit_once('_')
            .is_some_and(|(base, _queue)| test_keyspace(base, alive))
}

fn test_keyspace(name: &str, alive: impl Fn(u32) -> bool) -> bool {
    let mut parts = name.rsplitn(3, '_');
    let (Some(stamp), Some(pid), Some(prefix)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    // `unique_name`'s stamp: nanoseconds modulo 10^12, so some digits at least.
    let digits = |s: &str| s.len() >= 6 && s.bytes().all(|b| b.is_ascii_digit());
    match pid.parse::<u32>() {
        Ok(pid) => !prefix.is_empty() && digits(stamp) && !alive(pid),
        Err(_) => false,
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let session = match Stack::from_env().cassandra_session().await {
        Ok(session) => session,
        Err(e) => {
            eprintln!("drop-stale-keyspaces: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names = match it_tests::teardown::list_keyspaces(&session).await {
        Ok(names) => names,
        Err(e) => {
            eprintln!("drop-stale-keyspaces: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stale: Vec<String> = names.into_iter().filter(|n| stale(n, alive)).collect();
    for name in &stale {
        if let Err(e) = session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {name}"), &[])
            .await
        {
            eprintln!("drop-stale-keyspaces: {name}: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!(
        "drop-stale-keyspaces: {} left by earlier test runs dropped",
        stale.len()
    );
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::stale;

    #[test]
    fn only_test_keyspaces_of_gone_processes_are_stale() {
        let gone = |_| false;
        assert!(stale("it_dashboard_860_200426650918", gone));
        assert!(
            stale("groups_200_4242_123456", gone),
            "a prefix with an underscore"
        );
        assert!(
            !stale("it_dashboard_860_200426650918", |pid| pid == 860),
            "running"
        );
        for kept in [
            "scheduler",
            "scheduler_meta",
            "system_auth",
            "my_app_v2",
            "orders_2024_1",
            "a_b_c",
        ] {
            assert!(!stale(kept, gone), "{kept}");
        }
    }
}
