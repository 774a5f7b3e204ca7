//! Test harness: locate the binaries, write configs, start the gateway, connect clients.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The fake MCP server, built by cargo for this test binary.
pub fn fake() -> &'static str {
    env!("CARGO_BIN_EXE_wardgate-fake")
}

/// The `wardgate` binary, built fresh once per test run.
pub fn wardgate() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target_dir = Path::new(fake()).parent().expect("bin dir").to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--quiet", "-p", "wardgate", "--bin", "wardgate"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build for the wardgate binary");
        assert!(status.success(), "cargo build -p wardgate failed");
        target_dir.join("wardgate")
    })
}

/// A temporary directory holding a config file.
pub struct ConfigFile {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn config(toml: &str) -> ConfigFile {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("wardgate.toml");
    std::fs::write(&path, toml).expect("write config");
    ConfigFile { dir, path }
}

/// `[servers.NAME]` for a stdio fake with extra flags.
pub fn stdio_server(name: &str, flags: &[&str]) -> String {
    let mut args = vec!["--name".to_owned(), name.to_owned()];
    args.extend(flags.iter().map(|flag| flag.to_string()));
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = {:?}\n\n",
        fake(),
        args
    )
}

/// `[servers.NAME]` for an HTTP fake already listening at `url`.
pub fn http_server(name: &str, url: &str, transport: &str) -> String {
    format!("[servers.{name}]\nurl = {url:?}\ntransport = {transport:?}\n\n")
}

/// A fake server running over HTTP (Streamable or SSE) as its own process.
pub struct FakeHttp {
    pub child: Child,
    pub base: String,
}

impl FakeHttp {
    pub async fn start(transport: &str, flags: &[&str]) -> FakeHttp {
        Self::start_on(transport, 0, flags).await
    }

    pub async fn start_on(transport: &str, port: u16, flags: &[&str]) -> FakeHttp {
        let mut child = Command::new(fake())
            .args(["--transport", transport, "--port", &port.to_string()])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fake http server");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("fake server did not report its address")
            .expect("read")
            .expect("a line");
        let base = line
            .strip_prefix("LISTENING ")
            .expect("LISTENING line")
            .trim()
            .to_owned();
        FakeHttp { child, base }
    }

    pub fn url(&self, transport: &str) -> String {
        match transport {
            "sse" => format!("{}/sse", self.base),
            _ => format!("{}/mcp", self.base),
        }
    }

    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }
}

/// What a test client has been told.
#[derive(Default, Debug)]
pub struct Heard {
    pub tools_changed: usize,
    pub prompts_changed: usize,
    pub resources_changed: usize,
    pub progress: Vec<(ProgressToken, f64)>,
    pub logs: Vec<serde_json::Value>,
    pub resource_updates: Vec<String>,
    pub sampling_requests: usize,
}

/// An MCP client that records notifications and answers sampling, elicitation and roots.
#[derive(Clone, Default)]
pub struct TestClient {
    pub heard: Arc<Mutex<Heard>>,
    /// Signs its sampling answers and names its root, so tests can tell clients apart.
    pub label: &'static str,
}

impl TestClient {
    pub fn heard<T>(&self, read: impl FnOnce(&Heard) -> T) -> T {
        read(&self.heard.lock().unwrap())
    }

    /// Wait until `check` holds, for at most `limit`.
    pub async fn until(&self, limit: Duration, check: impl Fn(&Heard) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.heard(&check) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.heard(&check)
    }
}

#[allow(deprecated)]
impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        capabilities.roots = Some(Default::default());
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(capabilities, Implementation::new("wardgate-it", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        self.heard.lock().unwrap().sampling_requests += 1;
        let asked = serde_json::to_string(&params.messages).unwrap_or_default();
        Ok(CreateMessageResult::new(
            SamplingMessage::new(
                Role::Assistant,
                format!("sampled reply to {} by client {}", asked.len(), self.label),
            ),
            "test-model".into(),
        ))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        Ok(ListRootsResult::new(vec![Root::new(format!(
            "file:///tmp/wardgate-test-root{}",
            self.label
        ))]))
    }

    async fn create_elicitation(
        &self,
        _params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = Some(serde_json::json!({ "answer": 42 }));
        Ok(result)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.heard.lock().unwrap().tools_changed += 1;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.heard.lock().unwrap().prompts_changed += 1;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.heard.lock().unwrap().resources_changed += 1;
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.heard
            .lock()
            .unwrap()
            .progress
            .push((params.progress_token, params.progress));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.heard.lock().unwrap().logs.push(serde_json::json!({
            "logger": params.logger, "data": params.data,
        }));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.heard.lock().unwrap().resource_updates.push(params.uri);
    }
}

