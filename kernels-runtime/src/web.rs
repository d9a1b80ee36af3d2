//! Browser glue (wasm32 only): what wgpu 30's WebGPU backend does not do for us.
//!
//! Its feature table has no entry for WebGPU's `subgroups`, so `Adapter::features` never reports
//! it and `request_device` never asks for it — yet a shader that says `enable subgroups;` only
//! compiles on a device created with it. The runtime therefore adds the feature to the one
//! `GPUAdapter.requestDevice` call wgpu makes (the method is wrapped for the duration of that
//! synchronous call and restored at once), and reads the device's JS feature set afterwards.

use js_sys::{Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// The wrapper: asks for each of `extra` that the adapter (`this`) offers, in addition to what
/// the descriptor already requires.
const WRAP: &str = "return function (desc) {
    desc = desc || {};
    const required = Array.from(desc.requiredFeatures || []);
    for (const f of extra) {
        if (this.features.has(f) && !required.includes(f)) required.push(f);
    }
    desc.requiredFeatures = required;
    return original.call(this, desc);
};";

/// Runs `f` — which must call `GPUAdapter.requestDevice` synchronously, as wgpu's
/// `Adapter::request_device` does before returning its future — with that method asking also
/// for the features `extra` where the adapter has them. Without `GPUAdapter` (no WebGPU) or on
/// any failure to wrap, `f` runs unchanged.
pub(crate) fn requesting_features<R>(extra: &[&str], f: impl FnOnce() -> R) -> R {
    if extra.is_empty() {
        return f();
    }
    let key = JsValue::from_str("requestDevice");
    let prototype = Reflect::get(&js_sys::global(), &JsValue::from_str("GPUAdapter"))
        .ok()
        .filter(|class| class.is_function())
        .and_then(|class| Reflect::get(&class, &JsValue::from_str("prototype")).ok())
        .filter(|p| p.is_object());
    let Some(prototype) = prototype else { return f() };
    let Some(original) = Reflect::get(&prototype, &key).ok().filter(|m| m.is_function()) else { return f() };
    let names = js_sys::Array::new();
    for name in extra {
        names.push(&JsValue::from_str(name));
    }
    let make = Function::new_with_args("original, extra", WRAP);
    let Ok(wrapped) = make.call2(&JsValue::NULL, &original, &names) else { return f() };
    if !Reflect::set(&prototype, &key, &wrapped).unwrap_or(false) {
        return f();
    }
    let result = f();
    let _ = Reflect::set(&prototype, &key, &original);
    result
}

/// Whether the browser device behind `device` has the WebGPU feature `name`.
pub(crate) fn device_has(device: &wgpu::Device, name: &str) -> bool {
    let Some(raw) = device.as_webgpu() else { return false };
    let raw: &JsValue = raw.as_ref();
    let Ok(features) = Reflect::get(raw, &JsValue::from_str("features")) else { return false };
    let Some(has) = Reflect::get(&features, &JsValue::from_str("has")).ok().and_then(|h| h.dyn_into::<Function>().ok())
    else {
        return false;
    };
    has.call1(&features, &JsValue::from_str(name)).is_ok_and(|v| v.is_truthy())
}

/// Milliseconds since the epoch (`Date.now()`): `std::time::Instant` panics on wasm32.
pub(crate) fn now_ms() -> f64 {
    js_sys::Date::now()
}
