use super::*;
use std::io::Write;

/// Everything `stream` gives of `content`, with `opts`, not following; and the bytes it read.
async fn read_all(content: &[u8], opts: LogOptions) -> (String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, content).unwrap();
    let (_running, watch) = watch::channel(false);
    let (tx, mut rx) = mpsc::channel(16);
    let task = tokio::spawn(async move { run(&path, &opts, watch, tx).await });
    let mut got = Vec::new();
    while let Some(chunk) = rx.recv().await {
        got.extend(chunk);
    }
    let read = task.await.unwrap().unwrap();
    (String::from_utf8(got).unwrap(), read)
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Receives until `want` has been given (or 5 s have passed).
async fn until(rx: &mut mpsc::Receiver<Vec<u8>>, got: &mut String, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !got.contains(want) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(chunk)) => got.push_str(&String::from_utf8(chunk).unwrap()),
            _ => panic!("never got {want:?}; got {got:?}"),
        }
    }
}

/// A follow of `0.log` (written with `content` first) in a directory of its own, with `opts` and `follow`
/// set, while the container runs (`running` to stop it); `got` collects what it gave.
struct Following {
    dir: tempfile::TempDir,
    path: PathBuf,
    running: watch::Sender<bool>,
    rx: mpsc::Receiver<Vec<u8>>,
    task: tokio::task::JoinHandle<Result<u64, Error>>,
    got: String,
}

fn following(content: &str, opts: LogOptions) -> Following {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, content).unwrap();
    let (running, watch) = watch::channel(true);
    let (tx, rx) = mpsc::channel(16);
    let opts = LogOptions { follow: true, ..opts };
    let p = path.clone();
    let task = tokio::spawn(async move { run(&p, &opts, watch, tx).await });
    Following {
        dir,
        path,
        running,
        rx,
        task,
        got: String::new(),
    }
}

impl Following {
    /// Receives until `want` has been given.
    async fn until(&mut self, want: &str) {
        until(&mut self.rx, &mut self.got, want).await;
    }
}

#[test]
fn the_file_of_an_attempt() {
    assert_eq!(
        file(Path::new("/var/log/pods/ns_p_uid"), "app", 2),
        Path::new("/var/log/pods/ns_p_uid/app/2.log")
    );
}

#[tokio::test]
async fn partial_records_join_per_stream_and_streams_interleave() {
    let log = "2026-01-01T00:00:00.1Z stdout P hel\n\
               2026-01-01T00:00:00.2Z stderr F oops\n\
               2026-01-01T00:00:00.3Z stdout P lo \n\
               2026-01-01T00:00:00.4Z stdout F world\n\
               not a record\n\
               2026-01-01T00:00:00.5Z stdout F \n\
               2026-01-01T00:00:00.6Z stderr P $ ";
    let (got, _) = read_all(log.as_bytes(), LogOptions::default()).await;
    assert_eq!(got, "oops\nhello world\nnot a record\n\n$ \n");
}

#[tokio::test]
async fn timestamps_are_the_first_parts_as_written() {
    let log = "2026-01-01T00:00:00.1Z stdout P a\n\
               2026-01-01T00:00:00.2Z stderr F e\n\
               2026-01-01T00:00:00.3Z stdout F b\n\
               plain\n";
    let opts = LogOptions {
        timestamps: true,
        ..LogOptions::default()
    };
    let (got, _) = read_all(log.as_bytes(), opts).await;
    assert_eq!(
        got,
        "2026-01-01T00:00:00.2Z e\n2026-01-01T00:00:00.1Z ab\nplain\n"
    );
}

#[tokio::test]
async fn since_leaves_out_earlier_lines() {
    let log = "2026-01-01T00:00:01Z stdout F one\n\
               2026-01-01T00:00:02Z stdout F two\n\
               plain\n\
               2026-01-01T01:00:01+01:00 stdout F three, at 00:00:01Z\n";
    let opts = LogOptions {
        since: parse_time(b"2026-01-01T00:00:02Z"),
        ..LogOptions::default()
    };
    assert_eq!(read_all(log.as_bytes(), opts).await.0, "two\nplain\n");
}

