//! The one `bindgen!` of the `wardgate:policy/recovery-policy` world, host side; conversions live in `convert.rs`.

wasmtime::component::bindgen!({
    world: "recovery-policy",
    path: "../../wit",
});
