//! Device memory and kernel launches behind one small interface, [`GpuBackend`], with two
//! implementations: the CUDA driver ([`super::driver`]) and the host emulator ([`super::emulator`],
//! which runs the same CUDA C on the CPU so CI can check the launch code and the kernels' math
//! without a GPU). Everything above this module (the render passes) is backend-agnostic.
//!
//! [`GpuContext`] enforces the per-allocation cap (no single device allocation above it; default
//! [`DEFAULT_ALLOC_CAP_BYTES`]) and records current and peak device memory.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::Error;

/// Default cap on one device allocation: 2 GiB (issue 4). Larger buffers fail with
/// [`Error::Device`] naming the buffer, instead of an opaque out-of-memory deep in a launch.
pub const DEFAULT_ALLOC_CAP_BYTES: usize = 2 << 30;

/// The operations the render passes need from a device. Pointers are device addresses (`u64`,
/// a `CUdeviceptr` on CUDA, a host address in the emulator).
pub trait GpuBackend: Send + Sync + std::fmt::Debug {
    /// Human-readable device name, e.g. `"NVIDIA H200"` or `"host emulator"`.
    fn name(&self) -> String;
    /// Total device memory in bytes (0 when unknown).
    fn total_memory(&self) -> usize;
    /// Allocates `bytes` (> 0) of uninitialised device memory.
    fn alloc(&self, bytes: usize) -> Result<u64, Error>;
    /// Frees memory from [`GpuBackend::alloc`].
    ///
    /// # Safety
    /// `ptr` came from `alloc` on this backend and is not used afterwards.
    unsafe fn free(&self, ptr: u64);
    /// Copies host bytes to device memory.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` lies inside one live allocation.
    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<(), Error>;
    /// Copies device memory to host bytes (waits for prior launches).
    ///
    /// # Safety
    /// `[src, src + dst.len())` lies inside one live allocation.
    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<(), Error>;
    /// Sets `bytes` bytes at `dst` to zero.
    ///
    /// # Safety
    /// `[dst, dst + bytes)` lies inside one live allocation.
    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), Error>;
    /// Launches kernel `name` (one of `source::KERNEL_NAMES`) on `grid × block` threads.
    ///
    /// # Safety
    /// `args` point to values whose types and order match the kernel's C signature, and every
    /// device pointer among them is live and large enough for what the kernel touches.
    unsafe fn launch(
        &self,
        name: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &mut [*mut c_void],
    ) -> Result<(), Error>;
    /// Waits for every launch to finish and reports the first asynchronous error.
    fn synchronize(&self) -> Result<(), Error>;
}

/// A backend plus the allocation cap and memory accounting.
#[derive(Debug)]
pub struct GpuContext {
    backend: Box<dyn GpuBackend>,
    device: String,
    cap: usize,
    current: AtomicUsize,
    peak: AtomicUsize,
}

impl GpuContext {
    /// Wraps a backend; `device` names it in errors (e.g. `"cuda:0"`), `cap` is the largest single
    /// allocation in bytes.
    pub fn new(backend: Box<dyn GpuBackend>, device: String, cap: usize) -> Self {
        Self {
            backend,
            device,
            cap,
            current: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &dyn GpuBackend {
        self.backend.as_ref()
    }

    /// The device as named in errors and the ledger (`cuda:N` or `emulator`).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Largest single allocation allowed, bytes.
    pub fn alloc_cap(&self) -> usize {
        self.cap
    }

    /// Peak of live device memory allocated through this context since creation (or the last
    /// [`GpuContext::reset_peak`]), bytes.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Restarts peak tracking from the current usage.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.current.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn device_error(&self, reason: String) -> Error {
        Error::Device {
            device: self.device.clone(),
            reason,
        }
    }
}

/// A typed device array of `len` elements of `T`, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    ctx: Arc<GpuContext>,
    ptr: u64,
    len: usize,
    bytes: usize,
    _t: PhantomData<T>,
}

