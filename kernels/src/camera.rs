//! Pinhole camera as the rasterizer sees it: intrinsics in pixels and a `world_to_camera` pose.

/// A pinhole camera in the OpenCV frame (x right, y down, z forward).
///
/// - `width`, `height`: image size in pixels.
/// - `fx`, `fy`: focal lengths in pixels; `cx`, `cy`: principal point in pixels, measured from the
///   top-left corner of the top-left pixel (so the centre of pixel `(i, j)` is `(i + 0.5, j + 0.5)`).
/// - `world_to_camera`: row-major 4×4 rigid transform, world metres → camera metres
///   (`p_cam = R · p_world + t`, last row `[0, 0, 0, 1]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Camera {
    pub width: u32,
    pub height: u32,
    pub fx: f32,
    pub fy: f32,
    pub cx: f32,
    pub cy: f32,
    pub world_to_camera: [[f32; 4]; 4],
}
