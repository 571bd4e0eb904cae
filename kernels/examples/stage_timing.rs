//! TEMPORARY timing harness (to be deleted).
use std::time::Instant;
use kiln_kernels::cpu::{project::*, bin, sort, rasterize_forward, rasterize_backward, project_backward};
use kiln_kernels::{Camera, RenderOptions, SplatsRef, render_backward, render_forward};
use rand::{Rng, SeedableRng};

struct Scene { means: Vec<f32>, log_scales: Vec<f32>, rotations: Vec<f32>, logits: Vec<f32>, sh: Vec<f32> }
fn scene(n: usize, seed: u64) -> Scene {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut s = Scene { means: vec![], log_scales: vec![], rotations: vec![], logits: vec![], sh: vec![] };
    for _ in 0..n {
        let z = rng.random_range(2.0..10.0f32);
        s.means.extend([rng.random_range(-0.7..0.7) * z, rng.random_range(-0.5..0.5) * z, z]);
        s.log_scales.extend([0; 3].map(|_| rng.random_range(-5.0..-2.5f32)));
        s.rotations.extend([0; 4].map(|_| rng.random_range(-1.0..1.0f32)));
        s.logits.push(rng.random_range(-2.0..2.0));
        s.sh.extend([0; 48].map(|_| rng.random_range(-0.3..0.3f32)));
    }
    s
}
fn camera(width: u32, height: u32) -> Camera {
    let f = 0.8 * width as f32;
    let id = [[1.0, 0.0, 0.0, 0.0],[0.0, 1.0, 0.0, 0.0],[0.0, 0.0, 1.0, 0.0],[0.0, 0.0, 0.0, 1.0]];
    Camera { width, height, fx: f, fy: f, cx: width as f32 / 2.0, cy: height as f32 / 2.0, world_to_camera: id }
}
fn main() {
    let reps: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(5);
    let case: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(9);
    for (ci, (n, w, h)) in [(20_000usize, 270u32, 150u32), (100_000, 640, 480)].into_iter().enumerate() {
        if case != 9 && case != ci { continue; }
        let s = scene(n, 42);
        let cam = camera(w, h);
        let splats = SplatsRef { means: &s.means, log_scales: &s.log_scales, rotations: &s.rotations, logit_opacities: &s.logits, sh_coeffs: &s.sh, sh_degree: 3 };
        let opts = RenderOptions { background: [0.0; 3] };
        let grad: Vec<f32> = (0..(w * h * 3) as usize).map(|i| ((i * 37) % 11) as f32 / 11.0 - 0.5).collect();
        let params = SplatParams { means: &s.means, log_scales: &s.log_scales, rotations: &s.rotations, logit_opacities: &s.logits, sh_coeffs: &s.sh, sh_degree: 3, sh_k: 16 };
        let cm = CameraModel::<f32>::new(&cam);
        let mut t = [f64::MAX; 7];
        let mut best_total = f64::MAX;
        let mut isects = 0; let mut hash = 0u64;
        for _ in 0..reps {
            let t0 = Instant::now();
            let projected = project(&params, &cm);
            let t1 = Instant::now();
            let (keys, ids) = bin::bin(&projected, cm.tiles_x());
            let t2 = Instant::now();
            let (sorted, ranges) = sort::sort(keys, ids, (cm.tiles_x() * cm.tiles_y()) as usize);
            let t3 = Instant::now();
            let r = rasterize_forward::rasterize_forward(&projected, &sorted, &ranges, w, h, [0.0; 3]);
            let t4 = Instant::now();
            let sg = rasterize_backward::rasterize_backward(&projected, &sorted, &ranges, &r.final_t, &r.n_contrib, w, h, [0.0;3], &grad);
            let t5 = Instant::now();
            let pg = project_backward::project_backward(&params, &cm, &projected, &sg);
            let t6 = Instant::now();
            std::hint::black_box(pg);
            isects = sorted.len();
            let d = [t1-t0, t2-t1, t3-t2, t4-t3, t5-t4, t6-t5];
            for k in 0..6 { t[k] = t[k].min(d[k].as_secs_f64() * 1e3); }
            let a = Instant::now();
            let f = render_forward(&splats, &cam, &opts).unwrap();
            let g = render_backward(&splats, &cam, &opts, &f, &grad).unwrap();
            let tot = a.elapsed().as_secs_f64() * 1e3;
            if tot < best_total { let mut hsh: u64 = 1469598103934665603; for v in f.image.iter().chain(&f.alpha).chain(&g.means).chain(&g.log_scales).chain(&g.rotations).chain(&g.logit_opacities).chain(&g.sh_coeffs).chain(&g.means2d_grad_norm) { hsh = (hsh ^ v.to_bits() as u64).wrapping_mul(1099511628211); } hash = hsh; }
            std::hint::black_box(g);
            t[6] = t[6].min(tot);
            best_total = best_total.min(tot);
        }
        let r = 1.0;
        println!("{n} splats {w}x{h} I={isects}: project {:.1} bin {:.1} sort {:.1} fwd {:.1} bwd {:.1} projbwd {:.1} | public fwd+bwd mean {:.1} best {:.1} ms hash {hash:016x}",
            t[0]/r, t[1]/r, t[2]/r, t[3]/r, t[4]/r, t[5]/r, t[6]/r, best_total);

    }
}
