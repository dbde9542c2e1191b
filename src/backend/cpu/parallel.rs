//! Splitting kernels across the thread pool: matmuls by weight rows, row-wise ops by activation rows.
//!
//! Every output element is computed by exactly one kernel call whose result does not depend on the split (the
//! kernels guarantee it), so thread count and task sizes never change a result: batch invariance survives here.

use std::sync::Mutex;

use super::kernels::{BlockQ8A, Kernels, OutRows};
use super::model_weights::Matrix;
use super::pool::ThreadPool;

/// Most tasks one parallel region is split into: `TASKS_PER_THREAD` for each of 64 threads (a fixed array of slots
/// on the stack, so that a step allocates nothing).
pub const MAX_TASKS: usize = 256;
/// Weight rows per task are a multiple of this, so kernels run whole register tiles.
const ROW_ALIGN: usize = 16;
/// Tasks per thread: a few, so a thread that finishes early takes over work (the other core of these machines is
/// often busy with something else).
const TASKS_PER_THREAD: usize = 4;

/// The right-hand operand of a matmul: the batch's activations, quantized or not (`n_cols` token rows).
#[derive(Clone, Copy)]
pub enum Activations<'a> {
    /// `n_cols × row_len / 32` blocks.
    Q8(&'a [BlockQ8A]),
    /// `n_cols × row_len` floats.
    F32(&'a [f32]),
}

/// One matmul of a parallel region: `out[c][r] = w[r] · act[c]` for all rows of `w`.
pub struct MatmulJob<'w, 'o> {
    pub weights: &'w Matrix<'w>,
    /// `[n_cols][weights.n_rows()]`.
    pub out: &'o mut [f32],
}

/// Runs `jobs` (matmuls sharing the activations `act` of `n_cols` tokens) as one parallel region.
pub fn parallel_matmul(
    pool: &ThreadPool,
    kernels: &Kernels,
    act: Activations<'_>,
    n_cols: usize,
    jobs: &mut [MatmulJob<'_, '_>],
) {
    let total_rows: usize = jobs.iter().map(|j| j.weights.n_rows()).sum();
    // Each job adds at most one piece beyond its share of the target, hence the cap leaves room for one per job.
    let target_tasks = if pool.threads() == 1 { 1 } else { pool.threads() * TASKS_PER_THREAD };
    let target_tasks = target_tasks.min(MAX_TASKS - jobs.len());
    let rows_per_task = total_rows.div_ceil(target_tasks).next_multiple_of(ROW_ALIGN);

    let weights: [Option<&Matrix>; MAX_TASKS] = std::array::from_fn(|i| jobs.get(i).map(|j| j.weights));
    let slots: [Mutex<Option<(usize, OutRows<'_>)>>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let mut n_tasks = 0;
    for (job_index, job) in jobs.iter_mut().enumerate() {
        let n_rows = job.weights.n_rows();
        let mut rest = OutRows::new(&mut job.out[..n_cols * n_rows], n_cols, n_rows);
        while rest.rows().len() > rows_per_task {
            let at = rest.rows().start + rows_per_task;
            let (head, tail) = rest.split_at(at);
            *slots[n_tasks].lock().unwrap_or_else(|e| e.into_inner()) = Some((job_index, head));
            n_tasks += 1;
            rest = tail;
        }
        *slots[n_tasks].lock().unwrap_or_else(|e| e.into_inner()) = Some((job_index, rest));
        n_tasks += 1;
    }
    pool.run(n_tasks, &|task| {
        let Some((job_index, mut view)) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let w = weights[job_index].expect("every job has its weights");
        matmul_rows(kernels, act, w, n_cols, &mut view);
    });
}

/// `out(c, r) = w[r] · act[c]` for the rows of `out` and `n_cols` columns, on the calling thread: the kernel that
/// meets `act`'s type and `w`'s.
pub fn matmul_rows(kernels: &Kernels, act: Activations<'_>, w: &Matrix<'_>, n_cols: usize, out: &mut OutRows<'_>) {
    match (act, w) {
        (Activations::Q8(blocks), Matrix::Packed(w)) => kernels.matmul_packed(w, blocks, n_cols, out),
        (Activations::Q8(blocks), Matrix::File(w)) => kernels.matmul_q8(w, blocks, n_cols, out),
        (Activations::F32(values), Matrix::File(w)) => kernels.matmul_f32(w, values, n_cols, out),
        (Activations::F32(_), Matrix::Packed(_)) => unreachable!("the precise path packs nothing"),
    }
}

/// A task's share of a row-wise job: its first row and its rows of the destination.
type RowChunkSlot<'a> = Mutex<Option<(usize, &'a mut [f32])>>;

/// Runs `f(rows, chunk)` over the rows of `dst` (`width` floats each) split into contiguous chunks across the
/// pool, `chunk` being those rows of `dst`. Small jobs (under ~32k elements) run on the calling thread: a
/// parallel region would cost more than it saves.
pub fn parallel_rows_mut(
    pool: &ThreadPool,
    dst: &mut [f32],
    width: usize,
    f: &(dyn Fn(std::ops::Range<usize>, &mut [f32]) + Sync),
) {
    const MIN_PARALLEL_WORK: usize = 32 * 1024;
    let n_rows = dst.len() / width;
    if pool.threads() == 1 || n_rows < 2 || dst.len() < MIN_PARALLEL_WORK {
        f(0..n_rows, dst);
        return;
    }
    let n_tasks = (pool.threads() * TASKS_PER_THREAD).min(n_rows).min(MAX_TASKS);
    let per_task = n_rows.div_ceil(n_tasks);
    let slots: [RowChunkSlot<'_>; MAX_TASKS] = std::array::from_fn(|_| Mutex::new(None));
    let mut n_chunks = 0;
    for (i, chunk) in dst.chunks_mut(per_task * width).enumerate() {
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some((i * per_task, chunk));
        n_chunks += 1;
    }
    pool.run(n_chunks, &|task| {
        if let Some((first, chunk)) = slots[task].lock().unwrap_or_else(|e| e.into_inner()).take() {
            f(first..first + chunk.len() / width, chunk);
        }
    });
}