pub type Client = RunningService<RoleClient, TestClient>;

/// A running gateway process and a client connected to it.
pub struct Running {
    pub process: Child,
    pub client: Client,
    pub handler: TestClient,
    /// Kept so the config's temporary directory lives as long as the gateway.
    #[allow(dead_code)]
    pub config: ConfigFile,
}

/// The gateway events of one kind the client heard (as `notifications/message` data).
pub fn events(running: &Running, kind: &str) -> Vec<serde_json::Value> {
    running.handler.heard(|heard| {
        heard
            .logs
            .iter()
            .filter(|log| log["data"]["event"] == kind)
            .map(|log| log["data"].clone())
            .collect()
    })
}

/// Wait until the client has heard a gateway event of this kind, for at most `limit`.
pub async fn until_event(running: &Running, kind: &str, limit: Duration) -> bool {
    running
        .handler
        .until(limit, |heard| {
            heard.logs.iter().any(|log| log["data"]["event"] == kind)
        })
        .await
}

/// Start `wardgate --config` over stdio and connect a client through its pipes.
pub async fn gateway_stdio(config: ConfigFile) -> Running {
    gateway_stdio_with_env(config, &[]).await
}

/// Removes the `OTEL_*` variables of the test's own environment from `command`: a
/// developer's or CI's collector must not turn a test's telemetry on (tests that want it
/// set their own, after this).
pub fn without_telemetry(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
}

/// `wardgate --config` in stdio mode, its stdin and stdout piped for a client of the
/// test's own making (stderr inherited: the test's output shows the gateway's log).
pub fn stdio_gateway_command(config: &ConfigFile) -> Command {
    let mut command = Command::new(wardgate());
    without_telemetry(&mut command)
        .arg("--config")
        .arg(&config.path)
        .args(["--log-level", "info,wardgate=debug"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command
}

/// [`gateway_stdio`] with these variables added to the gateway's environment.
pub async fn gateway_stdio_with_env(config: ConfigFile, env: &[(&str, &str)]) -> Running {
    let mut process = stdio_gateway_command(&config)
        .envs(env.iter().copied())
        .spawn()
        .expect("spawn wardgate");
    let stdout = process.stdout.take().unwrap();
    let stdin = process.stdin.take().unwrap();
    let handler = TestClient::default();
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        handler.clone().serve((stdout, stdin)),
    )
    .await
    .expect("gateway answered initialize in time")
    .expect("initialize succeeded");
    Running {
        process,
        client,
        handler,
        config,
    }
}

/// Start `wardgate --listen 127.0.0.1:0` and connect a client over Streamable HTTP.
pub async fn gateway_http(config: ConfigFile) -> Running {
    let (process, url) = spawn_gateway_http(&config).await;
    let (client, handler) = http_client(&url).await;
    Running {
        process,
        client,
        handler,
        config,
    }
}

/// Echoes the gateway's log (its stderr) until a line mentioning `marker` names a URL, and
/// returns that URL; the rest of the log keeps being echoed, so failures are diagnosable.
pub async fn url_in_log(process: &mut Child, marker: &str, limit: Duration) -> String {
    urls_in_log(process, &[marker], limit).await.remove(0)
}

/// [`url_in_log`] for several markers: the URL of each, in the order of `markers`, whatever
/// the order of the lines.
pub async fn urls_in_log(process: &mut Child, markers: &[&str], limit: Duration) -> Vec<String> {
    let stderr = process.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let mut found: Vec<Option<String>> = vec![None; markers.len()];
    tokio::time::timeout(limit, async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            eprintln!("{line}");
            let scheme = line.find("https://").or_else(|| line.find("http://"));
            for (marker, url) in markers.iter().zip(found.iter_mut()) {
                if let (true, Some(index), None) = (line.contains(marker), scheme, &url) {
                    *url = Some(line[index..].split_whitespace().next().unwrap().to_owned());
                }
            }
            if found.iter().all(Option::is_some) {
                return;
            }
        }
        panic!("gateway exited before logging {markers:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("gateway did not log {markers:?} in {limit:?}"));
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
        }
    });
    found.into_iter().map(Option::unwrap).collect()
}

