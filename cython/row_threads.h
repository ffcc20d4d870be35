/* Rows of a CSR product split over threads, for the kernels of spmm_kernels.h and
 * attention_kernels.h. */
#ifndef HPCGNN_ROW_THREADS_H
#define HPCGNN_ROW_THREADS_H
#include <stdint.h>

#include <thread>
#include <vector>

/* Rows [0, rows) split into `threads` contiguous ranges of about equal entry counts; `body(start,
 * end, scratch)` runs each on its own thread with `scratch_len` floats of its own (rows are
 * independent: no synchronisation). One thread runs on the caller's. */
template <typename Body>
static void hpcgnn_rows_parallel(const int64_t* indptr, int64_t rows, int threads, int64_t scratch_len, Body body) {
    if (threads < 1) threads = 1;
    if ((int64_t)threads > rows) threads = (int)(rows > 0 ? rows : 1);
    std::vector<float> scratch((size_t)threads * (size_t)(scratch_len > 0 ? scratch_len : 1));
    if (threads == 1) {
        body(0, rows, scratch.data());
        return;
    }
    std::vector<std::thread> pool;
    const int64_t total = indptr[rows];
    int64_t start = 0;
    for (int t = 0; t < threads; t++) {
        int64_t end = start;
        if (t == threads - 1) {
            end = rows;
        } else {
            const int64_t goal = total / threads * (t + 1);
            while (end < rows && indptr[end] < goal) end++;
        }
        if (end > start) pool.emplace_back(body, start, end, scratch.data() + (size_t)t * (size_t)scratch_len);
        start = end;
    }
    for (auto& worker : pool) worker.join();
}
#endif