impl<T: bytemuck::Pod> DeviceBuffer<T> {
    /// Allocates `len` elements (uninitialised; at least one byte is reserved so that empty
    /// buffers still have a valid address). `what` names the buffer in the error.
    ///
    /// # Errors
    /// [`Error::Device`] when the buffer exceeds the context's cap or the device is out of memory.
    pub fn uninit(ctx: &Arc<GpuContext>, len: usize, what: &str) -> Result<Self, Error> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| ctx.device_error(format!("{what}: {len} elements overflow")))?;
        if bytes > ctx.cap {
            return Err(ctx.device_error(format!(
                "{what} needs {bytes} bytes, above the {} byte cap on one device allocation; \
                 render fewer splats or a smaller image, or raise the cap (KILN_GPU_ALLOC_CAP)",
                ctx.cap
            )));
        }
        let alloc_bytes = bytes.max(16);
        let ptr = ctx
            .backend
            .alloc(alloc_bytes)
            .map_err(|e| ctx.device_error(format!("allocating {what} ({bytes} bytes): {e}")))?;
        let now = ctx.current.fetch_add(alloc_bytes, Ordering::Relaxed) + alloc_bytes;
        ctx.peak.fetch_max(now, Ordering::Relaxed);
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
            len,
            bytes: alloc_bytes,
            _t: PhantomData,
        })
    }

    /// Allocates `len` zeroed elements.
    ///
    /// # Errors
    /// As [`DeviceBuffer::uninit`].
    pub fn zeros(ctx: &Arc<GpuContext>, len: usize, what: &str) -> Result<Self, Error> {
        let b = Self::uninit(ctx, len, what)?;
        // SAFETY: the range is exactly this live allocation.
        unsafe { ctx.backend.zero(b.ptr, b.bytes)? };
        Ok(b)
    }

    /// Allocates and fills from a host slice.
    ///
    /// # Errors
    /// As [`DeviceBuffer::uninit`], plus copy failures.
    pub fn from_slice(ctx: &Arc<GpuContext>, data: &[T], what: &str) -> Result<Self, Error> {
        let b = Self::uninit(ctx, data.len(), what)?;
        if !data.is_empty() {
            // SAFETY: the allocation holds `data.len()` elements.
            unsafe { ctx.backend.upload(b.ptr, bytemuck::cast_slice(data))? };
        }
        Ok(b)
    }

    /// Copies the whole buffer to the host.
    ///
    /// # Errors
    /// [`Error::Device`] when the copy (or an earlier asynchronous launch) failed.
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        self.prefix_to_vec(self.len)
    }

    /// Copies the first `n ≤ len` elements to the host.
    ///
    /// # Errors
    /// As [`DeviceBuffer::to_vec`].
    pub fn prefix_to_vec(&self, n: usize) -> Result<Vec<T>, Error> {
        let n = n.min(self.len);
        let mut out = vec![T::zeroed(); n];
        if n > 0 {
            // SAFETY: `n` elements lie inside this allocation.
            unsafe {
                self.ctx
                    .backend
                    .download(bytemuck::cast_slice_mut(&mut out), self.ptr)?
            };
        }
        Ok(out)
    }

    /// Copies the whole buffer into `dst` (same length).
    ///
    /// # Errors
    /// [`Error::Shape`] when `dst.len()` differs from the buffer's; [`Error::Device`] as
    /// [`DeviceBuffer::to_vec`].
    pub fn copy_to(&self, dst: &mut [T]) -> Result<(), Error> {
        if dst.len() != self.len {
            return Err(Error::Shape {
                what: "device buffer download",
                expected: self.len,
                found: dst.len(),
            });
        }
        if !dst.is_empty() {
            // SAFETY: `dst.len() == len` elements lie inside this allocation.
            unsafe {
                self.ctx
                    .backend
                    .download(bytemuck::cast_slice_mut(dst), self.ptr)?
            };
        }
        Ok(())
    }

    /// Device address, for kernel arguments.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.ctx.current.fetch_sub(self.bytes, Ordering::Relaxed);
        // SAFETY: allocated by this backend in `uninit`, never used after drop.
        unsafe { self.ctx.backend.free(self.ptr) };
    }
}

/// One kernel argument by value.
#[derive(Debug, Clone, Copy)]
pub enum Arg<C: Copy> {
    /// A device pointer.
    Ptr(u64),
    /// `unsigned int`.
    U32(u32),
    /// `float`.
    F32(f32),
    /// A `#[repr(C)]` struct passed by value (the camera).
    Struct(C),
}

/// Kernel arguments in C signature order; [`KernelArgs::pointers`] gives the `void**` array the
/// launch API wants (pointers into this value, so keep it alive and unmoved during the launch).
#[derive(Debug, Default)]
pub struct KernelArgs<C: Copy> {
    args: Vec<Arg<C>>,
}

impl<C: Copy> KernelArgs<C> {
    /// An empty list.
    pub fn new() -> Self {
        Self { args: Vec::new() }
    }

    /// Appends a device buffer's address.
    pub fn buf<T>(mut self, b: &DeviceBuffer<T>) -> Self {
        self.args.push(Arg::Ptr(b.ptr));
        self
    }

    /// Appends a null device pointer (an optional buffer left out).
    pub fn null(mut self) -> Self {
        self.args.push(Arg::Ptr(0));
        self
    }

    /// Appends an `unsigned int`.
    pub fn u32(mut self, v: u32) -> Self {
        self.args.push(Arg::U32(v));
        self
    }

    /// Appends a `float`.
    pub fn f32(mut self, v: f32) -> Self {
        self.args.push(Arg::F32(v));
        self
    }

    /// Appends a struct by value.
    pub fn value(mut self, v: C) -> Self {
        self.args.push(Arg::Struct(v));
        self
    }

    /// Pointers to each argument value, in order.
    pub fn pointers(&mut self) -> Vec<*mut c_void> {
        self.args
            .iter_mut()
            .map(|a| match a {
                Arg::Ptr(p) => p as *mut u64 as *mut c_void,
                Arg::U32(v) => v as *mut u32 as *mut c_void,
                Arg::F32(v) => v as *mut f32 as *mut c_void,
                Arg::Struct(s) => s as *mut C as *mut c_void,
            })
            .collect()
    }
}