pub async fn spawn_gateway_http(config: &ConfigFile) -> (Child, String) {
    spawn_gateway_http_with_env(config, &[]).await
}

/// [`spawn_gateway_http`] with these variables added to the gateway's environment.
pub async fn spawn_gateway_http_with_env(
    config: &ConfigFile,
    env: &[(&str, &str)],
) -> (Child, String) {
    spawn_gateway_listening(config, &["--listen", "127.0.0.1:0"], env).await
}

/// `wardgate --config` with `args` (which include `--listen`) and these variables added to
/// its environment; the URL it serves MCP at.
pub async fn spawn_gateway_listening(
    config: &ConfigFile,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut process = without_telemetry(&mut Command::new(wardgate()))
        .envs(env.iter().copied())
        .arg("--config")
        .arg(&config.path)
        .args(args)
        .args(["--log-level", "info,wardgate=debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn wardgate");
    let url = url_in_log(&mut process, "Streamable HTTP", Duration::from_secs(20)).await;
    (process, url)
}

pub async fn http_client(url: &str) -> (Client, TestClient) {
    http_client_as(url, "").await
}

/// [`http_client`] whose answers are signed with `label`.
pub async fn http_client_as(url: &str, label: &'static str) -> (Client, TestClient) {
    let handler = TestClient {
        label,
        ..TestClient::default()
    };
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = tokio::time::timeout(Duration::from_secs(20), handler.clone().serve(transport))
        .await
        .expect("gateway answered initialize in time")
        .expect("initialize succeeded");
    (client, handler)
}

/// A Streamable HTTP client of `url` that presents the bearer `token`.
pub async fn client_with_token(url: &str, token: &str) -> Client {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        )
        .auth_header(token.to_owned()),
    );
    tokio::time::timeout(
        Duration::from_secs(20),
        TestClient::default().serve(transport),
    )
    .await
    .expect("initialize in time")
    .expect("initialize succeeded")
}

/// Names of every tool the gateway lists.
pub async fn tool_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// List tools once, right away, as clients do (the gateway's first list waits for servers
/// still starting), and check that every name in `wanted` is there.
pub async fn list_at_once(client: &Client, wanted: &[&str]) -> Vec<String> {
    let names = tool_names(client).await;
    for name in wanted {
        assert!(
            names.iter().any(|n| n == name),
            "the first tools/list lacks {name}: {names:?}"
        );
    }
    names
}

/// Wait until the gateway lists every name in `wanted` (after a change the client was told of).
pub async fn wait_for_tools(client: &Client, wanted: &[&str], limit: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let names = tool_names(client).await;
        if wanted.iter().all(|w| names.iter().any(|n| n == w))
            || tokio::time::Instant::now() >= deadline
        {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn call(name: &str, arguments: serde_json::Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// Is a process with this pid still alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

/// Every pid whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            if fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(parent) {
                children.push(pid);
            }
        }
    }
    children
}

/// All descendants of `root`.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children_of(pid) {
            all.push(child);
            queue.push(child);
        }
    }
    all
}

/// Wait until none of `pids` is alive; return the ones still alive after `limit`.
pub async fn wait_gone(pids: &[u32], limit: Duration) -> Vec<u32> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let living: Vec<u32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        if living.is_empty() || tokio::time::Instant::now() >= deadline {
            return living;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A guest policy built by gateway/wasm's build script (built with the wardgate binary).
pub fn module(name: &str) -> PathBuf {
    wardgate();
    let target = Path::new(fake()).parent().unwrap().parent().unwrap();
    let path = target.join(format!(
        "wasm-policies/wasm32-wasip2/release/wardgate_policy_{name}.wasm"
    ));
    assert!(path.exists(), "{} was not built", path.display());
    path
}
