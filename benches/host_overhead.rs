//! Host-side cost of a typed call against hand-written wgpu doing the same dispatch.
//!
//! Both sides dispatch `infrastructure::scale` from the same WGSL, with fresh parameters each
//! call: the hand-written side writes the uniform into a dynamic-offset buffer, creates a bind
//! group, sets pipeline and bind group and dispatches — what the runtime does after its checks
//! (shape requirements, binding sizes, aliasing, grid limits, pipeline lookup). CPU time only:
//! the GPU is drained between samples, outside the timed region.
//!
//! `cargo bench --bench host_overhead` (any adapter; `KERNELS_ADAPTER` picks one).
//! Goal: typed ≤ 1.1 × hand-written.

use kernels::Gpu;
use kernels::infrastructure::scale;
use kernels::wgpu;
use std::time::Instant;

const CALLS: usize = 256;
const SAMPLES: usize = 101;
const SINGLE: usize = 32;

struct Hand {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    uniforms: wgpu::Buffer,
    stride: u64,
}

impl Hand {
    fn new(gpu: &Gpu) -> Hand {
        let device = gpu.device();
        let variant = gpu.variant_for(&scale::KERNEL).unwrap();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(variant.wgsl.into()),
        });
        let entry = |binding, ty, dynamic| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: dynamic, min_binding_size: None },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &[
                entry(0, wgpu::BufferBindingType::Storage { read_only: false }, false),
                entry(1, wgpu::BufferBindingType::Uniform, true),
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: Some(&pl),
            module: &module,
            entry_point: Some("scale"),
            compilation_options: Default::default(),
            cache: None,
        });
        let stride = gpu.limits().min_uniform_buffer_offset_alignment as u64;
        let uniforms = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: stride * CALLS as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Hand { pipeline, layout, uniforms, stride }
    }

    /// `calls` dispatches in one encoder and pass, one submission.
    fn run(&self, gpu: &Gpu, x: &wgpu::Buffer, n: u32, calls: usize) {
        let device = gpu.device();
        let mut data = vec![0u8; self.stride as usize * calls];
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            for i in 0..calls {
                let params = scale::Params::new(n, 1.0 + i as f32 * 1e-6);
                let at = i * self.stride as usize;
                data[at..at + 8].copy_from_slice(bytemuck::bytes_of(&params));
                let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: x.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: &self.uniforms,
                                offset: 0,
                                size: std::num::NonZeroU64::new(16),
                            }),
                        },
                    ],
                });
                pass.set_bind_group(0, &bg, &[at as u32]);
                pass.dispatch_workgroups(n.div_ceil(kernels::infrastructure::EW_CHUNK), 1, 1);
            }
        }
        gpu.queue().write_buffer(&self.uniforms, 0, &data);
        gpu.queue().submit([encoder.finish()]);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median times of `a` and `b`, sampled alternately (ABBA) so that drift in the machine's
/// speed hits both alike.
fn time_pair(gpu: &Gpu, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    let (mut ta, mut tb) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    let once = |f: &mut dyn FnMut()| {
        gpu.wait().unwrap();
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    for i in 0..SAMPLES + 3 {
        let (x, y) = if i % 2 == 0 {
            let x = once(&mut a);
            (x, once(&mut b))
        } else {
            let y = once(&mut b);
            (once(&mut a), y)
        };
        if i >= 3 {
            ta.push(x);
            tb.push(y);
        }
    }
    gpu.wait().unwrap();
    (median(ta), median(tb))
}

fn main() {
    let gpu = Gpu::new().expect("a GPU adapter (on Linux without a GPU: apt-get install mesa-vulkan-drivers)");
    println!("adapter: {}", gpu.report());
    let n = 4096u32;
    let mut x = gpu.upload(&vec![1.0f32; n as usize]).unwrap();
    let hand = Hand::new(&gpu);
    gpu.warm_up(kernels::infrastructure::KERNELS).unwrap();

    let raw = x.raw().clone();
    let (batched_typed, batched_hand) = time_pair(
        &gpu,
        || {
            let batch = gpu.batch();
            for i in 0..CALLS {
                scale(&batch, &mut x, scale::Params::new(n, 1.0 + i as f32 * 1e-6)).unwrap();
            }
            batch.submit().unwrap();
        },
        || hand.run(&gpu, &raw, n, CALLS),
    );
    let (batched_typed, batched_hand) = (batched_typed / CALLS as f64, batched_hand / CALLS as f64);

    let (single_typed, single_hand) = time_pair(
        &gpu,
        || {
            for i in 0..SINGLE {
                scale(&gpu, &mut x, scale::Params::new(n, 1.0 + i as f32 * 1e-6)).unwrap();
            }
        },
        || {
            for _ in 0..SINGLE {
                hand.run(&gpu, &raw, n, 1);
            }
        },
    );
    let (single_typed, single_hand) = (single_typed / SINGLE as f64, single_hand / SINGLE as f64);

    println!("\n| CPU time per call | typed | hand-written wgpu | ratio | goal |");
    println!("|---|---|---|---|---|");
    for (what, t, h) in [
        (format!("{CALLS} calls in one batch"), batched_typed, batched_hand),
        ("one call, one submission".to_string(), single_typed, single_hand),
    ] {
        println!(
            "| {what} | {:.2} µs | {:.2} µs | {:.2}× | ≤ 1.10× {} |",
            t * 1e6,
            h * 1e6,
            t / h,
            if t / h <= 1.10 { "met" } else { "missed" }
        );
    }
}
