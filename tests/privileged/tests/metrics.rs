//! criusd's metrics end to end: its Prometheus endpoint (`--metrics-address`) after a pull from a local
//! registry and a pod with a busy container (the CRI call counters, the pods, containers and shims gauges, the
//! pull figures, the process figures), and the CRI's ListMetricDescriptors, ListPodSandboxMetrics and
//! StreamPodSandboxMetrics for that pod; then a pod on a CNI network of its own, whose eth0 counters are in its
//! metrics; and ImageFsInfo's container filesystem where `[storage] container_root` puts writable layers.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_privileged_tests::cri::{
    Pod, client, config, container, create, cremove, cstop, host_network, import_busybox, remove, run, start,
    stop, wait_state,
};
use crius_test_support::daemon::Daemon;
use crius_test_support::registry::Registry;
use crius_test_support::require_root;
use tonic::Code;

/// `GET path` of the endpoint at `address`: the status line, the headers and the body.
fn get(address: &str, path: &str) -> (String, String, String) {
    let mut s = std::net::TcpStream::connect(address).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_lowercase(), body.to_string())
}

/// The value of the sample `series` (name and labels exactly as written) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

fn call(method: &str, code: &str) -> String {
    format!(
        "crius_grpc_requests_total{{service=\"runtime.v1.RuntimeService\",method=\"{method}\",code=\"{code}\"}}"
    )
}

/// The value of metric `name` among `metrics`, with its labels.
fn metric<'a>(metrics: &'a [cri::Metric], name: &str) -> &'a cri::Metric {
    metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name} in {metrics:?}"))
}

