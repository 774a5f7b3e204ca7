//! A real headless browser for the tests: Debian's Chromium (installed on first use),
//! driven by npm `playwright-core` through `tests/node/browser.mjs`, one command at a time.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::debian;
use super::node;

/// Where the tests save screenshots: `target/screenshots`.
pub fn screenshots() -> PathBuf {
    let dir = node::node_tools()
        .parent()
        .expect("target/node-tools has a parent")
        .join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

/// One browser with one page, closed (and its process gone) when dropped.
pub struct Browser {
    process: Child,
    input: ChildStdin,
    output: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    pub version: String,
}

impl Browser {
    /// Chromium at `viewport` ("1280x900") in `scheme` ("light" or "dark").
    pub async fn start(viewport: &str, scheme: &str) -> Browser {
        let chromium = debian::ensure("/usr/bin/chromium", &["chromium"]);
        let script = copy_beside_node_modules("browser.mjs");
        assert!(
            node::node_tools()
                .join("node_modules/playwright-core")
                .exists(),
            "playwright-core is missing after npm ci"
        );
        let mut process = tokio::process::Command::new("node")
            .arg(&script)
            .env("WARDGATE_CHROMIUM", &chromium)
            .env("WARDGATE_VIEWPORT", viewport)
            .env("WARDGATE_COLOR_SCHEME", scheme)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs tests/node/browser.mjs");
        let input = process.stdin.take().expect("piped stdin");
        let mut output = BufReader::new(process.stdout.take().expect("piped stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), output.next_line())
            .await
            .expect("the browser started in time")
            .expect("read the driver's stdout")
            .expect("the driver said whether the browser started");
        let ready: Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(ready["ready"], true, "Chromium did not start: {ready}");
        Browser {
            process,
            input,
            output,
            next_id: 1,
            version: ready["version"].as_str().unwrap_or("").to_owned(),
        }
    }

    /// Sends one command (`{"op": ..., ...}`) and returns its value, or the driver's error.
    pub async fn try_op(&mut self, mut command: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        command["id"] = json!(id);
        let mut line = command.to_string();
        line.push('\n');
        self.input
            .write_all(line.as_bytes())
            .await
            .expect("write to the browser driver");
        // Waits inside the driver time out at 30 s; this only keeps a dead driver from hanging.
        let answer = tokio::time::timeout(Duration::from_secs(120), self.output.next_line())
            .await
            .expect("the browser driver answered")
            .expect("read the browser driver")
            .expect("the browser driver is still running");
        let answer: Value = serde_json::from_str(&answer).expect("a JSON answer");
        assert_eq!(answer["id"], id, "answers come in order: {answer}");
        if answer["ok"] == true {
            Ok(answer["value"].clone())
        } else {
            Err(answer["error"].as_str().unwrap_or("").to_owned())
        }
    }

    /// [`Browser::try_op`], failing the test on an error.
    pub async fn op(&mut self, command: Value) -> Value {
        let what = command.to_string();
        match self.try_op(command).await {
            Ok(value) => value,
            Err(error) => panic!("browser: {what} failed: {error}"),
        }
    }

    pub async fn goto(&mut self, url: &str) -> Value {
        self.op(json!({ "op": "goto", "url": url })).await
    }

    pub async fn wait(&mut self, selector: &str) {
        self.op(json!({ "op": "wait", "selector": selector })).await;
    }

    pub async fn wait_attr(&mut self, selector: &str, name: &str, value: &str) {
        self.op(json!({ "op": "wait_attr", "selector": selector, "name": name, "value": value }))
            .await;
    }

    pub async fn wait_text(&mut self, selector: &str, text: &str) -> String {
        let value = self
            .op(json!({ "op": "wait_text", "selector": selector, "text": text }))
            .await;
        value.as_str().unwrap_or("").to_owned()
    }

    pub async fn click(&mut self, selector: &str) {
        self.op(json!({ "op": "click", "selector": selector }))
            .await;
    }

    pub async fn count(&mut self, selector: &str) -> u64 {
        self.op(json!({ "op": "count", "selector": selector }))
            .await
            .as_u64()
            .unwrap_or(0)
    }

    pub async fn text(&mut self, selector: &str) -> Option<String> {
        self.op(json!({ "op": "text", "selector": selector }))
            .await
            .as_str()
            .map(str::to_owned)
    }

    pub async fn eval(&mut self, expression: &str) -> Value {
        self.op(json!({ "op": "eval", "expression": expression }))
            .await
    }

    /// Saves a PNG of the page (the whole page with `full_page`) under `target/screenshots`.
    pub async fn screenshot(&mut self, name: &str, full_page: bool) -> PathBuf {
        let path = screenshots().join(name);
        self.op(json!({ "op": "screenshot", "path": path, "full_page": full_page }))
            .await;
        path
    }

    /// Script errors the page raised so far.
    pub async fn page_errors(&mut self) -> Vec<String> {
        let value = self.op(json!({ "op": "errors" })).await;
        serde_json::from_value(value).unwrap_or_default()
    }

    /// Closes the browser and waits for the driver to exit.
    pub async fn close(mut self) {
        let _ = self.try_op(json!({ "op": "close" })).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.process.wait()).await;
    }
}

/// `tests/node/NAME` copied beside the installed `node_modules`, so its imports resolve.
fn copy_beside_node_modules(name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node")
        .join(name);
    let script = node::node_tools().join(name);
    std::fs::copy(&source, &script)
        .unwrap_or_else(|error| panic!("copy tests/node/{name}: {error}"));
    script
}
