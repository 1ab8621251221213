//! The emulator's initcheck (kernels/emu/gptr.h): a buffer given a shadow (one byte per byte,
//! non-zero where written; the emulated CUDA driver's `PAGEDKV_EMU_INITCHECK=1`) fails a read of
//! any byte never written, naming the buffer and element, and marks what the kernel writes. On
//! the kernels of kernels/emu/selftest/initcheck.cu.

use pagedkv::emu::{Elem, EmuError, Launch};
use std::ffi::c_void;

const N: usize = 96;

/// A float buffer and its shadow.
struct Tracked {
    data: Vec<f32>,
    shadow: Vec<u8>,
}

impl Tracked {
    fn new(n: usize, written: bool) -> Self {
        Tracked {
            data: (0..n).map(|i| i as f32 * 0.5).collect(),
            shadow: vec![u8::from(written); 4 * n],
        }
    }

    /// Element `i` as never written.
    fn unwritten(mut self, i: usize) -> Self {
        self.shadow[4 * i + 1] = 0;
        self
    }
}

fn arg<'a>(launch: Launch<'a>, t: &mut Tracked, mutable: bool) -> Launch<'a> {
    // SAFETY: both vectors outlive the launch, which nothing else touches meanwhile.
    unsafe {
        launch.raw_buf(
            t.data.as_mut_ptr() as *mut c_void,
            4 * t.data.len(),
            Elem::F32,
            mutable,
            t.shadow.as_mut_ptr(),
        )
    }
}

/// Runs the accumulate kernel; the error, with acc, x, out and hits afterwards.
fn accumulate(
    mut acc: Tracked,
    mut x: Tracked,
    mut hits_shadow: Vec<u8>,
) -> (Result<(), EmuError>, Tracked, Vec<u8>) {
    let mut out = Tracked::new(N, false);
    out.data.fill(f32::NAN);
    let mut hits = [0u32];
    let launch = Launch::new("emu_selftest_initcheck_accumulate")
        .grid(3)
        .block(32);
    let launch = arg(launch, &mut acc, true);
    let launch = arg(launch, &mut x, false);
    let launch = arg(launch, &mut out, true);
    // SAFETY: as in `arg`.
    let launch = unsafe {
        launch.raw_buf(
            hits.as_mut_ptr() as *mut c_void,
            4,
            Elem::U32,
            true,
            hits_shadow.as_mut_ptr(),
        )
    };
    let r = launch.i32(N as i32).run();
    hits_shadow.push(hits[0] as u8);
    (r, out, hits_shadow)
}

fn uninitialized(r: Result<(), EmuError>) -> String {
    match r {
        Err(EmuError::Uninitialized(m)) => m,
        other => panic!("expected an initcheck report, got {other:?}"),
    }
}

#[test]
fn written_buffers_pass_and_writes_are_marked() {
    let (r, out, hits) = accumulate(Tracked::new(N, true), Tracked::new(N, true), vec![1; 4]);
    r.unwrap();
    assert!(
        out.shadow.iter().all(|&b| b != 0),
        "the kernel's writes were not marked"
    );
    for (i, &v) in out.data.iter().enumerate() {
        assert_eq!(v, i as f32, "out[{i}]");
    }
    assert_eq!(hits[4], N as u8);
}

#[test]
fn a_read_of_a_const_buffer_never_written_is_reported() {
    let (r, ..) = accumulate(
        Tracked::new(N, true),
        Tracked::new(N, true).unwritten(70),
        vec![1; 4],
    );
    let m = uninitialized(r);
    assert!(m.contains("buffer 'x', element 70"), "{m}");
}

#[test]
fn a_read_modify_write_of_a_writable_buffer_never_written_is_reported() {
    let (r, ..) = accumulate(
        Tracked::new(N, true).unwritten(5),
        Tracked::new(N, true),
        vec![1; 4],
    );
    let m = uninitialized(r);
    assert!(
        m.contains("buffer 'acc', element 5") && m.contains("read"),
        "{m}"
    );
    let (r, ..) = accumulate(
        Tracked::new(N, true),
        Tracked::new(N, true),
        vec![1, 1, 0, 1],
    );
    let m = uninitialized(r);
    assert!(
        m.contains("atomicAdd") && m.contains("buffer 'hits'"),
        "{m}"
    );
}

#[test]
fn vector_loads_are_checked_and_vector_stores_marked() {
    let n = 8;
    let mut src = Tracked::new(4 * n, true);
    let mut dst = Tracked::new(4 * n, false);
    let run = |src: &mut Tracked, dst: &mut Tracked| {
        let launch = Launch::new("emu_selftest_initcheck_vectors").block(n as u32);
        let launch = arg(launch, dst, true);
        arg(launch, src, false).i32(n as i32).run()
    };
    run(&mut src, &mut dst).unwrap();
    assert!(dst.shadow.iter().all(|&b| b != 0));
    assert_eq!(dst.data, src.data);
    let mut src = Tracked::new(4 * n, true).unwritten(13);
    let m = uninitialized(run(&mut src, &mut dst));
    assert!(
        m.contains("vector load") && m.contains("buffer 'src', element 12"),
        "{m}"
    );
}
