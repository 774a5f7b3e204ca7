//! Integration tests of the WebAssembly policy host against the real guest policies.

// In a test, a poisoned lock means another test thread panicked: unwrapping is right here.
#![allow(clippy::disallowed_methods)]

// Shared helpers: runtimes, servers, a deterministic random source.
mod support;

// policies/default decides exactly as Builtin, over generated scenarios.
mod equivalence;
// policies/strict and policies/patient show their intents.
mod intents;
// Modules that loop, allocate, trap, panic or answer nonsense: Builtin answers instead.
mod faults;
// Modules that cannot load: wrong world, unknown imports, not a component, not a file.
mod load_errors;
// Hot swap under concurrent decisions, and reload failures that change nothing.
mod swap;
// Guest output and faults in the log: tagged with the module, warned once per version.
mod logging;
// Compiled modules are cached across runtimes (restarts).
mod cache;
