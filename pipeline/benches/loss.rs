//! The training loss, value and gradient with respect to the render, two ways at one size
//! (270×480, fox at `max_side = 480`): the burn tensor version the trainer used before
//! (`train::loss::photometric_loss` + autodiff) and the fused kernel it uses now
//! (`kiln_kernels::cpu::loss`). Throughput in pixels per second.
//! Run with `cargo bench -p kiln-pipeline --bench loss`.

use burn::tensor::{Tensor, TensorData};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_pipeline::stages::train::loss::photometric_loss;
use kiln_pipeline::stages::train::op::TrainBackend;

fn bench_loss(c: &mut Criterion) {
    let (h, w) = (270usize, 480usize);
    let n = h * w * 3;
    let image: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let target: Vec<f32> = (0..n)
        .map(|i| ((i * 104_729) % 997) as f32 / 997.0)
        .collect();
    let mut group = c.benchmark_group("loss_270x480");
    group.sample_size(10);
    group.throughput(Throughput::Elements((h * w) as u64));
    group.bench_function("burn_autodiff", |b| {
        b.iter(|| {
            let dev = Default::default();
            let r: Tensor<TrainBackend, 3> =
                Tensor::from_data(TensorData::new(image.clone(), [h, w, 3]), &dev).require_grad();
            let t: Tensor<TrainBackend, 3> =
                Tensor::from_data(TensorData::new(target.clone(), [h, w, 3]), &dev);
            let loss = photometric_loss(r.clone(), t, 0.2);
            let grads = loss.backward();
            r.grad(&grads)
        })
    });
    group.bench_function("fused_kernel", |b| {
        b.iter(|| kiln_kernels::cpu::loss::photometric_loss(&image, &target, h, w, 0.2))
    });
    group.finish();
}

criterion_group!(benches, bench_loss);
criterion_main!(benches);
