//! What a policy instance's store holds: an empty WASI context (no files, network, env or args; frozen clocks; stdout/stderr into the log) and a memory cap.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// The data of one policy store.
pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
}

impl StoreState {
    /// `module` tags the guest's output in the log.
    pub(crate) fn new(module: Arc<str>, memory_limit_bytes: usize) -> StoreState {
        // Everything a WASI guest could learn about the world is absent or constant, so
        // a decision depends on its arguments only.
        let wasi = WasiCtx::builder()
            .stdout(GuestLog::new(module.clone(), Stream::Stdout))
            .stderr(GuestLog::new(module, Stream::Stderr))
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a]))
            .insecure_random(wasmtime_wasi::Deterministic::new(vec![0x5a]))
            .insecure_random_seed(0)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        StoreState {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap {
                limits: StoreLimitsBuilder::new()
                    .memory_size(memory_limit_bytes)
                    .trap_on_grow_failure(true)
                    .build(),
                exceeded: false,
                largest_bytes: 0,
            },
        }
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// `StoreLimits` (which traps on a refused growth) plus a note that the cap was hit, so a
/// trap can be reported as "exceeded memory" without matching on error text, and the size
/// of the largest memory, so an instance can be retired before it reaches the cap.
pub(crate) struct MemoryCap {
    limits: StoreLimits,
    pub(crate) exceeded: bool,
    /// The size of the instance's largest linear memory, in bytes.
    pub(crate) largest_bytes: usize,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let answer = self.limits.memory_growing(current, desired, maximum);
        if matches!(answer, Ok(true)) {
            self.largest_bytes = self.largest_bytes.max(desired);
        } else {
            self.exceeded = true;
        }
        answer
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// Clocks that always read zero: policies get time as an argument, never from a clock.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Longest line logged; a guest that writes more gets its line cut here.
const MAX_LINE: usize = 1024;

/// A guest's stdout or stderr, written to the log one line at a time with the module's name.
/// Every handle the guest opens on the stream shares one line buffer.
#[derive(Clone)]
struct GuestLog(Arc<LineBuffer>);

struct LineBuffer {
    module: Arc<str>,
    stream: Stream,
    pending: Mutex<Vec<u8>>,
}

impl GuestLog {
    fn new(module: Arc<str>, stream: Stream) -> GuestLog {
        GuestLog(Arc::new(LineBuffer {
            module,
            stream,
            pending: Mutex::default(),
        }))
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut pending = wardgate_policy::lock::lock(&self.0.pending);
        for &byte in bytes {
            if byte == b'\n' {
                self.0.emit(&pending);
                pending.clear();
            } else if pending.len() < MAX_LINE {
                pending.push(byte);
            }
        }
    }
}

impl LineBuffer {
    fn emit(&self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let module = &*self.module;
        match self.stream {
            Stream::Stdout => {
                tracing::info!(target: "wardgate::policy::guest", module, stream = "stdout", "{line}")
            }
            // Rust guests report panics on stderr, just before they trap.
            Stream::Stderr => {
                tracing::warn!(target: "wardgate::policy::guest", module, stream = "stderr", "{line}")
            }
        }
    }
}

impl Drop for LineBuffer {
    /// The store is gone (dropped after a trap, say): log what is left of the last line.
    fn drop(&mut self) {
        let pending = std::mem::take(
            self.pending
                .get_mut()
                .unwrap_or_else(|poison| poison.into_inner()),
        );
        if !pending.is_empty() {
            self.emit(&pending);
        }
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestLog {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestLog {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Logging never blocks the guest.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for GuestLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