#[tokio::test]
async fn the_tail_of_a_10_mb_log_reads_only_its_end() {
    let mut log = Vec::with_capacity(11 << 20);
    let mut i = 0;
    while log.len() < 10 << 20 {
        writeln!(
            log,
            "2026-01-01T00:00:00.{i}Z stdout F line {i} {}",
            "x".repeat(80)
        )
        .unwrap();
        i += 1;
    }
    // The last line is in three parts, one of them on the other stream's side.
    log.extend_from_slice(b"t stdout P last \nt stderr F err\nt stdout F part\n");
    let opts = LogOptions {
        tail_lines: Some(3),
        ..LogOptions::default()
    };
    let (got, read) = read_all(&log, opts).await;
    assert_eq!(
        got,
        format!("line {} {}\nerr\nlast part\n", i - 1, "x".repeat(80))
    );
    assert!(read < 200 * 1024, "read {read} bytes of {}", log.len());
    // --tail bigger than the log: all of it, read once (and the search's reads).
    let small = b"t stdout F a\nt stdout F b\n";
    let opts = LogOptions {
        tail_lines: Some(10),
        ..LogOptions::default()
    };
    assert_eq!(read_all(small, opts).await.0, "a\nb\n");
    let opts = LogOptions {
        tail_lines: Some(0),
        ..LogOptions::default()
    };
    assert_eq!(read_all(small, opts).await, (String::new(), 0));
}

#[tokio::test]
async fn follow_gives_appended_lines_and_ends_when_the_container_stops() {
    let opts = LogOptions {
        tail_lines: Some(1),
        ..LogOptions::default()
    };
    let mut f = following("t stdout F before\nt stdout F b2\n", opts);
    f.until("b2\n").await;
    append(&f.path, "t stdout P one \nt stderr F err\n");
    f.until("err\n").await;
    append(&f.path, "t stdout F two\n");
    f.until("one two\n").await;
    // Written just before the container stopped: still given, and the unfinished line too.
    append(&f.path, "t stdout F last\nt stdout P prompt$ ");
    f.running.send(false).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), f.task).await;
    done.expect("stream did not end").unwrap().unwrap();
    while let Some(chunk) = f.rx.recv().await {
        f.got.push_str(&String::from_utf8(chunk).unwrap());
    }
    assert_eq!(f.got, "b2\nerr\none two\nlast\nprompt$ \n");
}

#[tokio::test]
async fn follow_ends_when_the_client_goes_away() {
    let mut f = following("t stdout F a\n", LogOptions::default());
    f.until("a\n").await;
    drop(f.rx);
    let done = tokio::time::timeout(Duration::from_secs(2), f.task).await;
    assert!(done.expect("stream did not end").unwrap().is_ok());
}

#[tokio::test]
async fn follow_goes_on_in_the_file_a_rotation_leaves() {
    let mut f = following("t stdout F old\n", LogOptions::default());
    f.until("old\n").await;
    // kubelet renames the file; the runtime writes on to the old one until it reopens the path.
    let rotated = f.dir.path().join("0.log.20260101-000000");
    std::fs::rename(&f.path, &rotated).unwrap();
    append(&rotated, "t stdout P split \n");
    tokio::time::sleep(POLL * 2).await;
    std::fs::write(&f.path, "t stdout F across\nt stdout F new\n").unwrap();
    f.until("new\n").await;
    // Cut shorter in place: read again from the start.
    std::fs::write(&f.path, "t stdout F cut\n").unwrap();
    f.until("cut\n").await;
    f.running.send(false).unwrap();
    f.task.await.unwrap().unwrap();
    assert_eq!(f.got, "old\nsplit across\nnew\ncut\n");
}

#[tokio::test]
async fn a_missing_log_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), "app", 1);
    let (_running, watch) = watch::channel(false);
    let (tx, _rx) = mpsc::channel(1);
    let e = stream(&path, &LogOptions::default(), watch, tx)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("opening log {}: ", path.display())),
        "{e}"
    );
    assert!(matches!(e, Error::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound));
}
