//! The shared wasmtime engine: its configuration and limits, the epoch ticker, the WASI linker and the compile cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use crate::cache::{sha256_hex, ComponentCache};
use crate::error::{chain, PolicyLoadError};
use crate::wasi::StoreState;

/// Limits and places shared by every module a [`Runtime`] loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Wall-clock budget of one decision; a call past it is interrupted (default 10 ms).
    pub deadline: Duration,
    /// Cap on each linear memory of an instance (default 64 MiB: Python and JavaScript
    /// runtimes start at 10-13 MiB). An instance past half of it is retired after its decision.
    pub memory_limit_bytes: usize,
    /// Idle instances kept per module for the next decisions (default 4).
    pub pool_size: usize,
    /// Where compiled modules are cached; `None` compiles on every load.
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            deadline: Duration::from_millis(10),
            memory_limit_bytes: 64 << 20,
            pool_size: 4,
            cache_dir: default_cache_dir(),
        }
    }
}

/// `$XDG_CACHE_HOME/wardgate/policies`, else `$HOME/.cache/wardgate/policies`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("wardgate").join("policies"))
}

/// Epoch ticks per deadline: the deadline is enforced to within a tenth of itself.
const TICKS_PER_DEADLINE: u32 = 10;

/// One wasmtime engine with its limits; cheap to clone. Modules loaded by one runtime share
/// its compile cache and its epoch ticker thread.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    pub(crate) config: RuntimeConfig,
    pub(crate) ticker: Arc<Ticker>,
    cache: Option<ComponentCache>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Runtime, PolicyLoadError> {
        let runtime_error = |reason: String| PolicyLoadError::Runtime { reason };
        let mut wasmtime_config = Config::new();
        wasmtime_config
            .epoch_interruption(true)
            // Plain synchronous components: the concurrency machinery would cost 2-4x per call.
            .concurrency_support(false)
            // A fault is logged as one line; guest backtraces (of usually stripped
            // modules) would not help an operator and cost time on every trap.
            .wasm_backtrace_max_frames(None);
        let engine = Engine::new(&wasmtime_config).map_err(|error| runtime_error(chain(&error)))?;
        let mut linker = Linker::new(&engine);
        // Rust and other guests import wasi:cli and wasi:io for their standard library; they
        // get the empty context of `StoreState`.
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|error| runtime_error(chain(&error)))?;
        let tick = (config.deadline / TICKS_PER_DEADLINE).max(Duration::from_micros(100));
        let ticker = Ticker::spawn(engine.clone(), tick)
            .map_err(|error| runtime_error(format!("cannot start the epoch ticker: {error}")))?;
        let cache = config.cache_dir.as_deref().and_then(|dir| {
            ComponentCache::open(dir, &engine)
                .inspect_err(|reason| {
                    tracing::warn!("compiled policy modules will not be cached: {reason}")
                })
                .ok()
        });
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                config,
                ticker,
                cache,
            }),
        })
    }

    /// The process-wide runtime with the default configuration, started on first use.
    pub fn shared() -> Result<Runtime, PolicyLoadError> {
        static SHARED: OnceLock<Result<Runtime, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                Runtime::new(RuntimeConfig::default()).map_err(|error| error.to_string())
            })
            .clone()
            .map_err(|reason| PolicyLoadError::Runtime { reason })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Epoch ticks a decision may run: the deadline in ticks.
    pub(crate) fn deadline_ticks(&self) -> u64 {
        u64::from(TICKS_PER_DEADLINE)
    }

    /// Compiles `bytes` (a component, binary or WAT text), or takes it from the cache.
    /// Returns the component and the SHA-256 of `bytes`.
    pub(crate) fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Component, String), PolicyLoadError> {
        // Both start with `\0asm`; a core module's version field is 1, a component's is not.
        if bytes.starts_with(b"\0asm\x01\0\0\0") {
            return Err(PolicyLoadError::NotAComponent {
                path: path.to_path_buf(),
            });
        }
        let module_sha256 = sha256_hex(bytes);
        let engine = &self.inner.engine;
        if let Some(component) = self
            .inner
            .cache
            .as_ref()
            .and_then(|cache| cache.load(engine, &module_sha256))
        {
            return Ok((component, module_sha256));
        }
        let component =
            Component::new(engine, bytes).map_err(|error| PolicyLoadError::Compile {
                path: path.to_path_buf(),
                reason: chain(&error),
            })?;
        if let Some(cache) = &self.inner.cache {
            cache.store(&module_sha256, &component);
        }
        Ok((component, module_sha256))
    }
}

/// Advances the engine's epoch while decisions run, and sleeps (parked, no wake-ups)
/// after a while without any, so an idle gateway costs nothing.
pub(crate) struct Ticker {
    in_flight: AtomicUsize,
    parked: AtomicBool,
    stopped: AtomicBool,
    thread: OnceLock<Thread>,
}

/// Idle ticks before the ticker parks.
const IDLE_TICKS_BEFORE_PARK: u32 = 100;

/// Keeps the epoch advancing while alive: hold one for the whole of a call into a module.
pub(crate) struct Ticking<'a>(&'a Ticker);

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, SeqCst);
    }
}

impl Ticker {
    fn spawn(engine: Engine, tick: Duration) -> std::io::Result<Arc<Ticker>> {
        let ticker = Arc::new(Ticker {
            in_flight: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            thread: OnceLock::new(),
        });
        let running = ticker.clone();
        let handle = std::thread::Builder::new()
            .name("wardgate-policy-epoch".into())
            .spawn(move || running.run(&engine, tick))?;
        let _ = ticker.thread.set(handle.thread().clone());
        Ok(ticker)
    }

    fn run(&self, engine: &Engine, tick: Duration) {
        let mut idle_ticks = 0;
        while !self.stopped.load(SeqCst) {
            if self.in_flight.load(SeqCst) > 0 {
                idle_ticks = 0;
            } else if idle_ticks >= IDLE_TICKS_BEFORE_PARK {
                // Announce the park before the last look at `in_flight`; `enter` bumps
                // `in_flight` before looking at `parked`. With both SeqCst, one of the two
                // sees the other, so a decision never runs with the ticker asleep.
                self.parked.store(true, SeqCst);
                if self.in_flight.load(SeqCst) == 0 && !self.stopped.load(SeqCst) {
                    std::thread::park();
                }
                self.parked.store(false, SeqCst);
                idle_ticks = 0;
                continue;
            } else {
                idle_ticks += 1;
            }
            std::thread::sleep(tick);
            engine.increment_epoch();
        }
    }

    pub(crate) fn enter(&self) -> Ticking<'_> {
        self.in_flight.fetch_add(1, SeqCst);
        if self.parked.load(SeqCst) {
            self.wake();
        }
        Ticking(self)
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    fn stop(&self) {
        self.stopped.store(true, SeqCst);
        self.wake();
    }
}
