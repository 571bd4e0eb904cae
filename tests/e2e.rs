//! End-to-end tests of the `kiln` binary: real files in, real files out, each in a fresh temporary
//! directory, on the sample datasets found by the dataset resolver.

mod e2e {
    pub mod api;
    pub mod bad_input;
    pub mod capture_layouts;
    pub mod check;
    pub mod cost;
    pub mod docs;
    pub mod harness;
    pub mod large_coordinates;
    pub mod mesh;
    pub mod mesh_browser;
    pub mod mesh_frames;
    pub mod publish_fence;
    pub mod queue;
    pub mod reconstruct;
    pub mod regress;
    pub mod regression;
    pub mod report_html;
    pub mod s3;
    pub mod secrets;
    pub mod sog;
    pub mod splat_transform;
    pub mod train;
    pub mod viewer;
}