fn value(m: &cri::Metric) -> u64 {
    m.value.as_ref().unwrap().value
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn the_endpoint_and_the_cri_metrics_show_a_pod_and_its_busy_container() {
    require_root();
    let reg = Registry::start();
    reg.push(
        crius_test_support::image::busybox_layout(),
        "busybox:latest",
        "library/busybox:latest",
    );
    let address = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let d = Daemon::start(&["--metrics-address", &address]);
    let image = format!("{}/library/busybox:latest", reg.host);
    let mut images = ImageServiceClient::new(
        crius_api::connect(&d.socket().display().to_string())
            .await
            .unwrap(),
    );
    images
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();

    let mut c = client(&d).await;
    let mut conf = host_network(config("metrics", "uid-metrics"));
    conf.log_directory = d.dir().join("logs").display().to_string();
    let pod = run(&mut c, conf).await.unwrap();
    // Busy: a second of cpu comes quickly (the CRI's cpu figure is whole seconds).
    let busy = create(&mut c, &pod, container("busy", &image, "while :; do :; done"))
        .await
        .unwrap();
    start(&mut c, &busy).await;
    wait_state(&mut c, &busy, cri::ContainerState::ContainerRunning).await;
    let e = c
        .container_status(cri::ContainerStatusRequest {
            container_id: "f".repeat(64),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // The CRI's metrics: every metric described, with as many label values as its descriptor has keys.
    let descriptors = c
        .list_metric_descriptors(cri::ListMetricDescriptorsRequest {})
        .await
        .unwrap()
        .into_inner()
        .descriptors;
    let keys = |name: &str| {
        descriptors
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} is not described: {descriptors:?}"))
            .label_keys
            .len()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let ours = loop {
        let all = c
            .list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_metrics;
        let ours = all
            .into_iter()
            .find(|p| p.pod_sandbox_id == pod)
            .expect("our pod");
        assert_eq!(ours.container_metrics.len(), 1, "{ours:?}");
        let cpu = value(metric(
            &ours.container_metrics[0].metrics,
            "container_cpu_usage_seconds_total",
        ));
        if cpu >= 1 {
            break ours;
        }
        assert!(Instant::now() < deadline, "no second of cpu in 30 s: {ours:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let cm = &ours.container_metrics[0];
    assert_eq!(cm.container_id, busy);
    for m in &cm.metrics {
        assert_eq!(m.label_values.len(), keys(&m.name), "{m:?}");
        assert!(m.timestamp > 0, "{m:?}");
    }
    let cpu = metric(&cm.metrics, "container_cpu_usage_seconds_total");
    assert_eq!(cpu.label_values, [busy.as_str(), "busy", image.as_str(), "total"]);
    assert_eq!(cpu.metric_type, cri::MetricType::Counter as i32);
    assert!(value(metric(&cm.metrics, "container_processes")) >= 1);
    assert!(value(metric(&cm.metrics, "container_start_time_seconds")) > 1_600_000_000);
    // Memory is charged on cgroup v2 only: on a hybrid host (memory on v1) the figures are there but 0.
    let working_set = value(metric(&cm.metrics, "container_memory_working_set_bytes"));
    let usage = value(metric(&cm.metrics, "container_memory_usage_bytes"));
    let v2_memory = std::fs::read_to_string(crius_test_support::cgroup2_mount().join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == "memory");
    if v2_memory {
        assert!(working_set > 0 && usage >= working_set, "{cm:?}");
    }
    // A pod on the host's network has no counters of its own.
    assert!(ours.metrics.is_empty(), "{:?}", ours.metrics);
    let mut stream = c
        .stream_pod_sandbox_metrics(cri::StreamPodSandboxMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        streamed.push(chunk);
    }
    assert_eq!(streamed.len(), 1, "one chunk");
    assert!(
        streamed[0]
            .pod_sandbox_metrics
            .iter()
            .any(|p| p.pod_sandbox_id == pod)
    );

    // The endpoint.
    let (status, headers, text) = get(&address, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    assert_eq!(sample(&text, &call("RunPodSandbox", "OK")), 1.0);
    assert_eq!(sample(&text, &call("CreateContainer", "OK")), 1.0);
    assert_eq!(sample(&text, &call("StartContainer", "OK")), 1.0);
    assert_eq!(sample(&text, &call("ContainerStatus", "NotFound")), 1.0);
    assert!(sample(&text, &call("ListPodSandboxMetrics", "OK")) >= 1.0);
    let run_count = "crius_grpc_request_duration_seconds_count{service=\"runtime.v1.RuntimeService\",\
                     method=\"RunPodSandbox\",code=\"OK\"}";
    assert_eq!(sample(&text, run_count), 1.0);
    assert_eq!(sample(&text, "crius_pods{state=\"ready\"}"), 1.0);
    assert_eq!(sample(&text, "crius_pods{state=\"notready\"}"), 0.0);
    assert_eq!(sample(&text, "crius_containers{state=\"running\"}"), 1.0);
    assert_eq!(sample(&text, "crius_containers{state=\"created\"}"), 0.0);
    assert_eq!(sample(&text, "crius_shims{state=\"connected\"}"), 1.0);
    assert_eq!(sample(&text, "crius_shims{state=\"lost\"}"), 0.0);
    assert_eq!(sample(&text, "crius_image_pulls_total{outcome=\"success\"}"), 1.0);
    assert!(
        sample(&text, "crius_image_pull_bytes_total") > 100_000.0,
        "{text}"
    );
    assert_eq!(sample(&text, "crius_image_pull_duration_seconds_count"), 1.0);
    assert!(sample(&text, "process_resident_memory_bytes") > 1_000_000.0);
    assert!(sample(&text, "process_open_fds") >= 5.0);
    assert!(sample(&text, "process_threads") >= 2.0);
    assert!(sample(&text, "process_cpu_seconds_total") > 0.0);
    let started = sample(&text, "process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "started {started}, now {now}"
    );
    assert!(get(&address, "/").0.contains(" 404 "));

    // Gone with the pod.
    cstop(&mut c, &busy, 0).await;
    cremove(&mut c, &busy).await;
    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
    let (_, _, text) = get(&address, "/metrics");
    assert_eq!(sample(&text, "crius_pods{state=\"ready\"}"), 0.0);
    assert_eq!(sample(&text, "crius_containers{state=\"running\"}"), 0.0);
    assert!(
        c.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_metrics
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_pods_own_network_is_in_its_metrics_by_interface() {
    require_root();
    let mut p = Pod::on_network("metricsnet").await;
    let id = p.started(container("idle", "busybox", "sleep 3600")).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    // Traffic on the pod's eth0: a ping of the bridge.
    p.ping_gateway(&id).await;
    let all =
        p.c.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_metrics;
    let pod = all.iter().find(|m| m.pod_sandbox_id == p.id).expect("our pod");
    for name in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
    ] {
        let m = pod
            .metrics
            .iter()
            .find(|m| m.name == name && m.label_values.last().map(String::as_str) == Some("eth0"))
            .unwrap_or_else(|| panic!("no {name} for eth0 in {:?}", pod.metrics));
        assert_eq!(m.label_values, [p.id.as_str(), "metricsnet", "", "eth0"]);
        assert_eq!(m.metric_type, cri::MetricType::Counter as i32);
        assert!(value(m) > 0, "{m:?}");
    }
    assert!(
        pod.metrics
            .iter()
            .all(|m| m.label_values.last().map(String::as_str) != Some("lo")),
        "loopback is left out: {:?}",
        pod.metrics
    );
    assert_eq!(pod.container_metrics.len(), 1);
    assert_eq!(pod.container_metrics[0].container_id, id);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn writable_layers_live_under_the_container_root_and_image_fs_info_reports_it() {
    require_root();
    let mut d = Daemon::start(&[]);
    d.stop();
    let containers = d.dir().join("fast");
    std::fs::write(
        d.config_path(),
        format!("[storage]\ncontainer_root = \"{}\"\n", containers.display()),
    )
    .unwrap();
    d.start_again(&[]);
    import_busybox(&d);
    let mut images = ImageServiceClient::new(
        crius_api::connect(&d.socket().display().to_string())
            .await
            .unwrap(),
    );
    let mut fs_info = async || {
        let r = images
            .image_fs_info(cri::ImageFsInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.image_filesystems.len(), 1, "{r:?}");
        assert_eq!(r.container_filesystems.len(), 1, "{r:?}");
        let mountpoint = |f: &cri::FilesystemUsage| f.fs_id.as_ref().unwrap().mountpoint.clone();
        assert_eq!(
            mountpoint(&r.image_filesystems[0]),
            d.root().join("images").display().to_string()
        );
        let fs = r.container_filesystems[0].clone();
        assert_eq!(
            mountpoint(&fs),
            containers.join("snapshots").display().to_string()
        );
        fs.used_bytes.unwrap().value
    };
    let before = fs_info().await;

    let mut c = client(&d).await;
    let mut conf = host_network(config("split", "uid-split"));
    conf.log_directory = d.dir().join("logs").display().to_string();
    let pod = run(&mut c, conf).await.unwrap();
    let write = "head -c 1048576 /dev/zero > /written && echo written && sleep 1000";
    let id = create(&mut c, &pod, container("writer", "busybox", write))
        .await
        .unwrap();
    start(&mut c, &id).await;
    wait_state(&mut c, &id, cri::ContainerState::ContainerRunning).await;
    let upper = containers.join("snapshots").join(&id).join("upper");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !upper.join("written").metadata().is_ok_and(|m| m.len() == 1 << 20) {
        assert!(
            Instant::now() < deadline,
            "no 1 MiB /written in {}",
            upper.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!d.root().join("images/snapshots").join(&id).exists());
    let after = fs_info().await;
    assert!(after >= before + (1 << 20), "container fs {before} then {after}");

    cstop(&mut c, &id, 0).await;
    cremove(&mut c, &id).await;
    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
    assert!(
        !containers.join("snapshots").join(&id).exists(),
        "the snapshot is removed with its container"
    );
}
